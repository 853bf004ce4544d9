"""The ``tuner`` command: one module per subcommand, registered on :data:`main`.

The CLI calls the library and never the reverse; every :class:`TunerError`, and every
error click finds in the command line, becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

from .group import (
    DEFAULT_PROBLEM, PROBLEM_HELP, database_error, database_url, fail, main, one_line_errors, say_the_default_problem,
    storage_option, warn,
)
from . import attribute, gate, profile, simulate  # noqa: F401  (registers the subcommands)
from . import tune  # noqa: F401  (tuner tune)
from . import table  # noqa: F401  (tuner table show|export)
from . import dashboard  # noqa: F401  (tuner dashboard, tuner report --html)
from . import problems  # noqa: F401  (tuner problems)
from . import families  # noqa: F401  (tuner families)
from . import check_run  # noqa: F401  (tuner check-run)
from . import init  # noqa: F401  (tuner init)
from . import knobs  # noqa: F401  (tuner knobs)
from . import replay  # noqa: F401  (tuner replay)

say_the_default_problem(main)

__all__ = ["DEFAULT_PROBLEM", "PROBLEM_HELP", "database_error", "database_url", "fail", "main", "one_line_errors",
           "storage_option", "warn"]
