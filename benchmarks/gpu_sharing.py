"""Measured SM sharing on a real GPU, beside the model's predictions (issue 24, item 8).

Two effects the GPU layer (:mod:`tuner.sim.gpu`) models and only a GPU can confirm,
measured with the project's own ``matmul`` family (``MatmulFamily.run``: the same launch
plan the model profiles) on CUDA streams:

(a) **Waves on the SMs actually free.** The 8192x8192x8192 bf16 GEMM of
    ``benchmarks/bench_sharing.py`` (BLOCK 128x256x64, 8 warps, 3 stages: one CTA per SM),
    persistent and sized to all SMs (``SM_MARGIN=0``) or to all SMs - 16
    (``SM_MARGIN=16``), and its one-CTA-per-tile twin, each timed alone and beside a
    *holder*: a spin kernel of 16 CTAs, each holding one SM (its shared memory leaves no
    room for a GEMM CTA, nor for a second holder CTA), launched first on another stream
    and spinning longer than the GEMM runs. The model: the full-device grid runs two
    rounds (about 2x), the margin-16 grid one (about 1x).
(b) **No preemption of resident CTAs.** A kernel on a high-priority stream
    (``torch.cuda.Stream(priority=-1)``) is submitted while a persistent full-device GEMM
    holds every SM; its start delay is measured with CUDA events (an event recorded on the
    idle priority stream just before it, one just after, less its own duration measured on
    an idle GPU) next to the GEMM's time left at submission. The model: it starts when the
    GEMM ends (delay = time left). Also measured: the same kernel behind the margin-16 grid
    (model: at once) and behind the one-CTA-per-tile grid (model: at the next wave end), and
    a one-warp kernel without shared memory behind the full grid, which fits beside a GEMM
    CTA on the same SM: the model, which counts an SM as held whole, says it waits; real
    hardware may start it at once (that row shows how far the whole-SM idealisation goes).

Timing: ``torch.cuda.Event`` pairs around each GEMM, after a one-CTA *gate* kernel that
spins on the same stream for ``--gate-ms`` so the host's launch overhead is not timed and
the holder is resident before the GEMM's CTAs are dispatched; ``--warmup`` untimed
repetitions, then ``--reps`` timed ones; the median is reported (min and max beside it).

Predictions come from the project's modeled path, as ``benchmarks/bench_sharing.py``
computes them (its :func:`wave_slowdown`, imported, and the same :class:`SharedGPU` with
discrete waves for the margin and priority cases): the matmul family's compiled resources
(committed compile cache), the analytic model, on the device preset matching the GPU
(its SM count replaced by the GPU's own). Nothing is fitted to these measurements.

Usage::

    python benchmarks/gpu_sharing.py --out benchmarks/data/gpu_sharing_measured.json
    python benchmarks/gpu_sharing.py --predict [--preset h100]   # the model's numbers only, no GPU

Without a CUDA GPU (or without torch) it prints one line and exits 0. About a minute on
an H100/H200, most of it compiling.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (str(ROOT), str(HERE)):  # run from a checkout without installing; bench_sharing's `recorded`
    if _path not in sys.path:
        sys.path.insert(0, _path)

try:  # the kernels below need Triton; without it the script still says "no GPU" and exits 0
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - the project depends on triton
    triton = None

DEFAULT_OUT = ROOT / "benchmarks" / "data" / "gpu_sharing_measured.json"
NO_GPU = "gpu_sharing: no CUDA GPU available ({why}); nothing measured, nothing written."

#: SMs the holder kernel holds: NCCL's channel count for NVLS on sm_90 (docs/communication.md),
#: and the margin of the carve-out variant.
HELD_SMS = 16
#: The holder's CTAs: 8 warps and a pipelined 128x256x64 bf16 dot prologue (the GEMM's own
#: tile), so each takes about 144 KiB of shared memory for its whole life: no GEMM CTA
#: (144 KiB) fits beside it on an SM of 228 KiB, nor a second holder CTA.
HOLD_BM, HOLD_BN, HOLD_BK, HOLD_WARPS, HOLD_STAGES = 128, 256, 64, 8, 3
#: The priority kernel of part (b): as heavy as a holder CTA (an NCCL-like kernel that
#: cannot share an SM with a GEMM CTA), 16 CTAs, spinning this long.
PRIORITY_SPIN_US = 20.0
#: When the priority kernel is submitted, as a fraction of the GEMM's measured time alone.
SUBMIT_AT = 0.5


# --- the model's predictions (CPU only) ----------------------------------------------------

def gemm_config(margin: int = 0, persistent: bool = True) -> dict[str, Any]:
    """bench_sharing's wave GEMM config with ``PERSISTENT`` and ``SM_MARGIN`` set."""
    from bench_sharing import WAVE_CONFIG

    return {**WAVE_CONFIG, "PERSISTENT": persistent, "SM_MARGIN": margin if persistent else 0}


