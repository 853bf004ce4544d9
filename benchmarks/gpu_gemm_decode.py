"""The project's matmul kernels at a served model's GEMM shapes, measured on a GPU beside
the analytic model's latency, cuBLAS and the DRAM roofline.

Why: on measured vLLM runs the service simulator's steps come out far too long
(docs/sim2real.md), and the fitted step terms say a decode step's GEMMs run near 1/1.13 of
the peaks; this says how far the analytic kernel model is from the GPU on exactly those
shapes (Llama-2-7B's four linear layers at M = 1 to 2048), config by config, and how the
project's kernels compare with cuBLAS there.

Timing: each case is captured in a CUDA graph and replayed (as vLLM runs decode steps),
``--reps`` replays between two CUDA events after ``--warmup``; the mean per replay is
reported, so host launch cost is not timed. Predictions: ``ModeledProfile`` on the preset
matching the GPU (its SM count replaced by the GPU's), from the committed compile cache or
compiled for it. Nothing is fitted to these numbers.

Usage::

    python benchmarks/gpu_gemm_decode.py --out benchmarks/data/gpu_gemm_decode_measured.json
    python benchmarks/gpu_gemm_decode.py --predict [--preset h100]   # the model's numbers only

Without a CUDA GPU it prints one line and exits 0.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (str(ROOT), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

#: Llama-2-7B's linear layers on one GPU (gate and up as one GEMM, the epilogue apart).
LAYERS = {"qkv": (12288, 4096), "o_proj": (4096, 4096), "gate_up": (22016, 4096), "down": (4096, 11008)}
M_VALUES = (1, 16, 64, 256, 2048)
#: A spread of llm_decode.yaml's GEMM space: small and large tiles, split-K.
_FIXED = {"GROUP_M": 8, "PERSISTENT": False, "SM_MARGIN": 0, "FUSE_EPILOGUE": True}
CONFIGS = tuple({**_FIXED, **c} for c in (
    {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3, "SPLIT_K": 1},
    {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4, "SPLIT_K": 1},
    {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3, "SPLIT_K": 4},
    {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3, "SPLIT_K": 1},
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3, "SPLIT_K": 1},
))
NO_GPU = "gpu_gemm_decode: no CUDA GPU available ({why}); nothing measured, nothing written."


def label(config: dict[str, Any]) -> str:
    return "bm{BLOCK_M}_bn{BLOCK_N}_bk{BLOCK_K}_w{num_warps}_s{num_stages}_sk{SPLIT_K}".format(**config)


def modeled_ms(device: Any, config: dict[str, Any], shape: dict[str, int]) -> float | None:
    """The analytic model's latency (ms) of ``config`` at ``shape``; None when illegal."""
    from tuner.errors import IllegalConfigError
    from tuner.kernels import get_family
    from tuner.profile.modeled import LazyCompileCache, ModeledProfile

    profile = ModeledProfile(get_family("matmul"), tuple(config.items()), device, LazyCompileCache.from_environment())
    try:
        return 1e3 * profile.at(shape).latency_s
    except IllegalConfigError:
        return None


def roofline_ms(device: Any, shape: dict[str, int]) -> float:
    m, n, k = shape["M"], shape["N"], shape["K"]
    return 1e3 * max(2 * (m * k + k * n + m * n) / device.dram_bytes_per_s, 2 * m * n * k / device.bf16_flops_per_s)


def graph_ms(torch: Any, fn: Any, warmup: int, reps: int) -> float:
    """Mean ms per replay of ``fn`` captured in a CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()  # compile and warm outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(warmup):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def measure(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    import torch
    import triton
    from gpu_sharing import environment, preset_for
    from tuner.kernels import get_family

    family = get_family("matmul")
    props = torch.cuda.get_device_properties(0)
    device, note = preset_for(props.name, props.multi_processor_count)
    result: dict[str, Any] = {
        "benchmark": "gpu_gemm_decode", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "environment": environment(), "model": {"preset": device.name, "sms": device.sms, "note": note},
        "settings": {"warmup": args.warmup, "reps": args.reps, "timing": "CUDA graph replays between events; mean"},
        "rows": [], "errors": []}
    started = time.perf_counter()
    for op, (n, k) in LAYERS.items():
        for m in M_VALUES:
            shape = {"M": m, "N": n, "K": k}
            inputs = family.make_inputs(shape, seed=0, dtype="bf16", device="cuda")
            a, b = inputs["a"], inputs["b"]
            row: dict[str, Any] = {"op": op, **shape, "roofline_ms": roofline_ms(device, shape), "configs": {}}
            try:
                row["cublas_ms"] = graph_ms(torch, lambda: torch.matmul(a, b), args.warmup, args.reps)
            except Exception as exc:  # noqa: BLE001 - one failed case is a row, not the run
                result["errors"].append(f"{op} M={m} cublas: {type(exc).__name__}: {exc}"[:300])
            for config in CONFIGS:
                entry: dict[str, Any] = {"modeled_ms": modeled_ms(device, config, shape)}
                if entry["modeled_ms"] is not None:
                    try:
                        entry["measured_ms"] = graph_ms(torch, lambda: family.run(inputs, config, shape),
                                                        args.warmup, args.reps)
                    except Exception as exc:  # noqa: BLE001
                        result["errors"].append(f"{op} M={m} {label(config)}: {type(exc).__name__}: {exc}"[:300])
                row["configs"][label(config)] = entry
            result["rows"].append(row)
            result["settings"]["wall_s"] = round(time.perf_counter() - started, 1)
            out.write_text(json.dumps(result, indent=2) + "\n")  # saved after every shape
            print(render_row(row), flush=True)
    del triton
    return result


def render_row(row: dict[str, Any]) -> str:
    best = min(((c.get("measured_ms") or float("inf")), name) for name, c in row["configs"].items())
    modeled = min((c["modeled_ms"] for c in row["configs"].values() if c["modeled_ms"] is not None), default=None)
    cublas = row.get("cublas_ms")
    return (f"{row['op']:<8} M={row['M']:<5} roofline {row['roofline_ms'] * 1e3:8.1f} us  cuBLAS "
            f"{(cublas or float('nan')) * 1e3:8.1f} us  best measured {best[0] * 1e3:8.1f} us ({best[1]})  "
            f"best modeled {(modeled or float('nan')) * 1e3:8.1f} us")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "data" / "gpu_gemm_decode_measured.json")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--predict", action="store_true", help="the model's numbers only (no GPU)")
    parser.add_argument("--preset", default="h100")
    args = parser.parse_args(argv)
    if args.predict:
        from gpu_sharing import preset_for

        device, _ = preset_for(args.preset)
        for op, (n, k) in LAYERS.items():
            for m in M_VALUES:
                shape = {"M": m, "N": n, "K": k}
                cells = [modeled_ms(device, c, shape) for c in CONFIGS]
                best = min((c for c in cells if c is not None), default=float("nan"))
                print(f"{op:<8} M={m:<5} roofline {roofline_ms(device, shape) * 1e3:8.1f} us  "
                      f"best modeled {best * 1e3:8.1f} us")
        return 0
    from gpu_sharing import cuda_unavailable

    why = cuda_unavailable()
    if why is not None:
        print(NO_GPU.format(why=why))
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = measure(args, args.out)
    print(f"wrote {args.out} ({result['settings'].get('wall_s')} s, {len(result['errors'])} errors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
