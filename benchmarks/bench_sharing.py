"""Per-SM DRAM bandwidth and SM sharing: the GPU layer against published measurements.

The GPU layer (:mod:`tuner.sim.gpu`) lets a memory-bound phase keep full speed on
``k = sm_need(s, b, compute, saturating_share)`` of the SMs, where ``saturating_share =
dram_bytes_per_s / (sms * sm_dram_bytes_per_s)``: each SM sustains at most
``DevicePreset.sm_dram_bytes_per_s`` of DRAM traffic (Little's law), so a kernel that
draws ``b`` of peak bandwidth alone needs ``b * saturating_share`` of the SMs and slows
in proportion below that. That constant was a placeholder (50 GB/s per SM on every
preset). This benchmark fits it, one value per GPU generation, on published
bandwidth-versus-SM-count curves, and checks the fitted value on measurements it was
not fitted on.

Data: ``benchmarks/data/sm_sharing.csv`` (sources and caveats in
``benchmarks/data/SOURCES-sm_sharing.md``). Each row is one measurement; ``split`` was
set before fitting:

* ``fit`` -- one bandwidth-vs-SMs curve per generation: NanoFlow's decode-attention GEMV
  on an A100 (Ampere) and a float4 copy on an H100 SXM5 (Hopper).
* ``holdout`` -- another shape of the same NanoFlow kernel; single-SM bandwidths and
  saturating SM counts of other kernels on an A100 40GB and an H200 (GH200); decode on
  40 of 114 SMs of an H100 PCIe (Bullet); a GEMV co-running with a GEMM on SM shares R
  and 1 - R (NanoFlow's interference table).

Every row is predicted through the project's own code paths: the kernel's phase demands
come from :func:`tuner.phases.sm_need` with the preset's ``saturating_share`` (the preset
with ``sm_dram_bytes_per_s`` replaced by the candidate value), and its speed on n SMs, or
next to a co-runner, is the rate :class:`tuner.sim.gpu.SharedGPU` gives it inside a
partition capped at that share. A row's ``full_gbs`` (the same kernel's bandwidth on
the whole device, measured by the same source) sets its DRAM demand ``b``; only the
per-SM bandwidth is fitted, by least squares on log(modeled / measured) over the fit rows
(a log-spaced scan, then golden-section refinement; numpy only).

Usage::

    python benchmarks/bench_sharing.py            # table, errors, fitted constants
    python benchmarks/bench_sharing.py --json     # the same as JSON

Exit status 0.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

from tuner.phases import Phase, sm_need  # noqa: E402
from tuner.profile.devices import A100, H100, H200, PRESETS, DevicePreset  # noqa: E402
from tuner.sim.gpu import SharedGPU  # noqa: E402

from recorded import add_options, record  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "sm_sharing.csv"
GB = 1e9

#: Device ids of the CSV -> (generation, preset). Variants are the project's presets with
#: the measured part's SM count and peak bandwidth (see SOURCES-sm_sharing.md).
DEVICES: dict[str, tuple[str, DevicePreset]] = {
    "a100-sxm4-80gb": ("ampere", A100),
    "a100-40gb": ("ampere", replace(A100, name="a100-40gb", dram_bytes_per_s=1.555e12, memory_bytes=40e9)),
    "h100-sxm5": ("hopper", H100),
    "h100-pcie": ("hopper", replace(H100, name="h100-pcie", sms=114, dram_bytes_per_s=2.0e12)),
    "h200-gh200": ("hopper", replace(H200, name="h200-gh200", dram_bytes_per_s=4.0e12)),
}
#: Which presets of tuner/profile/devices.py each generation's fitted value is for.
GENERATION_PRESETS = {"ampere": ("a100",), "hopper": ("h100", "h200")}
#: SM clocks the sources report (A100: Chips and Cheese's A100 SXM4 max boost; H100:
#: the clock the cuda_study measurements were taken at), for bytes per SM cycle.
CLOCK_HZ = {"ampere": 1.410e9, "hopper": 1.98e9}
#: The co-runner of the interference rows: a compute-bound GEMM (needs every SM it
#: occupies, DRAM demand neglected).
GEMM_PHASE: Phase = (1.0, 1.0, 0.0, 1.0, 0.0)
SCAN = np.geomspace(5e9, 500e9, 801)


@dataclass(frozen=True)
class Row:
    id: str
    device: str
    kind: str
    x: float          # SMs (bw_vs_sms, single_sm_bw, rel_perf_partition, saturating_sms) or share R
    value: float
    unit: str
    full_gbs: float
    split: str
    source: str
    note: str

    @property
    def generation(self) -> str:
        return DEVICES[self.device][0]


def load_rows(path: Path = DATA) -> list[Row]:
    with path.open(newline="") as f:
        rows = [Row(r["id"], r["device"], r["kind"], float(r["sms_or_share"]), float(r["value"]), r["unit"],
                    float(r["full_gbs"]), r["split"], r["source"], r["note"]) for r in csv.DictReader(f)]
    for r in rows:
        if r.device not in DEVICES or r.split not in ("fit", "holdout"):
            raise ValueError(f"row {r.id}: unknown device {r.device!r} or split {r.split!r}")
    return rows


def streaming_phase(device: DevicePreset, per_sm: float, full_gbs: float) -> tuple[DevicePreset, Phase]:
    """The device with ``sm_dram_bytes_per_s = per_sm`` and the phase of a streaming kernel
    that fills every SM slot and draws ``full_gbs`` alone (no SM-bound part)."""
    dev = replace(device, sm_dram_bytes_per_s=per_sm)
    b = min(1.0, full_gbs * GB / dev.dram_bytes_per_s)
    return dev, (1.0, 1.0, b, sm_need(1.0, b, 0.0, dev.saturating_share), 0.0)  # fluid: a grid-stride stream


def rates(caps: tuple[float, ...], launches: list[tuple[Phase, int]]) -> list[float]:
    """The rates SharedGPU gives ``launches`` (phase, partition), all started at t = 0."""
    gpu = SharedGPU(partitions=caps)
    kernels = [gpu.launch(0, i, f"k{i}", (phase,), 1.0, 0.0, 0.0, part) for i, (phase, part) in enumerate(launches)]
    gpu.run_until(0.0)  # every kernel leaves its (zero-length) launch phase and is allocated
    return [k.rate for k in kernels]


def predict(row: Row, per_sm: float) -> float:
    """The row's quantity as the GPU layer models it, with ``per_sm`` bytes/s per SM."""
    dev, phase = streaming_phase(DEVICES[row.device][1], per_sm, row.full_gbs)
    if row.kind in ("bw_vs_sms", "single_sm_bw", "rel_perf_partition"):
        rate = rates((min(1.0, row.x / dev.sms),), [(phase, 0)])[0]
        return rate if row.kind == "rel_perf_partition" else rate * row.full_gbs
    if row.kind == "saturating_sms":  # fewest SMs on which it keeps full speed
        return phase[3] * dev.sms
    if row.kind == "corun_rel_perf":  # share R for it, 1 - R for a GEMM beside it
        _gemm, gemv = rates((1.0 - row.x, row.x), [(GEMM_PHASE, 0), (phase, 1)])
        return gemv
    if row.kind == "gemm_beside_comm":  # a persistent GEMM's slowdown beside a kernel holding x SMs
        return wave_slowdown(dev, int(row.x), persistent=True)
    raise ValueError(f"row {row.id}: unknown kind {row.kind!r}")