CASES: dict[str, dict[str, Any]] = {
    "persistent_full": {"margin": 0, "persistent": True, "label": "persistent, all SMs"},
    "persistent_margin16": {"margin": HELD_SMS, "persistent": True, "label": f"persistent, SMs - {HELD_SMS}"},
    "tiled": {"margin": 0, "persistent": False, "label": "one CTA per tile"},
}


def preset_for(name: str, sms: int | None = None) -> tuple[Any, str]:
    """The device preset whose constants model a GPU called ``name`` (``torch``'s device
    name, or a preset name), with its SM count replaced by ``sms`` when given; and a note."""
    from tuner.profile.devices import H100, PRESETS

    lowered = name.lower()
    preset = PRESETS.get(lowered) or next((p for key, p in PRESETS.items() if key in lowered), None)
    note = f"preset {preset.name}" if preset is not None else f"no preset for {name!r}: h100's constants"
    if preset is None:
        preset = H100
    if sms is not None and sms != preset.sms:
        preset = replace(preset, sms=sms)
        note += f" with this GPU's {sms} SMs"
    return preset, note


_phases: dict[tuple, tuple] = {}


def modeled_phases(device: Any, config: dict[str, Any]) -> tuple:
    """The modeled GEMM's phases on ``device``, as bench_sharing's wave rows get them."""
    from bench_sharing import WAVE_GEMM
    from tuner.kernels import get_family
    from tuner.profile.modeled import LazyCompileCache, ModeledProfile

    key = (device, tuple(sorted(config.items())))
    if key not in _phases:
        profile = ModeledProfile(get_family("matmul"), tuple(config.items()), device,
                                 LazyCompileCache.from_environment())
        ((_, phases),) = profile.launches(WAVE_GEMM, None, "gemm")
        _phases[key] = phases
    return _phases[key]


def modeled_grid(device: Any, config: dict[str, Any]) -> int:
    """The GEMM's grid on ``device`` as the model plans it (persistent: SMs - margin)."""
    from bench_sharing import WAVE_GEMM
    from tuner.kernels import get_family
    from tuner.profile.modeled import LazyCompileCache, ModeledProfile

    profile = ModeledProfile(get_family("matmul"), tuple(config.items()), device, LazyCompileCache.from_environment())
    return int(profile.at(WAVE_GEMM).plan.launches[0].grid)


def modeled_resources(device: Any, config: dict[str, Any]) -> dict[str, Any]:
    """The GEMM launch's compiled resources as the model reads them (compile cache)."""
    from bench_sharing import WAVE_GEMM
    from tuner.kernels import get_family
    from tuner.profile.modeled import LazyCompileCache

    launch = get_family("matmul").plan(config, WAVE_GEMM, device.sms).launches[0]
    r = LazyCompileCache.from_environment().get_or_compile(launch, device)
    return {"shared_bytes": r.smem_bytes, "regs_per_thread": r.regs_per_thread, "num_warps": r.num_warps,
            "ctas_per_sm": r.ctas_per_sm}


def _holder_phase(device: Any, sms: int, seconds: float) -> tuple:
    """A kernel of ``sms`` one-SM CTAs, compute-bound, one wave of ``seconds``."""
    share = sms / device.sms
    return (seconds, share, 0.0, share, 1.0)


def modeled_beside(device: Any, config: dict[str, Any], held_sms: int = HELD_SMS) -> dict[str, float]:
    """The GEMM's modeled time alone and beside a kernel holding ``held_sms`` SMs for longer
    than it runs (launched first), on the discrete GPU layer. For margin 0 the ratio is
    bench_sharing's :func:`wave_slowdown` itself; for a margin, the same simulation."""
    from bench_sharing import wave_slowdown

    phases = modeled_phases(device, config)
    alone = sum(p[0] for p in phases)
    if not config.get("SM_MARGIN", 0):
        ratio = wave_slowdown(device, held_sms, bool(config["PERSISTENT"]))
    else:
        ratio = simulate_beside(device, phases, held_sms)
    return {"alone_s": alone, "beside_s": ratio * alone, "ratio": ratio}


