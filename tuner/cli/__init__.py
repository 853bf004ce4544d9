"""The ``tuner`` command: one module per subcommand, registered on :data:`main`.

The CLI calls the library and never the reverse; every :class:`TunerError` becomes one
line on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

import click

from .. import bundled, interrupts
from ..errors import TunerError

#: The problem of every command that is given none: the bundled llm_decode.
DEFAULT_PROBLEM = bundled.default_problem()
#: Said in the help of every command that takes a problem.
PROBLEM_HELP = (f"PROBLEM is a problem file, or the name of a bundled problem (`tuner problems` lists them); "
                f"default: {bundled.DEFAULT_PROBLEM_NAME}.")


def fail(message: str) -> None:
    click.echo(f"tuner: error: {message}", err=True)
    sys.exit(2)


def warn(messages: tuple[str, ...] | list[str]) -> None:
    """Print each warning as one ``tuner: warning:`` line on stderr."""
    for message in messages:
        click.echo(f"tuner: warning: {message}", err=True)


def one_line_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the library's errors into ``tuner: error: …`` and exit code 2."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except TunerError as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))

    return wrapper


def storage_option(help: str = "Database URL (any SQLAlchemy/Optuna URL) or SQLite file") -> Callable[[Any], Any]:
    """``--storage``, shared by the commands that read or write the project database."""
    return click.option("--storage", envvar="TUNER_STORAGE", default="sqlite:///results.db", show_envvar=False,
                        callback=database_url, help=f"{help} [default: $TUNER_STORAGE or sqlite:///results.db]")


def database_url(ctx: click.Context | None, param: click.Parameter | None, value: str | None) -> str | None:
    """A ``--storage`` value as a URL: a plain path is a SQLite file (``results.db`` →
    ``sqlite:///results.db``), as the runtime reads it; a JSON export stays a path."""
    if value is None or "://" in value or value.endswith(".json"):
        return value
    return f"sqlite:///{value}"


class _Tuner(click.Group):
    """The ``tuner`` group: Ctrl-C in any command ends it with one line on stderr and exit
    code 130, the shell's code for SIGINT (click's own answer is a bare "Aborted!" and 1).
    A command with something to add (where its work is kept) says so itself first."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("tuner: interrupted", err=True)
            interrupts.exit_interrupted()


@click.group(cls=_Tuner, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tuner")
def main() -> None:
    """Load-aware autotuning: pick kernel configs by service goodput, not isolated latency."""


from . import attribute, gate, profile, simulate  # noqa: E402,F401  (registers the subcommands)
from . import tune  # noqa: E402,F401  (tuner tune)
from . import table  # noqa: E402,F401  (tuner table show|export)
from . import dashboard  # noqa: E402,F401  (tuner dashboard, tuner report --html)
from . import problems  # noqa: E402,F401  (tuner problems)


def _say_the_default_problem(group: click.Group) -> None:
    """Append :data:`PROBLEM_HELP` to the help of every command with a problem parameter
    (one sentence in one place, however many commands take a problem)."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            _say_the_default_problem(command)
        elif any(isinstance(param, click.Argument) and param.name == "problem" for param in command.params):
            command.help = f"{command.help or ''}\n\n{PROBLEM_HELP}"


_say_the_default_problem(main)

__all__ = ["DEFAULT_PROBLEM", "PROBLEM_HELP", "database_url", "fail", "main", "one_line_errors", "storage_option", "warn"]
