"""The version of the tuner tables' schema (kept apart so readers of exports need no SQLAlchemy)."""

#: Version of the tuner tables this code reads and writes; ``tuner_schema`` holds it.
SCHEMA_VERSION = 1