def simulate_beside(device: Any, phases: tuple, held_sms: int) -> float:
    """``phases``' time beside a kernel holding ``held_sms`` SMs (launched first, spinning
    1000x longer) over their time alone: bench_sharing's wave_slowdown for any phases."""
    from tuner.sim.gpu import SharedGPU

    alone = sum(p[0] for p in phases)
    gpu = SharedGPU(sms=device.sms)
    gpu.launch(0, 0, "holder", (_holder_phase(device, held_sms, 1e3 * alone),), 1.0, 0.0, 0.0)
    gpu.launch(0, 1, "gemm", phases, 1.0, 0.0, 0.0)
    while (kernel := gpu.run_until(math.inf)) is not None:
        if kernel.tag == "gemm":
            return gpu.now / alone
    raise AssertionError("the GEMM never finished")


def modeled_priority(device: Any, config: dict[str, Any], submit_s: float, sms: int = HELD_SMS,
                     seconds: float = PRIORITY_SPIN_US * 1e-6) -> dict[str, float]:
    """A high-priority kernel of ``sms`` one-SM CTAs running ``seconds``, submitted
    ``submit_s`` after the GEMM started: its start delay and the GEMM's time left then."""
    from tuner.sim.gpu import SharedGPU

    phases = modeled_phases(device, config)
    gpu = SharedGPU(sms=device.sms)
    gemm = gpu.launch(0, 0, "gemm", phases, 1.0, 0.0, 0.0)
    gemm_end = None
    while (kernel := gpu.run_until(submit_s)) is not None:  # the GEMM may end before submission
        gemm_end = gpu.now
    prio = gpu.launch(-1, 1, "priority", (_holder_phase(device, sms, seconds),), 1.0, 0.0, submit_s)
    while (kernel := gpu.run_until(math.inf)) is not None:
        if kernel is gemm:
            gemm_end = gpu.now
    assert gemm_end is not None and prio.started >= 0.0
    return {"submit_s": submit_s, "start_delay_s": prio.started - submit_s,
            "gemm_left_s": max(gemm_end - submit_s, 0.0), "gemm_end_s": gemm_end}


def predictions(device: Any, submit_at: float = SUBMIT_AT, held_sms: int = HELD_SMS) -> dict[str, Any]:
    """Every number the model predicts for the measurements, on ``device``."""
    gemm = {}
    for name, case in CASES.items():
        config = gemm_config(case["margin"], case["persistent"])
        gemm[name] = {**modeled_beside(device, config, held_sms), "grid": modeled_grid(device, config)}
    full_alone = gemm["persistent_full"]["alone_s"]
    priority = {}
    for name in ("persistent_full", "persistent_margin16", "tiled"):
        case = CASES[name]
        config = gemm_config(case["margin"], case["persistent"])
        priority[name] = modeled_priority(device, config, submit_at * gemm[name]["alone_s"], held_sms)
    light = modeled_priority(device, gemm_config(0, True), submit_at * full_alone, 1, PRIORITY_SPIN_US * 1e-6)
    priority["persistent_full_light"] = light
    return {"device": device.name, "sms": device.sms, "held_sms": held_sms, "gemm": gemm, "priority": priority}


def predicted_ratios(device: Any = None, held_sms: int = HELD_SMS) -> dict[str, float]:
    """The headline ratios the model predicts (default device: the h100 preset): the GEMM's
    time beside ``held_sms`` held SMs over its time alone, per case, the margin's cost
    alone, and the priority kernel's start delay over the GEMM's time left."""
    from tuner.profile.devices import H100

    p = predictions(device or H100, held_sms=held_sms)
    g, pr = p["gemm"], p["priority"]
    out = {f"{name}_beside_over_alone": g[name]["ratio"] for name in g}
    out["margin16_alone_over_full_alone"] = g["persistent_margin16"]["alone_s"] / g["persistent_full"]["alone_s"]
    out["margin16_beside_over_full_alone"] = g["persistent_margin16"]["beside_s"] / g["persistent_full"]["alone_s"]
    for name, r in pr.items():
        out[f"priority_{name}_delay_over_left"] = r["start_delay_s"] / r["gemm_left_s"] if r["gemm_left_s"] else 0.0
    return out


# --- the kernels (Triton, launched only on a GPU) ------------------------------------------

