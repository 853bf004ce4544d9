"""Click's own errors (a bad option value, a missing argument, an unknown option or
command) as the one line every tuner error is: ``--horizon: 'abc' is not a number``.

Click prints a four-line ``Usage:/Try …/Error: Invalid value for …`` block and echoes
the value whole; a script reading stderr, or a user, then meets two formats. The
``tuner`` group (:class:`tuner.cli._Tuner`) passes every such error through
:func:`usage_line`, in one place for every command and subcommand.
"""

from __future__ import annotations

import click

from ..errors import SHOWN_CHARS, shown_value

#: The most characters of a message click wrote itself (it may echo the command line).
MESSAGE_CHARS = 2 * SHOWN_CHARS


def usage_line(exc: click.ClickException) -> str:
    """The error as ``NAME: cause``: the option or argument, then why in words."""
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.MissingParameter) and exc.param is not None:
        if isinstance(exc.param, click.Argument):
            return f"{param_name(exc.param)}: missing argument (usage: {_usage(ctx)})"
        return f"{param_name(exc.param)}: missing required option"
    if isinstance(exc, click.BadParameter) and exc.param is not None:
        return f"{param_name(exc.param)}: {_sentence(exc.message)}"
    if isinstance(exc, click.NoSuchOption):
        guess = f"; did you mean {' or '.join(exc.possibilities)}?" if exc.possibilities else ""
        return f"{_name(exc.option_name)}: not an option{_of(ctx)}{guess}"
    if isinstance(exc, click.BadOptionUsage):
        flag = "does not take a value" in exc.message  # click raises both without the command's context
        return f"{_name(exc.option_name)}: {'a flag takes no value' if flag else 'needs a value'}"
    command = getattr(exc, "command_name", None)  # click >= 8.4: NoSuchCommand
    if command is not None and ctx is not None and isinstance(ctx.command, click.Group):
        return f"{_name(command)}: no such command (commands: {', '.join(ctx.command.list_commands(ctx))})"
    message = _sentence(exc.format_message())
    return message if ctx is None else f"{message} (usage: {_usage(ctx)})"


def param_name(param: click.Parameter) -> str:
    """How the user writes the parameter: its long option (``--jobs``, not ``-j``) or
    an argument's metavar (``PROBLEM``)."""
    if isinstance(param, click.Option):
        return max(param.opts, key=len)
    return param.human_readable_name


def _usage(ctx: click.Context | None) -> str:
    """``tuner gate [OPTIONS] BASE CAND``: what the command takes."""
    if ctx is None:
        return "tuner --help"
    return f"tuner {' '.join(_path(ctx))} {' '.join(ctx.command.collect_usage_pieces(ctx))}".replace("  ", " ")


def _of(ctx: click.Context | None) -> str:
    """`` of tuner simulate``: the command an unknown option was given to."""
    return "" if ctx is None else f" of {' '.join(['tuner', *_path(ctx)])}"


def _path(ctx: click.Context) -> list[str]:
    """The subcommand names down to ``ctx`` (``table export``), without the program's own
    name (``tuner``, ``python -m tuner``, or a test runner's)."""
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return names[::-1]


def _name(text: str) -> str:
    """An option or command name the user typed, capped like any echoed value."""
    return text if len(text) <= SHOWN_CHARS else shown_value(text)


def _sentence(message: str) -> str:
    """Click's message as a clause of the line: no capital, no full stop, capped."""
    text = " ".join(message.split())
    text = text[:1].lower() + text[1:]
    text = text.removesuffix(".")
    return text if len(text) <= MESSAGE_CHARS else f"{text[:MESSAGE_CHARS]}… ({len(text):,} characters)"
