"""``tuner table show`` and ``tuner table export``: read the config table a tune wrote.

Rows are keyed (problem, regime, operator, bucket); the goodput figures are the regime's
(every row of a regime carries them), so ``show`` prints them once per regime, then the
configs per bucket.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..problem.knobs import settings_text
from ..errors import TunerError, shown_value
from ..families import FamilySpec, family_spec
from ..stats import delta_text, ratio_text
from ..store.engine_args import DIALECTS
from ..store.row import bucket_label
from .group import main, one_line_errors, storage_option, table_storage
from .params import Choice

if TYPE_CHECKING:
    from ..store.row import TableRow


@main.group()
def table() -> None:
    """Show or export the config table."""


def _rows(storage: str, problem: str | None, *, one_problem: bool):
    from ..store import Store

    with Store(storage) as store:
        problems = store.problems()
        if problem is not None and problem not in problems:
            raise TunerError(f"{store.url}: no rows for problem {shown_value(problem)} "
                             f"(problems: {', '.join(problems) or 'none yet'})")
        if one_problem and problem is None:
            if len(problems) > 1:
                raise TunerError(f"{store.url}: the table holds several problems ({', '.join(problems)}); "
                                 "choose one with --problem")
            if not problems:
                raise TunerError(f"{store.url}: the table is empty (run `tuner tune --storage {store.url}`)")
            problem = problems[0]
        return problem, store.rows(problem)


@table.command()
@storage_option()
@click.option("--problem", default=None, help="Only this problem's rows (its name in the problem file).")
@click.option("--regime", "regimes", multiple=True, help="Only this regime's rows (repeatable).")
@click.option("--op", "ops", multiple=True, help="Only this operator's rows (repeatable).")
@click.option("--wide", is_flag=True,
              help="Every (regime, operator, bucket) with its parameters, workspace and full names, instead of "
                   "what differs from the baseline.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of row objects (TableRow.to_dict()).")
@one_line_errors
def show(storage: str, problem: str | None, regimes: tuple[str, ...], ops: tuple[str, ...], wide: bool,
         as_json: bool) -> None:
    """Print the config table: per regime its goodput against the baselines, then per
    (regime, operator) the buckets whose config differs from the baseline's (--wide: every
    bucket, in full)."""
    storage = table_storage(storage)
    _, rows = _rows(storage, problem, one_problem=False)
    rows = _filtered(rows, storage, regime=regimes, op=ops)
    if as_json:
        click.echo(json.dumps([row.to_dict() for row in rows], indent=2))
        return
    from rich.console import Console

    console = Console(width=None if Console().is_terminal else 200)
    if not rows:
        console.print(f"config table in {storage}: no rows yet")
        return
    console.print(regime_table(rows, storage))
    for row in _first_of_each_regime(rows):  # the regimes that hold THE baseline's configs, and why
        if row.guard:
            console.print(f"{row.problem} / {row.regime}: {row.guard}", highlight=False, soft_wrap=True)
    for problem_name, args in {r.problem: r.engine_args for r in rows if r.engine_args is not None}.items():
        shown = settings_text({name: tuple(value) if isinstance(value, list) else value  # JSON's lists
                               for name, value in args.items()})
        console.print(f"{problem_name}: engine arguments (every regime; start-up): {shown}; `tuner table export "
                      "--format vllm-args -` writes the command line", highlight=False, soft_wrap=True)
    console.print(config_table(rows) if wide else differences_table(rows))


def _filtered(rows: Sequence[TableRow], storage: str, **wanted: tuple[str, ...]) -> list[TableRow]:
    """The rows whose ``regime``/``op`` is among those asked for (all when none are).

    Raises:
        TunerError: a name no row has (the known names listed).
    """
    kept = list(rows)
    for field, names in wanted.items():
        if not names:
            continue
        known = list(dict.fromkeys(getattr(row, field) for row in kept))
        unknown = [name for name in names if name not in known]
        if unknown:
            raise TunerError(f"{storage}: --{field} {shown_value(unknown[0])}: no such {field} in the table "
                             f"({', '.join(known) or 'none'})")
        kept = [row for row in kept if getattr(row, field) in names]
    return kept


def differences_table(rows: Sequence[TableRow]) -> Any:
    """One line per (problem, regime, operator): ``= baseline`` where every bucket holds
    the per-bucket isolated-fastest config, else each bucket that does not, with both
    names. A 2,000-row table reads in a screen; ``--wide`` gives every row."""
    from rich.table import Table

    view = Table(title="configs per (regime, operator): where they differ from the per-bucket isolated-fastest "
                       "baseline (--wide: every bucket)", title_justify="left")
    for column in ("problem", "regime", "op", "buckets", "tuned config ← baseline's"):
        view.add_column(column, overflow="fold")
    grouped: dict[tuple[str, str, str], list[TableRow]] = {}
    for row in rows:
        grouped.setdefault((row.problem, row.regime, row.op), []).append(row)
    for (problem, regime, op), cells in grouped.items():
        differ = [r for r in cells if r.config != r.baseline_config]
        text = "= baseline" if not differ else "\n".join(
            f"{bucket_label(r.bucket_bounds) or 'all'}: {r.config} ← {r.baseline_config}" for r in differ)
        view.add_row(problem, regime, op, f"{len(differ)} of {len(cells)} differ" if differ else str(len(cells)),
                     text)
    return view


def regime_table(rows: Sequence[TableRow], storage: str) -> Any:
    """One line per (problem, regime): the tuned goodput against THE baseline (per-bucket
    isolated-fastest), their paired difference, and the one-config-per-operator baseline."""
    from rich.table import Table

    view = Table(title=f"config table in {storage}: goodput per regime (simulated, req/s; ± 95% CI)",
                 title_justify="left")
    for column, justify in (("problem", "left"), ("regime", "left"), ("rate\n(realised\nper seed)", "right"),
                            ("tuned", "right"),
                            ("baseline\n(per-bucket\nisolated-fastest)", "right"), ("tuned /\nbaseline", "right"),
                            ("tuned −\nbaseline\n(paired)", "right"), ("one config\nper operator", "right"),
                            ("oracle", "right"), ("capacity\ntuned /\nbaseline", "right"),
                            ("capacity\ntuned −\nbaseline", "right"), ("seeds ×\nhorizon", "right")):
        view.add_column(column, justify=justify)  # type: ignore[arg-type]
    view.add_column("study:trial", no_wrap=True)
    for row in _first_of_each_regime(rows):
        realised = "\n".join(f"{r:.3g}" for r in row.realized_rates_rps or ())
        overloaded = "\n(overloaded)" if row.overloaded_seeds or row.baseline_overloaded_seeds else ""
        capacity = _capacity(row)
        view.add_row(
            row.problem, row.regime, f"{_rate(row.regime_rate_rps)}\n{realised}".strip(),
            _with_ci(row.goodput_rps, row.goodput_ci_rps) + overloaded,
            f"{row.baseline_goodput_rps:.2f}", ratio_text(row.goodput_rps, row.baseline_goodput_rps),
            delta_text(row.goodput_rps - row.baseline_goodput_rps, row.delta_ci_rps),
            _maybe(row.one_config_goodput_rps), _maybe(row.oracle_goodput_rps), *capacity,
            f"{row.seeds} × {row.horizon_s:g} s\n(warm-up {row.warmup_s:g} s)\nmaximised {row.objective}",
            f"{row.study_name}:{row.trial_number}",
        )
    if any(r.overloaded_seeds or r.baseline_overloaded_seeds for r in rows):
        from ..sim.metrics import OVERLOADED  # numpy: not on every command's start-up

        view.caption = (f"{OVERLOADED}: the backlog grew through the window in some seed; compare capacities "
                        "(the highest rate meeting the SLO's attainment target)")
    return view


def _capacity(row: TableRow) -> tuple[str, str]:
    """Capacity ratio and paired difference tuned − baseline, or dashes when not stored."""
    if row.capacity_rps is None or row.baseline_capacity_rps is None:
        return "—", "—"
    return (f"{row.capacity_rps:.3g} / {row.baseline_capacity_rps:.3g}\n"
            f"{ratio_text(row.capacity_rps, row.baseline_capacity_rps)}",
            delta_text(row.capacity_rps - row.baseline_capacity_rps, row.capacity_delta_ci_rps))


def config_table(rows: Sequence[TableRow]) -> Any:
    """One line per (problem, regime, operator, bucket): the tuned config and the baseline's."""
    from rich.table import Table

    view = Table(title="configs per (regime, operator, bucket)", title_justify="left")
    for column in ("problem", "regime", "op", "bucket", "config", "params", "workspace at largest shape",
                   "baseline config", "source", "device"):
        view.add_column(column, overflow="fold")  # full names: --wide is for reading them
    for row in rows:
        params = ", ".join(f"{k}={v}" for k, v in row.params.items())
        baseline = "same" if row.baseline_config == row.config else row.baseline_config
        view.add_row(row.problem, row.regime, row.op, bucket_label(row.bucket_bounds) or "all", row.config, params,
                     workspace_text(row.workspace_bytes), baseline, row.source, row.device)
    return view