if triton is not None:
    @triton.jit(do_not_specialize=["duration_ns", "iters", "stride"])  # stride 0 stays a runtime value
    def _hold_kernel(x_ptr, rec_ptr, duration_ns, iters, stride,
                     HOLD_SMEM: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        """Spin until ``duration_ns`` of %globaltimer have passed since the CTA started;
        with HOLD_SMEM a pipelined BMxBNxBK dot prologue first, whose operand buffers
        hold shared memory for the CTA's whole life. Records (smid, start, end, sink)."""
        start = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                          is_pure=False, pack=1)
        sink = 0.0
        if HOLD_SMEM:
            offs_m = tl.arange(0, BM)
            offs_n = tl.arange(0, BN)
            offs_k = tl.arange(0, BK)
            a_ptrs = x_ptr + offs_m[:, None] * BK + offs_k[None, :]
            b_ptrs = x_ptr + offs_k[:, None] * BN + offs_n[None, :]
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for i in range(iters):
                a = tl.load(a_ptrs + i * stride * BK)  # 128-byte steps: loads stay aligned
                b = tl.load(b_ptrs + i * stride * BK)
                acc = tl.dot(a, b, acc)
            sink = tl.sum(acc)
        now = start
        while now - start < duration_ns:
            now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                            is_pure=False, pack=1)
        smid = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)
        rec = rec_ptr + tl.program_id(0) * 4
        tl.store(rec, smid.to(tl.int64))
        tl.store(rec + 1, start)
        tl.store(rec + 2, now)
        tl.store(rec + 3, sink.to(tl.int64))


def hold_launch(ctas: int, hold_smem: bool):
    """The holder (or gate) as a :class:`KernelLaunch`, so the project's compile path can
    read its resources without a GPU (``tuner.profile.compiled.compile_launch``)."""
    from tuner.kernels._common import make_launch

    return make_launch(
        "hold", _hold_kernel,
        {"x_ptr": "*bf16", "rec_ptr": "*i64", "duration_ns": "i64", "iters": "i32", "stride": "i32"},
        {"HOLD_SMEM": hold_smem, "BM": HOLD_BM, "BN": HOLD_BN, "BK": HOLD_BK},
        num_warps=HOLD_WARPS if hold_smem else 1, num_stages=HOLD_STAGES if hold_smem else 1,
        grid_dims=(ctas,), persistent=True, flops=0.0, dram_bytes=0.0,
        bindings={"x_ptr": "x", "rec_ptr": "rec", "duration_ns": 1, "iters": 3, "stride": 1},  # unspecialised
    ).launch


# --- measuring (CUDA) ----------------------------------------------------------------------

