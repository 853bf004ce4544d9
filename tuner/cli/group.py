"""The ``tuner`` click group and what every subcommand shares: one-line errors, the
default problem, the ``--storage`` option.

Subcommand modules import from here and register on :data:`main`; ``tuner.cli``
imports them all, so the package sits above its commands and nothing imports it back.
"""

from __future__ import annotations

import inspect

import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any

import click

from .. import bundled, interrupts
from ..errors import TunerError, shortened, shown_value
from .usage import usage_line

#: The problem of every command that is given none: the bundled llm_decode.
DEFAULT_PROBLEM = bundled.default_problem()
#: Said in the help of every command that takes a problem.
PROBLEM_HELP = (f"PROBLEM is a problem file, or the name of a bundled problem (`tuner problems` lists them); "
                f"default: {bundled.DEFAULT_PROBLEM_NAME}.")


def fail(message: str) -> None:
    """Print ``tuner: error: MESSAGE`` on stderr and exit with code 2 (a user error)."""
    click.echo(f"tuner: error: {message}", err=True)
    sys.exit(2)


def warn(messages: tuple[str, ...] | list[str]) -> None:
    """Print each warning as one ``tuner: warning:`` line on stderr."""
    for message in messages:
        click.echo(f"tuner: warning: {message}", err=True)


