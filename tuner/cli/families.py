"""``tuner families``: the registered kernel families, and where each came from.

A family from your own package enters through a ``tuner.families`` entry point
(``docs/kernel-families.md``); this is how to see that tuner found it, what the analytic
model prices it as, and whether a server can ask what its configs need.
"""

from __future__ import annotations

import json

import click

from .group import main, one_line_errors


@main.command()
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list of {name, origin, kernel, cost, requirements, runtime_names}.")
@one_line_errors
def families(as_json: bool) -> None:
    """List the registered kernel families a problem file's `kernel:` may name.

    Bundled families, and yours: those your packages name under the `tuner.families`
    entry-point group. Nothing is imported beyond the families' specs (no Triton).
    """
    from ..families import broken_entry_points, family_names, family_origin, family_spec

    entries = []
    for name in family_names():
        spec = family_spec(name)
        kernel = spec.kernel if isinstance(spec.kernel, str) else \
            f"{getattr(spec.kernel, '__module__', '?')}:{getattr(spec.kernel, '__qualname__', '?')}"
        entries.append({"name": name, "origin": family_origin(name), "kernel": kernel, "cost": spec.cost,
                        "requirements": spec.judges_requirements,
                        "runtime_names": None if spec.runtime_names is None else dict(spec.runtime_names)})
    broken = broken_entry_points()
    if as_json:
        click.echo(json.dumps(entries + [{"name": name, "broken": why} for name, why in broken.items()], indent=2))
        return
    width = max(len(entry["name"]) for entry in entries) + 2
    for entry in entries:
        needs = "requirements known" if entry["requirements"] else "requirements unknown"
        served = "" if entry["runtime_names"] is None else ", runtime.autotune(names=...)"
        click.echo(f"{entry['name']:<{width}}{entry['cost']} cost, {needs}{served}; {entry['origin']}")
        click.echo(" " * width + entry["kernel"])
    for name, why in broken.items():
        click.echo(f"{name:<{width}}not registered: {why}")
    click.echo(f"\n{len(entries)} families (a kernel of your own: docs/kernel-families.md)")