#: The GEMM of the wave rows: issue 24's 8192^3 bf16 matmul, BLOCK 128x256x64, 8 warps, 3 stages.
WAVE_GEMM = {"M": 8192, "N": 8192, "K": 8192}
WAVE_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3,
               "SPLIT_K": 1, "FUSE_EPILOGUE": True}
_wave_phases: dict[tuple, tuple] = {}


def wave_slowdown(device: DevicePreset, held_sms: int, persistent: bool, discrete: bool = True) -> float:
    """The modeled GEMM's time beside a kernel that holds ``held_sms`` SMs for longer than
    it runs (NCCL's channels: one CTA each, one wave), over its time alone, through the
    discrete GPU layer (:mod:`tuner.sim.gpu`): the project's matmul family, its compiled
    resources from the committed compile cache, the analytic model. Nothing is fitted.
    ``discrete=False`` runs the fluid GPU layer of before issue 24, for contrast."""
    from tuner.kernels import get_family
    from tuner.profile.modeled import LazyCompileCache, ModeledProfile

    key = (device, persistent)
    if key not in _wave_phases:
        config = {**WAVE_CONFIG, "PERSISTENT": persistent}
        profile = ModeledProfile(get_family("matmul"), tuple(config.items()), device, LazyCompileCache.from_environment())
        ((_, phases),) = profile.launches(WAVE_GEMM, None, "gemm")
        _wave_phases[key] = phases
    phases = _wave_phases[key]
    alone = sum(p[0] for p in phases)
    holder = (1e3 * alone, held_sms / device.sms, 0.0, held_sms / device.sms, 1.0)
    gpu = SharedGPU(sms=device.sms if discrete else 0)
    gpu.launch(0, 0, "comm", (holder,), 1.0, 0.0, 0.0)
    gpu.launch(0, 1, "gemm", phases, 1.0, 0.0, 0.0)
    while (kernel := gpu.run_until(math.inf)) is not None:
        if kernel.tag == "gemm":
            return gpu.now / alone
    raise AssertionError("the GEMM never finished")


def log_loss(rows: list[Row], per_sm: float) -> float:
    return float(sum(math.log(predict(r, per_sm) / r.value) ** 2 for r in rows))


def fit(rows: list[Row]) -> float:
    """Least squares on log error over ``rows``: a log-spaced scan, then golden section."""
    losses = np.array([log_loss(rows, x) for x in SCAN])
    i = int(np.argmin(losses))
    lo, hi = math.log(SCAN[max(i - 1, 0)]), math.log(SCAN[min(i + 1, len(SCAN) - 1)])
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = log_loss(rows, math.exp(a)), log_loss(rows, math.exp(b))
    for _ in range(60):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = log_loss(rows, math.exp(a))
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = log_loss(rows, math.exp(b))
    return math.exp((lo + hi) / 2.0)