def cuda_unavailable() -> str | None:
    """Why no CUDA GPU can be measured, or None when one can."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if triton is None:
        return "triton is not installed"
    try:
        if not torch.cuda.is_available():
            return f"torch.cuda.is_available() is False (torch {torch.__version__})"
    except Exception as e:  # noqa: BLE001 - a broken driver is also "no GPU"
        return f"torch.cuda failed: {e}"
    return None


def _driver_version() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=False)
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import ctypes

        lib = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(version)) == 0:
            return f"CUDA driver API {version.value // 1000}.{version.value % 1000 // 10}"
    except OSError:
        pass
    return None


def environment() -> dict[str, Any]:
    import torch

    props = torch.cuda.get_device_properties(0)
    return {
        "device": props.name, "sms": props.multi_processor_count,
        "compute_capability": f"{props.major}.{props.minor}",
        "memory_gib": round(props.total_memory / 2**30, 1),
        "driver": _driver_version(), "cuda": torch.version.cuda, "torch": torch.__version__,
        "triton": triton.__version__, "python": platform.python_version(),
        "stream_priority_range": list(torch.cuda.Stream.priority_range()),
    }


def _stats(samples_ms: list[float]) -> dict[str, Any]:
    return {"median_ms": statistics.median(samples_ms), "min_ms": min(samples_ms), "max_ms": max(samples_ms),
            "samples_ms": [round(s, 5) for s in samples_ms]}


class Bench:
    """The GPU side: inputs, streams and kernels, and one timed sample per call."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch
        from bench_sharing import WAVE_GEMM
        from tuner.kernels import get_family

        self.torch = torch
        self.args = args
        self.shape = dict(WAVE_GEMM)
        self.family = get_family("matmul")
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.inputs = self.family.make_inputs(self.shape, seed=0, dtype="bf16", device="cuda")
        self.main = torch.cuda.Stream(priority=0)
        self.side = torch.cuda.Stream(priority=0)
        self.high = torch.cuda.Stream(priority=-1)
        self.x = torch.zeros(max(HOLD_BM * HOLD_BK, HOLD_BK * HOLD_BN), dtype=torch.bfloat16, device="cuda")
        self.rec_hold = torch.zeros(4 * max(HELD_SMS, 1), dtype=torch.int64, device="cuda")
        self.rec_gate = torch.zeros(4, dtype=torch.int64, device="cuda")
        self.rec_prio = torch.zeros(4 * HELD_SMS, dtype=torch.int64, device="cuda")
        self.compiled: dict[str, Any] = {}

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def spin(self, name: str, rec, ctas: int, seconds: float, hold_smem: bool) -> None:
        """Launch the spin kernel on the current stream."""
        kernel = _hold_kernel[(ctas,)](
            self.x, rec, int(seconds * 1e9), 4, 0, HOLD_SMEM=hold_smem, BM=HOLD_BM, BN=HOLD_BN, BK=HOLD_BK,
            num_warps=HOLD_WARPS if hold_smem else 1, num_stages=HOLD_STAGES if hold_smem else 1)
        if name not in self.compiled and kernel is not None:
            self.compiled[name] = kernel

    def gemm(self, case: str):
        c = CASES[case]
        return self.family.run(self.inputs, gemm_config(c["margin"], c["persistent"]), self.shape)

    def gemm_sample(self, case: str, beside: bool, hold_s: float) -> dict[str, Any]:
        """One timed GEMM, alone or beside the holder; returns ms and the checks."""
        torch = self.torch
        torch.cuda.synchronize()
        h1 = self.event()
        if beside:
            with torch.cuda.stream(self.side):
                self.spin("holder", self.rec_hold, HELD_SMS, hold_s, True)
                h1.record()
        e0, e1 = self.event(), self.event()
        with torch.cuda.stream(self.main):
            self.spin("gate", self.rec_gate, 1, self.args.gate_ms * 1e-3, False)
            e0.record()
            out = self.gemm(case)
            e1.record()
        torch.cuda.synchronize()
        sample: dict[str, Any] = {"ms": e0.elapsed_time(e1)}
        if beside:
            rec = self.rec_hold.view(-1, 4).cpu()
            sample["holder_sms"] = len(set(rec[:, 0].tolist()))
            sample["holder_outlived_gemm"] = e1.elapsed_time(h1) > 0.0
        del out
        return sample

    def priority_sample(self, case: str, gemm_ms: float, light: bool) -> dict[str, Any]:
        """The priority kernel submitted ``SUBMIT_AT`` of ``gemm_ms`` into the GEMM."""
        torch = self.torch
        torch.cuda.synchronize()
        g0, g1, p0, p1 = self.event(), self.event(), self.event(), self.event()
        with torch.cuda.stream(self.main):
            self.spin("gate", self.rec_gate, 1, self.args.gate_ms * 1e-3, False)
            enqueued = time.perf_counter()
            g0.record()
            out = self.gemm(case)
            g1.record()
        wait = enqueued + self.args.gate_ms * 1e-3 + SUBMIT_AT * gemm_ms * 1e-3 - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        with torch.cuda.stream(self.high):
            p0.record()
            self.priority_kernel(light)
            p1.record()
        torch.cuda.synchronize()
        del out
        return {"submit_ms": g0.elapsed_time(p0), "gemm_left_ms": p0.elapsed_time(g1), "p_ms": p0.elapsed_time(p1),
                "gemm_ms": g0.elapsed_time(g1)}

    def priority_kernel(self, light: bool) -> None:
        if light:
            self.spin("priority_light", self.rec_prio, 1, PRIORITY_SPIN_US * 1e-6, False)
        else:
            self.spin("priority", self.rec_prio, HELD_SMS, PRIORITY_SPIN_US * 1e-6, True)

    def priority_alone_ms(self, light: bool) -> list[float]:
        """The priority kernel's event-to-event time on an idle GPU, recorded as in
        :meth:`priority_sample` (its own duration and the host's launch overhead)."""
        torch = self.torch
        out = []
        for i in range(self.args.warmup + self.args.reps):
            torch.cuda.synchronize()
            p0, p1 = self.event(), self.event()
            with torch.cuda.stream(self.high):
                p0.record()
                self.priority_kernel(light)
                p1.record()
            torch.cuda.synchronize()
            if i >= self.args.warmup:
                out.append(p0.elapsed_time(p1))
        return out