def database_error(where: str, exc: BaseException) -> str:
    """``WHERE: cause`` for an error SQLAlchemy or Optuna raised: the first line of the
    innermost cause, since Optuna wraps "attempt to write a readonly database" in an
    error that blames "invalid data in the commit"."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    lines = str(exc).strip().splitlines()
    return f"{where}: {lines[0] if lines else type(exc).__name__}"


def one_line_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the library's errors into ``tuner: error: …`` and exit code 2."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except TunerError as exc:
            print_trace(exc)
            fail(str(exc))
        except OSError as exc:
            print_trace(exc)
            fail(f"{shortened(exc.filename or '')}: {exc.strerror or exc}".lstrip(": "))

    return wrapper


#: Set (to anything but "" or "0"), an error's one line follows the full trace of what
#: raised it: the user code's own exception included, which the line only names.
DEBUG_ENV = "TUNER_DEBUG"


def print_trace(exc: BaseException) -> None:
    """With ``$TUNER_DEBUG`` (or ``tuner --traceback``), the trace of the exception that
    caused ``exc`` (a user's builder raising ``KeyError``, which the one line names) and of
    ``exc`` itself, on stderr; nothing otherwise."""
    if os.environ.get(DEBUG_ENV, "") in ("", "0"):
        return
    chain: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in chain:  # `raise ... from None` hides the context: walk it anyway
        chain.append(link)
        link = link.__cause__ or link.__context__
    for raised in reversed(chain):  # the innermost first: the user's code, where the trouble began
        traceback.print_exception(raised, chain=False, file=sys.stderr)


#: ``--storage``'s default: a SQLite file in the working directory.
DEFAULT_STORAGE = "sqlite:///results.db"


def storage_option(help: str = "Database URL (any SQLAlchemy/Optuna URL) or SQLite file",
                   writes: bool = False) -> Callable[[Any], Any]:
    """``--storage``, shared by the commands that read or write the project database; a
    command that ``writes`` refuses an in-memory database (see :func:`kept_database_url`)."""
    return click.option("--storage", envvar="TUNER_STORAGE", default=DEFAULT_STORAGE, show_envvar=False,
                        callback=kept_database_url if writes else database_url,
                        help=f"{help} [default: $TUNER_STORAGE or sqlite:///results.db]")


def database_url(ctx: click.Context | None, param: click.Parameter | None, value: str | None) -> str | None:
    """A ``--storage`` value as a URL: a plain path is a SQLite file (``results.db`` →
    ``sqlite:///results.db``), as the runtime reads it; a JSON export stays a path."""
    if value is None or "://" in value or value.endswith(".json"):
        return value
    return f"sqlite:///{value}"


def table_storage(storage: str) -> str:
    """Where a command that reads a table reads it: ``storage``, except that the default
    ``results.db`` missing here gives way to the database the last ``tuner tune`` in this
    directory wrote (:func:`tuner.profile.user_cache.last_tune`), said on stderr. Called
    by the commands that do read one, and only then (``simulate`` without ``--policy``
    reads none)."""
    context = click.get_current_context(silent=True)
    given = context is not None and context.get_parameter_source("storage") not in (
        None, click.core.ParameterSource.DEFAULT)
    if given or storage != DEFAULT_STORAGE:  # (a --storage naming results.db means that file)
        return storage
    from ..profile.user_cache import local_or_last_tune

    remembered = local_or_last_tune()
    if remembered is None or remembered == DEFAULT_STORAGE:
        return storage
    click.echo(f"tuner: note: no results.db here; reading {remembered}, which the last tuner tune in this "
               "directory wrote", err=True)
    return remembered


def kept_database_url(ctx: click.Context | None, param: click.Parameter | None, value: str | None) -> str | None:
    """:func:`database_url`, refusing an in-memory SQLite database (``sqlite://``): a
    command that writes would report its rows or compiles written, and the database would
    be gone when tuner exits (each worker process would even get a database of its own)."""
    url = database_url(ctx, param, value)
    if url is not None and _in_memory(url):
        raise click.BadParameter(f"{shown_value(value)} is an in-memory database, gone when tuner exits; "
                                 "name a file (results.db) or a database server's URL")
    return url


def _in_memory(url: str) -> bool:
    """Whether ``url`` is a SQLite database in memory: no file, ``:memory:``, or a
    ``file:`` URI with ``mode=memory``."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:  # not a URL: the command's own open says why
        return False
    database = parsed.database or ""
    uri_in_memory = database.startswith("file:") and (database.startswith("file::memory:") or "mode=memory" in database)
    return parsed.get_backend_name() == "sqlite" and (database in ("", ":memory:") or uri_in_memory)


class _Tuner(click.Group):
    """The ``tuner`` group: every click error (a bad option value, a missing argument, an
    unknown option or command, in any command or subcommand) is one ``tuner: error:``
    line and exit code 2, as the library's errors are (:mod:`tuner.cli.usage`); bare
    ``tuner table`` still prints its help.

    Ctrl-C in any command ends it with one line on stderr and exit code 130, the shell's
    code for SIGINT (click's own answer is a bare "Aborted!" and 1). A command with
    something to add (where its work is kept) says so itself first."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        with _one_line_usage_errors():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with _one_line_usage_errors():
                return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("tuner: interrupted", err=True)
            interrupts.exit_interrupted()
        finally:
            if ctx.obj is _EXECUTABLE:  # the command is over, whatever its end: see run()
                interrupts.ignore_until_exit()


#: ``ctx.obj`` when the ``tuner`` executable runs the group (not a caller's CliRunner).
_EXECUTABLE = object()


def run() -> None:
    """The ``tuner`` executable (its console script and ``python -m tuner``): :data:`main`,
    told it owns its process, so that once the command is over a Ctrl-C is ignored: struck
    during click's teardown or the interpreter's exit it killed a finished run by SIGINT
    (exit -2 and no line, a ``--fresh`` tune's swap already done). Its SIGINT handler
    remembers a Ctrl-C that library code swallowed (:func:`tuner.interrupts.on_sigint`).
    In-process callers (click's CliRunner, tests) keep their own handler."""
    interrupts.install()
    try:
        main(obj=_EXECUTABLE)
    except SystemExit as exc:
        if interrupts.received():
            interrupts.exit_now(exc.code)
        raise


@contextmanager
def _one_line_usage_errors() -> Iterator[None]:
    """Click's errors as :func:`fail` lines; the request for help stays click's."""
    try:
        yield
    except click.ClickException as exc:
        if isinstance(exc, _HELP_REQUESTS):
            raise
        fail(usage_line(exc))


#: ``tuner table`` alone: click >= 8.2 raises this to print the group's help.
_HELP_REQUESTS = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``tuner --version``: the release, and which build of the simulator core runs
    (compiled or pure Python, and why: the speed of every command depends on it)."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import version

    from ..sim.native import BUILD

    click.echo(f"tuner {version('tuner')}, simulator core {BUILD}")
    ctx.exit()


def _debugging(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--traceback``: set ``$TUNER_DEBUG`` for this process and the helpers it starts."""
    if value:
        os.environ[DEBUG_ENV] = "1"


@click.group(cls=_Tuner, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version, and whether the simulator core runs compiled, and exit.")
@click.option("--traceback", is_flag=True, expose_value=False, is_eager=True, callback=_debugging,
              help=f"After an error's one line, print the full trace of what raised it (your code's included); "
                   f"the same as ${DEBUG_ENV}=1.")
def main() -> None:
    """Load-aware autotuning: pick kernel configs by service goodput, not isolated latency."""


def say_the_default_problem(group: click.Group) -> None:
    """Append :data:`PROBLEM_HELP` to the help of every command with a problem parameter
    (one sentence in one place, however many commands take a problem)."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            say_the_default_problem(command)
        elif any(isinstance(param, click.Argument) and param.name == "problem" for param in command.params):
            # cleaned first: a docstring's indented lines would read as preformatted text
            command.help = f"{inspect.cleandoc(command.help or '')}\n\n{PROBLEM_HELP}"
