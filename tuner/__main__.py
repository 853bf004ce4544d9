"""The ``tuner`` executable (its console script and ``python -m tuner``).

Importing the commands takes a while (numpy, Optuna, SQLAlchemy, click: about a second
on a slow machine), and a Ctrl-C in that second reached no handler of ours: Python
printed the import's traceback. So the import happens here, inside the same contract as
every command: one ``tuner: interrupted`` line and exit code 130, nothing written.
"""

from __future__ import annotations

import sys

#: The shell's exit code for a process ended by SIGINT (128 + 2).
INTERRUPTED = 130


def main() -> None:
    """Import the command group and run it; a Ctrl-C before its own handler is in place
    (during the imports) ends the process as a Ctrl-C inside a command does."""
    try:
        from .cli.group import run
    except KeyboardInterrupt:
        sys.stderr.write("tuner: interrupted\n")
        sys.exit(INTERRUPTED)
    run()


if __name__ == "__main__":
    main()