def _kernel_resources(kernel: Any) -> dict[str, Any]:
    meta = getattr(kernel, "metadata", None)
    return {"shared_bytes": int(getattr(meta, "shared", -1)) if meta is not None else None,
            "regs_per_thread": getattr(kernel, "n_regs", None), "num_warps": getattr(meta, "num_warps", None)}


def check_output(bench: Bench) -> dict[str, Any]:
    """Each case's output against torch's matmul (the timed kernels compute the product)."""
    torch = bench.torch
    ref = (bench.inputs["a"] @ bench.inputs["b"]).float()
    errors = {}
    for case in CASES:
        out = bench.gemm(case).float()
        errors[case] = float(((out - ref).abs().max() / ref.abs().max()).item())
    del ref
    torch.cuda.synchronize()
    return {"max_abs_error_over_max_abs": errors, "ok": all(e < 2e-2 for e in errors.values())}


def _attempt(errors: list[str], what: str, fn, *args):
    """``fn(*args)``, or None with the error recorded: one failed case must not lose the
    others' numbers (a GPU session may get one run)."""
    import traceback

    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - recorded in the JSON, and the exit status is 1
        errors.append(f"{what}: {type(e).__name__}: {e}")
        traceback.print_exc()
        return None


def gemm_row(bench: Bench, model: dict[str, Any], case: str, alone_ms: dict[str, float]) -> dict[str, Any]:
    """Part (a) for one GEMM case: alone, then beside the holder."""
    args = bench.args
    reps, warmup = args.reps, args.warmup
    config = gemm_config(CASES[case]["margin"], CASES[case]["persistent"])
    alone = [bench.gemm_sample(case, False, 0.0) for _ in range(warmup + reps)][warmup:]
    alone_ms[case] = statistics.median(s["ms"] for s in alone)
    hold_s = args.gate_ms * 1e-3 + args.hold_factor * alone_ms[case] * 1e-3 + 1e-3
    beside = [bench.gemm_sample(case, True, hold_s) for _ in range(warmup + reps)][warmup:]
    m = model["gemm"][case]
    return {
        "case": case, "label": CASES[case]["label"], "config": config,
        "grid": int(bench.family.plan(config, bench.shape, bench.sms - CASES[case]["margin"]).launches[0].grid),
        "held_sms": HELD_SMS, "holder_spin_ms": hold_s * 1e3,
        "alone": _stats([s["ms"] for s in alone]), "beside": _stats([s["ms"] for s in beside]),
        "measured_ratio": statistics.median(s["ms"] for s in beside) / alone_ms[case],
        "modeled": {"alone_ms": m["alone_s"] * 1e3, "beside_ms": m["beside_s"] * 1e3, "ratio": m["ratio"],
                    "grid": m["grid"]},
        "holder_distinct_sms": min(s["holder_sms"] for s in beside),
        "holder_outlived_gemm": all(s["holder_outlived_gemm"] for s in beside),
    }


#: Part (b)'s rows: (name, the GEMM case it runs behind, light priority kernel?).
PRIORITY_ROWS = (("persistent_full", "persistent_full", False),
                 ("persistent_margin16", "persistent_margin16", False),
                 ("tiled", "tiled", False),
                 ("persistent_full_light", "persistent_full", True))


