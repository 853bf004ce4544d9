"""``tuner profile``: fill the compile cache for a problem, or answer one profile query."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from ..errors import TunerError
from .group import DEFAULT_PROBLEM, kept_database_url, main, one_line_errors
from .params import COUNT, Choice
from .progress import TerminalProgress, quiet_option

DEVICES = ["a100", "h100", "h200", "cuda"]


def _value(text: str) -> object:
    """What a typed value means: ``true``/``false``, an integer, a float, else the text."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _pairs(texts: tuple[str, ...], what: str) -> dict[str, object]:
    """``K=V,K=V`` (repeatable) → a dict with numbers and booleans parsed."""
    pairs: dict[str, object] = {}
    for text in texts:
        for item in filter(None, (part.strip() for part in text.split(","))):
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise TunerError(f"{what} {item!r}: expected KEY=VALUE")
            pairs[key.strip()] = _value(value.strip())
    return pairs


@main.command()
@click.argument("problem", required=False, type=click.Path(path_type=Path))
@click.option("--device", type=Choice(DEVICES), default=None,
              help="Device preset to profile on (default: the problem's); 'cuda' measures on this machine's GPU.")
@click.option("--storage", envvar="TUNER_STORAGE", default=None, callback=kept_database_url,
              help="Database of the compile cache (and of what --device cuda measures). [default: $TUNER_STORAGE, "
                   "else compiled.db in the user's cache directory: $TUNER_CACHE_DIR, $XDG_CACHE_HOME/tuner or "
                   "~/.cache/tuner; never ./results.db unless named]")
