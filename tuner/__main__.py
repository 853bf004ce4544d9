from .cli.group import run

run()