def priority_row(bench: Bench, model: dict[str, Any], preset: Any, name: str, case: str, light: bool,
                 gemm_ms: float, own_ms: list[float]) -> dict[str, Any]:
    """Part (b) for one row: the priority kernel submitted mid-GEMM, ``SUBMIT_AT`` of
    ``gemm_ms`` (the GEMM's median time alone) after it started."""
    reps, warmup = bench.args.reps, bench.args.warmup
    taken = [bench.priority_sample(case, gemm_ms, light) for _ in range(warmup + reps)][warmup:]
    inside = [s for s in taken if 0.0 < s["submit_ms"] < s["gemm_ms"]]
    samples = inside or taken  # only submissions that fell inside the GEMM (the host's sleep may overshoot)
    own = statistics.median(own_ms)
    delays = [max(s["p_ms"] - own, 0.0) for s in samples]
    submit = statistics.median(s["submit_ms"] for s in samples)
    left = statistics.median(s["gemm_left_ms"] for s in samples)
    c = CASES[case]
    modeled = modeled_priority(preset, gemm_config(c["margin"], c["persistent"]),
                               submit / gemm_ms * model["gemm"][case]["alone_s"], 1 if light else HELD_SMS)
    return {
        "case": name, "gemm": case,
        "priority_kernel": "1 CTA, 1 warp, no shared memory" if light else f"{HELD_SMS} CTAs holding an SM each",
        "priority_kernel_spin_us": PRIORITY_SPIN_US, "priority_kernel_alone": _stats(own_ms),
        "samples_inside_gemm": len(inside),
        "gemm_with_priority_kernel": _stats([s["gemm_ms"] for s in samples]),
        "submit_after_gemm_start": _stats([s["submit_ms"] for s in samples]),
        "gemm_left_at_submit": _stats([s["gemm_left_ms"] for s in samples]),
        "start_delay": _stats(delays),
        "measured_delay_over_left": statistics.median(delays) / left if left > 0 else None,
        "modeled": {"submit_ms": modeled["submit_s"] * 1e3, "start_delay_ms": modeled["start_delay_s"] * 1e3,
                    "gemm_left_ms": modeled["gemm_left_s"] * 1e3,
                    "delay_over_left": (modeled["start_delay_s"] / modeled["gemm_left_s"]
                                        if modeled["gemm_left_s"] else 0.0)},
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    env = environment()
    preset, note = preset_for(env["device"], env["sms"])
    model = predictions(preset, held_sms=HELD_SMS)
    bench = Bench(args)
    errors: list[str] = []
    checks = _attempt(errors, "output check", check_output, bench)

    alone_ms: dict[str, float] = {}
    gemm_rows = [row for case in CASES
                 if (row := _attempt(errors, f"(a) {case}", gemm_row, bench, model, case, alone_ms)) is not None]
    own = {light: _attempt(errors, f"(b) priority kernel alone, light={light}", bench.priority_alone_ms, light)
           for light in (False, True)}
    prio_rows = []
    for name, case, light in PRIORITY_ROWS:
        if case in alone_ms and own[light]:
            row = _attempt(errors, f"(b) {name}", priority_row, bench, model, preset, name, case, light,
                           alone_ms[case], own[light])
            if row is not None:
                prio_rows.append(row)

    kernels: dict[str, Any] = {name: _kernel_resources(k) for name, k in bench.compiled.items()}
    kernels["matmul_modeled"] = _attempt(errors, "matmul resources", modeled_resources, preset, gemm_config())
    holder = kernels.get("holder", {}).get("shared_bytes")
    if holder is not None and holder >= 0 and kernels["matmul_modeled"]:  # the system reserves 1 KiB per CTA
        kernels["holder_leaves_no_room_for_a_gemm_cta"] = (
            holder + kernels["matmul_modeled"]["shared_bytes"] + 2048 > preset.smem_per_sm)
    return {
        "benchmark": "gpu_sharing",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "environment": env,
        "model": {"preset": preset.name, "sms": preset.sms, "note": note,
                  "path": "benchmarks/bench_sharing.py wave GEMM; tuner.sim.gpu.SharedGPU with discrete waves",
                  "predicted_ratios": predicted_ratios(preset)},
        "settings": {"shape": bench.shape, "dtype": "bf16", "held_sms": HELD_SMS, "reps": args.reps,
                     "warmup": args.warmup,
                     "gate_ms": args.gate_ms, "hold_factor": args.hold_factor, "submit_at": SUBMIT_AT,
                     "timing": "torch.cuda.Event pairs; median of reps"},
        "kernels": kernels,
        "checks": checks,
        "gemm_sharing": gemm_rows,
        "priority": prio_rows,
        "errors": errors,
    }


# --- output --------------------------------------------------------------------------------

def render_predictions(p: dict[str, Any]) -> str:
    lines = [f"Modeled (no GPU): 8192^3 bf16 matmul on {p['device']} ({p['sms']} SMs), "
             f"beside a kernel holding {p['held_sms']} SMs", "",
             f"{'case':<22} {'grid':>5} {'alone ms':>9} {'beside ms':>10} {'ratio':>6}", "-" * 56]
    for name, g in p["gemm"].items():
        lines.append(f"{name:<22} {g['grid']:>5} {g['alone_s'] * 1e3:>9.3f} {g['beside_s'] * 1e3:>10.3f} "
                     f"{g['ratio']:>5.2f}x")
    lines += ["", f"{'priority kernel behind':<24} {'submit ms':>9} {'delay ms':>9} {'left ms':>8}", "-" * 54]
    for name, r in p["priority"].items():
        lines.append(f"{name:<24} {r['submit_s'] * 1e3:>9.3f} {r['start_delay_s'] * 1e3:>9.3f} "
                     f"{r['gemm_left_s'] * 1e3:>8.3f}")
    return "\n".join(lines)


def render(result: dict[str, Any]) -> str:
    env = result["environment"]
    lines = [f"{env['device']} ({env['sms']} SMs), driver {env['driver']}, CUDA {env['cuda']}, torch {env['torch']}, "
             f"triton {env['triton']}; model: {result['model']['note']}", "",
             f"(a) 8192^3 bf16 matmul beside {HELD_SMS} held SMs (median of {result['settings']['reps']})", "",
             f"{'':<28} {'measured':^26} {'modeled':^26}",
             f"{'case':<22} {'grid':>5} {'alone ms':>8} {'beside ms':>9} {'ratio':>6}  {'alone ms':>8} "
             f"{'beside ms':>9} {'ratio':>6}  holder", "-" * 100]
    for r in result["gemm_sharing"]:
        m = r["modeled"]
        lines.append(f"{r['case']:<22} {r['grid']:>5} {r['alone']['median_ms']:>8.3f} {r['beside']['median_ms']:>9.3f} "
                     f"{r['measured_ratio']:>5.2f}x  {m['alone_ms']:>8.3f} {m['beside_ms']:>9.3f} {m['ratio']:>5.2f}x  "
                     f"{r['holder_distinct_sms']} SMs, {'outlived' if r['holder_outlived_gemm'] else 'ENDED EARLY'}")
    lines += ["", "(b) high-priority kernel submitted mid-GEMM: start delay vs the GEMM's time left", "",
              f"{'case':<24} {'submit ms':>9} {'left ms':>8} {'delay ms':>9} {'delay/left':>10} {'modeled':>8}",
              "-" * 74]
    for r in result["priority"]:
        ratio = r["measured_delay_over_left"]
        lines.append(f"{r['case']:<24} {r['submit_after_gemm_start']['median_ms']:>9.3f} "
                     f"{r['gemm_left_at_submit']['median_ms']:>8.3f} {r['start_delay']['median_ms']:>9.3f} "
                     f"{(ratio if ratio is not None else float('nan')):>10.2f} {r['modeled']['delay_over_left']:>8.2f}")
    kernels = result["kernels"]
    if kernels.get("holder_leaves_no_room_for_a_gemm_cta") is False:
        lines += ["", f"WARNING: the holder's shared memory ({kernels['holder']}) leaves room for a GEMM CTA "
                      "on its SMs: part (a) does not hold 16 whole SMs"]
    if any(r["holder_distinct_sms"] != HELD_SMS or not r["holder_outlived_gemm"] for r in result["gemm_sharing"]):
        lines += ["", f"WARNING: a holder ran on fewer than {HELD_SMS} SMs or ended before the GEMM"]
    if not (result["checks"] or {}).get("ok"):
        lines += ["", f"WARNING: a GEMM's output differs from torch's, or was not checked: {result['checks']}"]
    lines += [f"ERROR: {e}" for e in result.get("errors", [])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON file to write (default: %(default)s)")
    parser.add_argument("--reps", type=int, default=30, help="timed repetitions per case")
    parser.add_argument("--warmup", type=int, default=5, help="untimed repetitions before them")
    parser.add_argument("--gate-ms", type=float, default=1.0, help="gate kernel before each timed GEMM")
    parser.add_argument("--hold-factor", type=float, default=4.0,
                        help="the holder spins gate + this many times the GEMM's time alone + 1 ms")
    parser.add_argument("--predict", action="store_true", help="print the model's predictions only (no GPU)")
    parser.add_argument("--preset", default="h100", help="device preset for --predict")
    args = parser.parse_args(argv)
    if args.predict:
        preset, _ = preset_for(args.preset)
        print(render_predictions(predictions(preset)))
        return 0
    why = cuda_unavailable()
    if why is not None:
        print(NO_GPU.format(why=why))
        return 0
    start = time.perf_counter()
    result = measure(args)
    result["settings"]["wall_s"] = round(time.perf_counter() - start, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(render(result))
    print(f"\nwrote {args.out} ({result['settings']['wall_s']} s)")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