@click.option("--workers", default=2, show_default=True, type=COUNT, help="Processes compiling at once.")
@click.option("--family", default=None, help="Profile one shape of this kernel family instead of a problem.")
@click.option("--option", "options", multiple=True, metavar="K=V", help="Family option, e.g. epilogue=gated_silu.")
@click.option("--shape", "shape", multiple=True, metavar="K=V,...", help="Shape, e.g. M=16,N=4096,K=4096.")
@click.option("--config", "config", multiple=True, metavar="K=V,...", help="Config parameters (defaults fill the rest).")
@click.option("--best", is_flag=True, help="Pick the config with the lowest isolated latency (triton.autotune's choice).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@quiet_option
@one_line_errors
def profile(problem: Path | None, device: str | None, storage: str, workers: int, family: str | None,
            options: tuple[str, ...], shape: tuple[str, ...], config: tuple[str, ...], best: bool,
            as_json: bool, quiet: bool) -> None:
    """Profile kernel configs: compiled resources, occupancy and modeled latency."""
    if device == "cuda":
        from ..collect.measure import require_cuda

        require_cuda()
    from ..profile.cache import CompileCache
    from ..profile.user_cache import compile_cache_url
    from ..bundled import EXAMPLE_DATABASE

    if storage is None:
        storage, unwritable = compile_cache_url()
        if storage is None:
            raise TunerError(f"no compile cache to write: {unwritable}; set TUNER_CACHE_DIR to a writable directory "
                             "or give --storage")
    with CompileCache(storage, fallback=CompileCache.read_only(EXAMPLE_DATABASE)) as cache:
        if family is not None and problem is not None:
            if shape or config or best or options:
                raise TunerError("with PROBLEM, --family lists its configs in every bucket: --shape, --config, "
                                 "--option and --best go with --family alone")
            _family_in_problem(problem, family, device, cache, as_json)
        elif family is not None:
            _one(family, options, shape, config, best, device, cache, as_json)
        else:
            if shape or config or best or options:
                raise TunerError("--shape, --config, --option and --best go with --family")
            _fill(problem or DEFAULT_PROBLEM, device, cache, workers, as_json, quiet)


def _one(family_name: str, options: tuple[str, ...], shape_text: tuple[str, ...], config_text: tuple[str, ...],
         best: bool, device_name: str | None, cache: object, as_json: bool) -> None:
    from ..families import family_names, get_family
    from ..problem.model import same_value
    from ..profile.devices import PRESETS
    from ..collect.fill import profile_one

    if family_name not in family_names():
        raise TunerError(f"--family {family_name!r}: unknown kernel family (registered: {', '.join(family_names())}); "
                         "a family of a problem file, your own kernel's included: tuner profile PROBLEM --family NAME")
    family = get_family(family_name, **_pairs(options, "--option"))
    shape = _pairs(shape_text, "--shape")
    missing = [k for k in family.shape_keys if k not in shape]
    unknown = [k for k in shape if k not in family.shape_keys]
    if missing or unknown:
        raise TunerError(f"--shape: family {family_name!r} takes {', '.join(family.shape_keys)}"
                         + (f"; {missing[0]!r} is missing" if missing else f"; {unknown[0]!r} is not one"))
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shape.values()):
        raise TunerError(f"--shape: sizes must be positive integers but got {shape}")
    config = _pairs(config_text, "--config")
    for key, value in config.items():
        if key not in family.space:
            raise TunerError(f"--config {key}: not a parameter of {family_name} ({', '.join(family.space)})")
        if not any(same_value(value, allowed) for allowed in family.space[key]):
            raise TunerError(f"--config {key}={value!r}: outside the space {list(family.space[key])}")
    if best and config:
        raise TunerError("give --config or --best, not both")
    device = PRESETS[device_name or "h100"] if device_name != "cuda" else None
    if device is None:
        raise TunerError("--family with --device cuda is measured by `tuner profile PROBLEM --device cuda`")
    reason = None if best else family.illegal({**{k: v[0] for k, v in family.space.items()}, **config}, shape)
    if reason is not None:
        raise TunerError(f"{family_name} at {shape}: {reason}")
    from ..profile.collective import priced_profile

    if priced_profile(family, {k: v[0] for k, v in family.space.items()}, device) is not None:
        answer = _priced(family, shape, device, config, best)   # `comm`: NCCL's kernels, not Triton's
    else:
        answer = profile_one(family, shape, device, cache, config=config, best=best)
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    click.echo(f"{answer['family']} {answer['shape']} on {answer['device']} ({answer['source']}): "
               f"{answer['latency_s'] * 1e6:.1f} us, workspace {answer['workspace_bytes'] / 2**20:.1f} MiB")
    click.echo("  config " + ", ".join(f"{k}={v}" for k, v in answer["config"].items()))
    if "phases" in answer:
        for phase in answer["phases"]:
            click.echo(f"  {phase['name']}: {phase['seconds'] * 1e6:.1f} us, SM share {phase['sm_share']:.3f}, "
                       f"DRAM share {phase['dram_share']:.3f}, {phase['waves']:g} wave")
        return
    for launch in answer["launches"]:
        click.echo(f"  {launch['name']}: {launch['latency_s'] * 1e6:.1f} us, {launch['ctas']} CTAs, "
                   f"{launch['ctas_per_sm']}/SM ({launch['limiter']}), {launch['smem_bytes']} B smem, "
                   f"{launch['regs_per_thread']} regs, {launch['waves']} waves")


