"""Collectives: the interconnect model (:mod:`tuner.profile.interconnect`) against published
NCCL measurements, fitted on one source and checked on others.

Data: ``benchmarks/data/comm_measurements.json`` (each point with its source and a quote;
``comm_measurements.md`` tells what was found and what was not). The split is set here,
before fitting, by source:

* **calibration** -- the 8x H200 SXM all-reduce sweep 32 KiB - 16 GiB (stas00/
  ml-engineering, NCCL 2.27.7, its default algorithm): fits ``α`` and ``bus_bw`` of the
  NVLink 4 preset (least squares on relative error); the same machine's all-gather and
  reduce-scatter at 16 GiB give ``copy_bus_bw`` (their mean).
* **validation** -- other machines and harnesses, never fitted: 8x H100 SXM all-reduce
  bus bandwidths at 2-4 GiB from NCCL's issue tracker (nccl#1455, nccl-tests#290), vLLM's
  NCCL all-reduce times on 6 H100s for 0.5-4 MiB (vllm#24111), OpenXLA's sm_90 8-device
  tables of all four collectives from 1 MiB (a different harness, whose smaller-message
  times are mostly XLA's own overhead), and the 8x A100 nccl-tests all-reduce sweep
  32 KiB - 16 GiB (stas00/ml-engineering) against the NVLink 3 preset, whose constants
  are carried over from the calibration (link rate x ring efficiency), not fitted.

Every prediction goes through the preset the simulator uses; the benchmark also checks
that the preset's constants are what this fit gives (rounded).

Usage::

    python benchmarks/bench_comm.py            # table and errors
    python benchmarks/bench_comm.py --json     # the same as JSON
    python benchmarks/bench_comm.py --record   # write benchmarks/results/bench_comm.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

from tuner.profile.interconnect import (  # noqa: E402
    COPY_EFFICIENCY, NVLINK3, NVLINK4, PRESETS, RING_EFFICIENCY, fit_alpha_beta, wire_factor)

from recorded import add_options, record  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "comm_measurements.json"
GB = 1e9
GIB = 1 << 30


def _time_from_busbw(point: dict) -> float:
    return point["bytes"] * wire_factor("all_reduce", point["gpus"]) / (point["value"] * GB)


def load_points(path: Path = DATA) -> list[dict]:
    return json.loads(path.read_text())["points"]


def calibration(points: list[dict]) -> tuple[list[dict], list[dict]]:
    """The all-reduce sweep, and the all-gather/reduce-scatter points, of the 8x H200."""
    sweep = [p for p in points if p["id"].startswith("h200-ar-torch-") and "ring" not in p["id"]]
    copies = [p for p in points if p["id"] in ("h200-16GiB-ag", "h200-16GiB-rs")]
    return sweep, copies


_XLA = {"all-reduce": "all_reduce", "all-gather": "all_gather", "reduce-scatter": "reduce_scatter",
        "all-to-all": "all_to_all"}


def validation(points: list[dict]) -> list[dict]:
    """Rows of the held-out sources, each as the quantity its source reports, with the
    collective and the interconnect preset that predicts it."""
    rows = []
    for p in points:
        pid = p["id"]
        if pid in ("h100-ar-nvls-8gpu", "h100-ar-476"):       # busbw of a 2-4 GiB all-reduce, 8 GPUs
            rows.append({**p, "at_bytes": 4 * GIB, "quantity": "busbw", "op": "all_reduce", "link": "nvlink4"})
        elif pid.startswith("h100-tp6-pynccl-"):              # microseconds per all-reduce, 6 GPUs
            rows.append({**p, "quantity": "us", "op": "all_reduce", "link": "nvlink4"})
        elif pid.startswith("xla-sm90-") and "-8gpu-" in pid and p["bytes"] >= 1 << 20:
            op = _XLA[pid[len("xla-sm90-"):pid.index("-8gpu-")]]   # algbw = tensor bytes / time
            rows.append({**p, "quantity": "algbw", "op": op, "link": "nvlink4"})
        elif pid.startswith("a100-ar-nccltests-"):            # nccl-tests time per all-reduce, 8 A100s
            rows.append({**p, "value": p["time_us"], "quantity": "us", "op": "all_reduce", "link": "nvlink3"})
    return rows


def predict(row: dict) -> float:
    link, op, gpus = PRESETS[row["link"]], row["op"], row["gpus"]
    if row["quantity"] == "busbw":
        size = row["at_bytes"]
        return wire_factor(op, gpus) * size / link.seconds(op, size, gpus, link.default_channels) / GB
    seconds = link.seconds(op, row["bytes"], gpus, link.default_channels)
    if row["quantity"] == "us":
        return seconds * 1e6
    return row["bytes"] / seconds / GB  # algbw


def _source(row: dict) -> str:
    """The validation source a row belongs to (errors are reported per source)."""
    pid = row["id"]
    if pid.startswith(("xla-", "h100-tp6", "a100-")):
        return pid.rsplit("-", 1)[0]
    return pid


def measure(path: Path = DATA) -> dict:
    points = load_points(path)
    sweep, copies = calibration(points)
    factor = wire_factor("all_reduce", 8)
    alpha, bus = fit_alpha_beta([p["bytes"] for p in sweep], [_time_from_busbw(p) for p in sweep], factor)
    copy_bus = float(np.mean([p["value"] for p in copies])) * GB
    rows = []
    for p in sweep:
        modeled = NVLINK4.seconds("all_reduce", p["bytes"], 8, NVLINK4.default_channels)
        measured = _time_from_busbw(p)
        rows.append({"id": p["id"], "split": "calibration", "collective": "all_reduce", "interconnect": "nvlink4",
                     "gpus": 8, "bytes": p["bytes"], "measured": measured * 1e6, "modeled": modeled * 1e6,
                     "unit": "us", "source": p["source"]})
    for p in sorted(validation(points), key=lambda p: (_source(p), p.get("at_bytes") or p["bytes"])):
        unit = {"busbw": "GB/s busbw", "us": "us", "algbw": "GB/s algbw"}[p["quantity"]]
        rows.append({"id": p["id"], "split": "validation", "collective": p["op"], "interconnect": p["link"],
                     "gpus": p["gpus"], "bytes": p.get("at_bytes") or p["bytes"], "measured": p["value"],
                     "modeled": predict(p), "unit": unit, "source": p["source"]})
    for r in rows:
        r["error_pct"] = 100.0 * (r["modeled"] / r["measured"] - 1.0)
    errors = {s: [abs(r["error_pct"]) for r in rows if r["split"] == s] for s in ("calibration", "validation")}
    by_source: dict[str, list[float]] = {}
    for r in rows:
        if r["split"] == "validation":
            by_source.setdefault(_source(r), []).append(abs(r["error_pct"]))
    return {
        "data": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
        "fitted": {"latency_s": alpha, "bus_bw": bus, "copy_bus_bw": copy_bus},
        # carried to links without a sweep of their own (NVLink 3, PCIe 5): link rate x these
        "carried": {"ring_efficiency": RING_EFFICIENCY, "copy_efficiency": COPY_EFFICIENCY,
                    "nvlink3_bus_bw": NVLINK3.bus_bw, "nvlink3_copy_bus_bw": NVLINK3.copy_bus_bw},
        "preset": {"latency_s": NVLINK4.latency_s, "bus_bw": NVLINK4.bus_bw, "copy_bus_bw": NVLINK4.copy_bus_bw,
                   "per_channel_bw": NVLINK4.per_channel_bw, "default_channels": NVLINK4.default_channels},
        "rows": rows,
        "calibration_error": float(np.mean(errors["calibration"])),
        "calibration_error_max": float(np.max(errors["calibration"])),
        "validation_error": float(np.mean(errors["validation"])),
        "validation_error_max": float(np.max(errors["validation"])),
        "validation_error_by_source": {k: float(np.mean(v)) for k, v in by_source.items()},
        "counts": {s: len(v) for s, v in errors.items()},
    }


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


def render(result: dict) -> str:
    lines = ["Collectives: interconnect model vs published measurements (NCCL's default channels per preset)", "",
             f"{'point':<38} {'collective':<14} {'link':<7} {'n':>2} {'size':>10} {'measured':>10} {'modeled':>10} "
             f"{'unit':<11} {'error':>8}  split", "-" * 130]
    for r in result["rows"]:
        size = _size(r["bytes"])
        lines.append(f"{r['id']:<38} {r['collective']:<14} {r['interconnect']:<7} {r['gpus']:>2} {size:>10} "
                     f"{r['measured']:>10.4g} {r['modeled']:>10.4g} {r['unit']:<11} {r['error_pct']:>+7.1f}%  {r['split']}")
    f = result["fitted"]
    lines += ["", f"mean |error|: calibration {result['calibration_error']:.1f} % (max {result['calibration_error_max']:.1f} %, "
                  f"{result['counts']['calibration']} points), validation {result['validation_error']:.1f} % "
                  f"(max {result['validation_error_max']:.1f} %, {result['counts']['validation']} points)"]
    lines += [f"  validation {source}: {err:.1f} %" for source, err in result["validation_error_by_source"].items()]
    lines += ["", f"fitted: alpha {f['latency_s'] * 1e6:.1f} us, all-reduce bus bandwidth {f['bus_bw'] / GB:.1f} GB/s; "
                  f"all-gather/reduce-scatter {f['copy_bus_bw'] / GB:.1f} GB/s "
                  "(tuner/profile/interconnect.py NVLINK4; per channel 36.7 GB/s is NCCL's constant, not fitted)",
              f"carried: NVLink 3 = 300 GB/s x ring efficiency {result['carried']['ring_efficiency']:.3f} "
              f"= {result['carried']['nvlink3_bus_bw'] / GB:.1f} GB/s all-reduce (copies x {result['carried']['copy_efficiency']:.3f})"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="measurements JSON")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    add_options(parser)
    args = parser.parse_args(argv)
    result = measure(args.data.resolve())
    if args.record:
        record("bench_comm", result, args.note)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