def mean_abs(errors: list[float]) -> float | None:
    return float(np.mean(np.abs(errors))) if errors else None


def measure(path: Path = DATA) -> dict:
    rows = load_rows(path)
    fitted: dict[str, dict] = {}
    for gen, presets in GENERATION_PRESETS.items():
        fit_rows = [r for r in rows if r.generation == gen and r.split == "fit"]
        per_sm = fit(fit_rows)
        fitted[gen] = {
            "sm_dram_bytes_per_s": per_sm,
            "presets": list(presets),
            "constant": "tuner.profile.devices.DevicePreset.sm_dram_bytes_per_s",
            "current_bytes_per_s": {p: PRESETS[p].sm_dram_bytes_per_s for p in presets},
            "saturating_share": {p: replace(PRESETS[p], sm_dram_bytes_per_s=per_sm).saturating_share for p in presets},
            "bytes_per_sm_cycle": per_sm / CLOCK_HZ[gen],
            "fit_rows": len(fit_rows),
        }
    out_rows = []
    for r in rows:
        modeled = predict(r, fitted[r.generation]["sm_dram_bytes_per_s"])
        out_rows.append({"id": r.id, "device": r.device, "kind": r.kind, "sms_or_share": r.x, "measured": r.value,
                         "modeled": modeled, "unit": r.unit, "error_pct": 100.0 * (modeled / r.value - 1.0),
                         "split": r.split, "source": r.source})
    errors = {s: [o["error_pct"] for o in out_rows if o["split"] == s] for s in ("fit", "holdout")}
    by_kind = {}
    for o in out_rows:
        if o["split"] == "holdout":
            by_kind.setdefault(o["kind"], []).append(o["error_pct"])
    return {
        "waves": wave_contrast(),
        "data": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
        "fitted": fitted,
        "rows": out_rows,
        "fit_error": mean_abs(errors["fit"]),
        "holdout_error": mean_abs(errors["holdout"]),
        "holdout_error_by_kind": {k: mean_abs(v) for k, v in by_kind.items()},
        "counts": {s: len(v) for s, v in errors.items()},
    }


def wave_contrast() -> dict:
    """The wave row's GEMM beside 13 held SMs, modeled four ways (no measurement to compare
    but the persistent one's): persistent or one CTA per tile, discrete or fluid."""
    return {f"{'persistent' if persistent else 'tiled'}_{'discrete' if discrete else 'fluid'}":
            wave_slowdown(H100, 13, persistent, discrete) for persistent in (True, False) for discrete in (True, False)}


def render(result: dict) -> str:
    lines = ["Per-SM DRAM bandwidth: GPU layer vs published measurements", "",
             f"{'row':<20} {'device':<15} {'kind':<19} {'SMs/R':>6} {'measured':>9} {'modeled':>9} "
             f"{'error':>8}  split", "-" * 100]
    for o in result["rows"]:
        lines.append(f"{o['id']:<20} {o['device']:<15} {o['kind']:<19} {o['sms_or_share']:>6g} {o['measured']:>9.4g} "
                     f"{o['modeled']:>9.4g} {o['error_pct']:>+7.1f}%  {o['split']}")
    lines += ["", f"mean |error|: fit {result['fit_error']:.1f} % ({result['counts']['fit']} rows), "
                  f"holdout {result['holdout_error']:.1f} % ({result['counts']['holdout']} rows)"]
    lines += [f"  holdout {kind}: {err:.1f} %" for kind, err in result["holdout_error_by_kind"].items()]
    waves = result["waves"]
    lines += ["", "8192^3 matmul (128x256x64) on an H100 beside a kernel holding 13 SMs, time / alone (modeled):",
              f"  persistent grid of 132: {waves['persistent_discrete']:.2f}x discrete waves "
              f"({waves['persistent_fluid']:.2f}x on the fluid GPU layer before issue 24); measured 2x (pytorch#143988)",
              f"  one CTA per tile (2048): {waves['tiled_discrete']:.2f}x discrete ({waves['tiled_fluid']:.2f}x fluid); "
              "not measured by the source"]
    lines += ["", "fitted DevicePreset.sm_dram_bytes_per_s (tuner/profile/devices.py), per generation:"]
    for gen, f in result["fitted"].items():
        shares = ", ".join(f"{d} {s:.2f}" for d, s in f["saturating_share"].items())
        now = ", ".join(f"{d} {v / GB:g}" for d, v in f["current_bytes_per_s"].items())
        lines.append(f"  {gen:<7} {f['sm_dram_bytes_per_s'] / GB:6.1f} GB/s per SM ({f['bytes_per_sm_cycle']:.1f} B/SM-cycle) "
                     f"-> presets {', '.join(f['presets'])} (now {now} GB/s); saturating_share then: {shares}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="measurements CSV")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    add_options(parser)
    args = parser.parse_args(argv)
    result = measure(args.data.resolve())
    if args.record:
        record("bench_sharing", result, args.note)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