def _family_in_problem(path: Path, family: str, device: str | None, cache: object, as_json: bool) -> None:
    """``tuner profile PROBLEM --family F``: for each operator of the problem in family
    ``F`` (a built-in kernel's family, a user's kernel or a declared one, named as the file
    names it), each bucket's representative shape and every config's latency alone there,
    workspace and legality, whether the search keeps it (not dominated) and which THE
    baseline picks: why one config was chosen over another, bucket by bucket."""
    from ..problem import load_problem
    from ..search import JointSpace
    from ..search.baselines import PER_BUCKET
    from ..store.row import bucket_label

    if device == "cuda":
        raise TunerError("--family with PROBLEM lists modeled figures; measure with `tuner profile PROBLEM "
                         "--device cuda`")
    problem = load_problem(path, resources=cache, device=device)
    if family not in problem.families:
        raise TunerError(f"--family {family!r}: not a family of {path} ({', '.join(problem.families)})")
    space = JointSpace.of(problem)
    baseline = PER_BUCKET.assignment(space)
    cells = []
    for index, (op, bucket) in enumerate(space.cells):
        if problem.operator(op).family != family:
            continue
        bucketing = problem.operator(op).bucketing
        label = bucket_label(bucketing.buckets[bucket].as_dict() or None) or "all"
        kept, picked = set(space.choices[index]), baseline.config(op, bucket).name
        cells.append({"op": op, "bucket": label, "reached": space.reached(index), "configs": [
            {"config": c.config.name, "latency_s": c.latency_s, "workspace_bytes": c.workspace, "legal": c.legal,
             "searched": c.config.name in kept, "baseline": c.config.name == picked} for c in space.costs[index]]})
    if as_json:
        click.echo(json.dumps({"problem": problem.name, "family": family, "cells": cells}, indent=2))
        return
    for cell in cells:
        click.echo(f"{cell['op']} {cell['bucket']}" + ("" if cell["reached"] else " (not reached by the service)"))
        for c in cell["configs"]:
            latency = "illegal here" if not c["legal"] else f"{c['latency_s'] * 1e6:10.1f} us"
            marks = ", ".join(m for m, on in (("baseline", c["baseline"]), ("searched", c["searched"])) if on)
            click.echo(f"  {c['config']:<44} {latency:>13}  workspace {c['workspace_bytes'] / 2**20:9.2f} MiB"
                       + (f"  [{marks}]" if marks else ""))


def _priced(family: Any, shape: dict[str, Any], device: Any, config: dict[str, Any],
             best: bool) -> dict[str, Any]:
    """``tuner profile --family`` for a family priced by a model (``priced_profile``):
    nothing to compile; its modeled phases at the shape (``--best``: the fastest config)."""
    from ..kernels.family import all_configs
    from ..profile.collective import priced_profile

    defaults = {k: v[0] for k, v in family.space.items()}
    candidates = list(all_configs(family.space)) if best else [{**defaults, **config}]

    def latency(params: dict[str, Any]) -> float:
        return sum(phase[0] for _, phases in priced_profile(family, params, device).launches(shape, device, family.name)
                   for phase in phases)

    params = min(candidates, key=latency)
    profile = priced_profile(family, params, device)
    launches = profile.launches(shape, device, family.name)
    return {
        "family": family.name, "shape": shape, "device": device.name, "source": profile.source,
        "config": params, "latency_s": latency(params), "workspace_bytes": profile.workspace_bytes(shape),
        "phases": [{"name": name, "seconds": t, "sm_share": s, "dram_share": b, "sm_need": k, "waves": w}
                   for name, phases in launches for t, s, b, k, w in phases],
    }


def _fill(path: Path, device: str | None, cache: object, workers: int, as_json: bool, quiet: bool) -> None:
    from ..problem import load_problem
    from ..collect.fill import fill_problem

    if device == "cuda":
        from ..collect.measure import measure_problem

        problem = load_problem(path, resources=cache)
        with _counted("measuring", "configs", quiet) as step:
            report = measure_problem(problem, cache, progress=step)
        click.echo(json.dumps(report, indent=2) if as_json else report["summary"])
        return
    problem = load_problem(path, resources=cache, device=device)
    with _counted("compiling", "kernels", quiet) as step:
        report = fill_problem(problem, cache, workers=workers, progress=step)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
        return
    click.echo(f"{report.problem} on {report.device}: {report.launches} launches, {report.compiled_keys} "
               f"distinct compiles, {report.seconds:.1f} s")
    for fam in report.families:
        click.echo(f"  {fam.family} ({fam.kernel}): {fam.legal}/{fam.configs} configs legal")
        for reason, count in fam.illegal_reasons.most_common(3):
            click.echo(f"    {count} illegal: {reason}")


@contextmanager
def _counted(stage: str, unit: str, quiet: bool) -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` callback shown as :class:`~tuner.cli.progress.Progress`
    does: a cold compile cache or a GPU measurement takes minutes."""
    with TerminalProgress("tuner profile", unit, quiet, transient=True) as shown:
        shown.start(stage)
        yield shown.update
