"""Upgrade a tuner database's config table from schema version 3 to 4, in place.

Version 4 adds to every row what a config needs to run (``family``, ``family_options``,
``sms``, ``workspace_bytes``, ``resources``: see ``tuner.store.row.TableRow``). They
follow from the row's problem, operator, bucket and config alone, so they are computed
here exactly as ``tuner tune`` writes them (``tuner.problem.assignment.cell_requirements``)
from the bundled problem file of the row's problem; nothing else in the row changes. Used
once on the committed ``results.db.example`` rather than re-tuning every problem; a
user's own table is refused by the runtime and the store with the usual one line (tune
again), since its problem file may have changed since it was tuned.

    .venv/bin/python scripts/upgrade_table_v4.py results.db.example
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

from tuner.bundled import problem_file
from tuner.problem.assignment import cell_requirements
from tuner.problem.load import load_problem

NEW_COLUMNS = (("family", "VARCHAR(200)"), ("family_options", "JSON"), ("sms", "INTEGER"),
               ("workspace_bytes", "FLOAT"), ("resources", "JSON"))


def upgrade(path: Path) -> int:
    """Add and fill the version-4 columns; returns the rows filled.

    Raises:
        SystemExit: the database is not at version 3 (or 4 already: nothing to do).
    """
    connection = sqlite3.connect(path)
    try:
        (version,), = connection.execute("SELECT version FROM tuner_schema").fetchall()
        if version == 4:
            print(f"{path}: already at schema version 4")
            return 0
        if version != 3:
            raise SystemExit(f"{path}: schema version {version}, not 3: tune again instead")
        columns = {row[1] for row in connection.execute("PRAGMA table_info(tuner_configs)")}
        for name, kind in NEW_COLUMNS:
            if name not in columns:
                connection.execute(f"ALTER TABLE tuner_configs ADD COLUMN {name} {kind}")
        problems = {}
        filled = 0
        rows = connection.execute("SELECT rowid, problem, op, bucket, config FROM tuner_configs").fetchall()
        for rowid, problem_name, op, bucket, config_name in rows:
            if problem_name not in problems:
                problems[problem_name] = load_problem(problem_file(problem_name))
            problem = problems[problem_name]
            family = problem.families[problem.operator(op).family]
            config = family.find(name=config_name)
            if config is None:
                raise SystemExit(f"{path}: {problem_name}/{op}: config {config_name!r} is not in the problem file")
            fields = cell_requirements(problem, op, bucket, config)
            connection.execute(
                "UPDATE tuner_configs SET family = ?, family_options = ?, sms = ?, workspace_bytes = ?, "
                "resources = ? WHERE rowid = ?",
                (fields.get("family"), _json(fields.get("family_options")), fields.get("sms"),
                 fields.get("workspace_bytes"), _json(fields.get("resources")), rowid))
            filled += 1
        connection.execute("UPDATE tuner_schema SET version = 4")
        connection.commit()
        return filled
    finally:
        connection.close()


def _json(value: object) -> str | None:
    return None if value is None else json.dumps(value)


if __name__ == "__main__":
    for argument in sys.argv[1:] or ["results.db.example"]:
        print(f"{argument}: {upgrade(Path(argument))} rows filled")