def workspace_text(nbytes: float | None) -> str:
    """A row's workspace (at its bucket's largest shape, as the simulator reserves it):
    ``0``, ``64 KiB``, ``1.5 MiB``, ``16 GiB``; ``—`` when the row does not say."""
    if nbytes is None:
        return "—"
    if nbytes == 0:
        return "0"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:.3g} {unit}"
    return f"{nbytes:.0f} B"


def _first_of_each_regime(rows: Sequence[TableRow]) -> list[TableRow]:
    """Every row of a regime carries the regime's figures: one row per (problem, regime)."""
    seen: dict[tuple[str, str], TableRow] = {}
    for row in rows:
        seen.setdefault((row.problem, row.regime), row)
    return list(seen.values())


def _with_ci(value: float, ci: float | None) -> str:
    return f"{value:.2f}" + ("" if ci is None else f" ± {ci:.2g}")


def _maybe(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:g}/s"


def moe_operators(problem_file: Path | None, problem: str, rows: Sequence[TableRow]
                  ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The operators of ``problem`` whose family is the built-in ``fused_moe`` kernel, each
    with its family's options (E, dtype, …: what vLLM's config file name needs and the
    table's rows do not carry), read from the problem file: ``problem_file``, else the
    bundled problem of that name. Only the file's structure is read (no kernel is built).

    Returns the mapping (empty when no file is found: the export then cannot tell a
    fused_moe operator from another, and a note says so) and notes.

    Raises:
        TunerError: an unreadable or malformed file, or one of another problem.
    """
    from .. import bundled
    from ..problem.load import read_spec

    if problem_file is None:
        problem_file = bundled.problem_file(problem)
        if not problem_file.is_file():
            return {}, [f"no problem file for {problem} (bundled or --problem-file): fused_moe operators, if any, "
                        "are exported like the others, not as vLLM's E=..,N=..,device_name=...json files"]
    elif not problem_file.is_file():
        raise TunerError(f"{problem_file}: --problem-file: no such file")
    raw, spec = read_spec(problem_file)
    if spec.name != problem:
        raise TunerError(f"{problem_file}: is problem {shown_value(spec.name)}, not {shown_value(problem)} "
                         "(the problem exported): name the file it was tuned from with --problem-file")
    moe = {}
    for op in spec.service.operators:
        family = spec.families.get(op.family)
        kind = _registered(family.kernel) if family is not None else None
        if kind is not None and kind.vllm_layout == "fused_moe":
            moe[op.name] = _with_defaults(kind, family.options, f"{problem_file}: families.{op.family}.options")
    notes = []
    if moe and hashlib.sha256(raw).hexdigest() not in {row.problem_hash for row in rows}:
        notes.append(f"{problem_file} is not the file the table was tuned from (another hash); fused_moe "
                     "options read from it as it is now")
    return moe, notes


def _registered(kernel: str | None) -> FamilySpec | None:
    """The registered family a problem file's ``kernel:`` names (None: a user's
    ``module:function`` kernel, or a declared profile)."""
    if kernel is None or ":" in kernel:
        return None
    try:
        return family_spec(kernel)
    except TunerError:  # not registered: loading the problem file says so; the export needs no more
        return None


def _with_defaults(spec: FamilySpec, options: dict[str, Any], key: str) -> dict[str, Any]:
    """A family's options with what its kernel's constructor defaults filled in (the
    spec's ``export_options``: a fused MoE file's ``experts``, ``top_k``, ``dtype``), as
    the tune that wrote the table built it. Builds the kernel (imports Triton): only for
    a family whose export needs them."""
    try:
        family = spec.build(**options)
    except TunerError as exc:
        raise TunerError(f"{key}: {exc}") from None
    return {**options, **{name: getattr(family, name) for name in spec.export_options if hasattr(family, name)}}


@table.command()
@click.option("--format", "fmt", type=Choice(["json", "vllm", *DIALECTS]), required=True,
              help="json: one project file the runtime loads; vllm: one file per (regime, op) in OUT/, "
                   "keyed by M so that vLLM's nearest-M lookup serves each bucket's config; a fused_moe "
                   "operator's file goes where vLLM's fused MoE layer reads it, "
                   "OUT/{problem}_{regime}/E=..,N=..,device_name=...json; vllm-args, sglang-args: the engine "
                   "knobs the table was tuned with (service.knobs), one `vllm serve` or SGLang launch "
                   "command line per regime.")
@click.argument("out", type=click.Path(path_type=Path))
@storage_option()
@click.option("--problem", default=None, help="The problem to export (needed when the table holds several).")
@click.option("--problem-file", type=click.Path(path_type=Path), default=None,
              help="--format vllm: the problem file the table was tuned from, for its fused_moe operators' "
                   "options (E, dtype); default: the bundled problem of that name.")
@click.option("--force", is_flag=True,
              help="Replace an existing file this command did not write (a file it wrote is replaced without it).")
@one_line_errors
def export(fmt: str, out: Path, storage: str, problem: str | None, problem_file: Path | None, force: bool) -> None:
    """Export one problem's config table to OUT (a file for json, a directory for vllm)."""
    from ..outputs import EXPORT_MARK, is_stdout, output_problem, output_target, refuse_foreign
    from ..store.export import export_json, export_vllm

    storage = table_storage(storage)
    chosen, rows = _rows(storage, problem, one_problem=True)
    if fmt in DIALECTS:
        _export_engine_args(chosen, rows, DIALECTS[fmt], out, force)
        return
    if is_stdout(out):
        if fmt != "json":
            raise TunerError("-: --format vllm writes a folder of files; name a directory")
        export_json(chosen, rows, out)
        click.echo(f"{len(rows)} rows of {chosen} written to standard output", err=True)
        return
    why = None if fmt == "vllm" and out.is_dir() else output_problem(out)  # (vllm writes into a folder)
    if why is not None:
        raise TunerError(f"{out}: {why}")
    if fmt == "json":
        out = output_target(out)
        refuse_foreign(out, EXPORT_MARK, force)
        export_json(chosen, rows, out)
        click.echo(f"{len(rows)} rows of {chosen} written to {out}")
        return
    moe, notes = moe_operators(problem_file, chosen, rows)
    files, export_notes = export_vllm(rows, out, moe)
    notes += export_notes
    for note in notes:
        click.echo(f"note: {note}")
    click.echo(f"{len(files)} files written to {out}/")


def _export_engine_args(problem: str, rows: Sequence[TableRow], dialect: Any, out: Path, force: bool) -> None:
    """``--format vllm-args|sglang-args``: the engine's command line per regime to OUT (``-``: standard output)."""
    from ..outputs import ENGINE_ARGS_MARK, is_stdout, output_problem, output_target, refuse_foreign, write_output
    from ..store.engine_args import engine_lines

    text = engine_lines(problem, rows, dialect)
    if not is_stdout(out):
        why = output_problem(out)
        if why is not None:
            raise TunerError(f"{out}: {why}")
        out = output_target(out)
        refuse_foreign(out, ENGINE_ARGS_MARK, force)
    write_output(out, text)
    where = "standard output" if is_stdout(out) else str(out)
    click.echo(f"{dialect.name} of {problem} ({len({row.regime for row in rows})} regimes) written to {where}",
               err=is_stdout(out))
