"""Compile a launch for a GPU architecture, without a GPU, and read what it uses.

Two halves, because they depend on different things:

* :func:`compile_usage` — what the *architecture* decides: Triton compiles the launch for
  ``GPUTarget("cuda", cc, 32)`` (no driver involved), ``metadata.shared`` gives the
  dynamic shared memory, and ``cuobjdump -res-usage`` (bundled with Triton) on the cubin
  gives registers per thread and the stack frame (spills). H100 and H200 are both sm_90,
  so they share this half.
* :func:`on_device` — what the *device* decides: the occupancy rules with the device's
  limits (:func:`tuner.profile.occupancy.occupancy`).

What is compiled is what the JIT would build for the real launch: the ``ASTSource`` comes
from :func:`tuner.kernels.family.ast_source`, with the divisibility hints the launch
declares (``launch.divisible_by_16``: without them loads do not vectorise and the
pipeliner keeps one stage, so shared memory would be underestimated), and FP fusion is
passed explicitly with the value the JIT would use (Triton 3.9's
``TRITON_DEFAULT_FP_FUSION`` knob), which also keeps Triton from warning about the
default changing in 3.10.

Shared memory is ``metadata.shared`` alone: Triton allocates all of a kernel's shared
memory dynamically. The 1 KB of *static* shared memory cuobjdump shows for sm_90 kernels
that use shared memory is the per-CTA system reservation (the ``.nv.shared.reserved``
section ptxas emits on Hopper), which the occupancy rules already add once.

A config that does not compile is an answer, not a failure: :func:`compile_usage` returns
its error's first line and :func:`on_device` turns it into occupancy 0. Only a broken
toolchain (no cuobjdump, unreadable output) raises.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.kernels.family import KernelLaunch, ast_source
from tuner.profile.devices import DevicePreset
from tuner.profile.occupancy import occupancy
from tuner.profile.resources import CompiledResources

WARP_SIZE = 32


@dataclass(frozen=True)
class ArchUsage:
    """What one compile of a launch for one architecture tells us.

    ``error`` is None when the launch compiled, else the first line of the compiler's
    error (the other fields are then 0). ``spill_bytes`` is the per-thread local memory
    ptxas gave the kernel (stack frame plus local arrays; Triton kernels have no local
    arrays, so this is register spills). ``compile_seconds`` is informational.
    """

    arch: str
    smem_bytes: int
    regs_per_thread: int
    spill_bytes: int = 0
    error: str | None = None
    compile_seconds: float = field(default=0.0, compare=False)


@dataclass(frozen=True)
class ResUsage:
    """One function's line of ``cuobjdump -res-usage``, in bytes (per thread for stack
    and local memory)."""

    regs: int
    stack: int
    shared: int
    local: int


def fp_fusion_default() -> bool:
    """Whether the JIT would fuse multiply-adds for a launch that does not say."""
    try:
        from triton import knobs
    except ImportError:  # Triton before 3.4: no knobs, fusion on by default
        return True
    language = knobs.language
    return bool(getattr(language, "default_fp_fusion", True)) and not getattr(
        language, "force_disable_fp_fusion", False
    )


def compile_options(launch: KernelLaunch) -> dict[str, Any]:
    """The ``options`` of ``triton.compile`` for ``launch``."""
    return {
        "num_warps": launch.num_warps,
        "num_stages": launch.num_stages,
        "enable_fp_fusion": fp_fusion_default(),
    }


def cuobjdump_path() -> str:
    """The ``cuobjdump`` Triton bundles (``TRITON_CUOBJDUMP_PATH`` overrides it)."""
    try:
        from triton import knobs

        return knobs.nvidia.cuobjdump.path
    except (ImportError, AttributeError):
        import triton

        return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")


_FUNCTION = re.compile(r"^\s*Function\s+(?P<name>\S+?):\s*$")
_FIELD = re.compile(r"(?P<key>[A-Z]+(?:\[\d+\])?):(?P<value>\d+)")


def parse_res_usage(text: str, name: str) -> ResUsage:
    """The usage of function ``name`` in the output of ``cuobjdump -res-usage``.

    Raises:
        ValueError: ``name`` is not in the output, or its line lacks a field.
    """
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = _FUNCTION.match(line)
        if match is None or match.group("name") != name or i + 1 >= len(lines):
            continue
        fields = {m.group("key"): int(m.group("value")) for m in _FIELD.finditer(lines[i + 1])}
        try:
            return ResUsage(regs=fields["REG"], stack=fields["STACK"], shared=fields["SHARED"],
                            local=fields["LOCAL"])
        except KeyError as e:
            raise ValueError(f"cuobjdump line for {name!r} lacks {e.args[0]}: {lines[i + 1]!r}") from None
    raise ValueError(f"cuobjdump output names no function {name!r}:\n{text}")


def read_res_usage(cubin: bytes, name: str) -> ResUsage:
    """Run ``cuobjdump -res-usage`` on a cubin and parse function ``name``.

    Raises:
        RuntimeError: cuobjdump is missing, fails, or prints no line for ``name``: the
            toolchain is broken, which no config can cause.
    """
    tool = cuobjdump_path()
    fd, path = tempfile.mkstemp(suffix=".cubin")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        done = subprocess.run([tool, "-res-usage", path], check=False, capture_output=True, text=True,
                              timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise RuntimeError(f"cannot run cuobjdump at {tool!r}: {e}; reinstall triton or set "
                           f"TRITON_CUOBJDUMP_PATH") from e
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    if done.returncode != 0:
        raise RuntimeError(f"cuobjdump -res-usage failed with code {done.returncode}: {done.stderr.strip()}")
    try:
        return parse_res_usage(done.stdout, name)
    except ValueError as e:
        raise RuntimeError(str(e)) from e


def describe_error(error: BaseException) -> str:
    """One line saying why a compile failed.

    Triton's ``CompilationError`` starts with a source position and a code excerpt and
    ends with the message; its cause carries the message alone. A ptxas failure's first
    line is only the exit code, so the first ``error``/``fatal`` line of ptxas's log is
    appended.
    """
    kind = type(error).__name__
    text = str(error).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if kind == "CompilationError":
        cause = error.__cause__
        message = str(cause).strip().splitlines()[0] if cause is not None and str(cause).strip() else (
            lines[-1] if lines else "")
        where = lines[0].rstrip(":") if lines and lines[0].startswith("at ") else ""
        return f"{kind}: {message}" + (f" ({where})" if where else "")
    first = lines[0] if lines else "(no message)"
    detail = next((line for line in lines[1:] if "error" in line.lower() or "fatal" in line.lower()), None)
    return f"{kind}: {first}" + (f"; {detail}" if detail and detail != first else "")


def compile_usage(launch: KernelLaunch, compute_capability: int) -> ArchUsage:
    """Compile ``launch`` for ``sm_<compute_capability>`` and read its resource usage.

    Never raises for a bad config: a compile error is returned in ``error``.

    Raises:
        KernelError: the kernel cannot be compiled in this process (loaded under
            ``TRITON_INTERPRET=1``), from :func:`tuner.kernels.family.ast_source`.
        RuntimeError: the toolchain is broken (see :func:`read_res_usage`).
    """
    import triton
    from triton.backends.compiler import GPUTarget

    arch = f"sm_{compute_capability}"
    source = ast_source(launch)
    start = time.perf_counter()
    try:
        # Triton prints a failing kernel's whole PTX to stdout before raising PTXASError.
        with contextlib.redirect_stdout(io.StringIO()):
            kernel = triton.compile(source, target=GPUTarget("cuda", compute_capability, WARP_SIZE),
                                    options=compile_options(launch))
    except Exception as e:  # noqa: BLE001 — any compiler failure makes the config illegal
        return ArchUsage(arch, 0, 0, error=describe_error(e), compile_seconds=time.perf_counter() - start)
    usage = read_res_usage(kernel.asm["cubin"], kernel.metadata.name)
    return ArchUsage(
        arch=arch,
        smem_bytes=int(kernel.metadata.shared),
        regs_per_thread=usage.regs,
        spill_bytes=usage.stack + usage.local,
        compile_seconds=time.perf_counter() - start,
    )


def on_device(usage: ArchUsage, device: DevicePreset, num_warps: int) -> CompiledResources:
    """Apply ``device``'s occupancy rules to an architecture's compile of a launch."""
    if usage.arch != device.arch:
        raise ValueError(f"usage compiled for {usage.arch} cannot run on {device.name} ({device.arch})")
    if usage.error is not None:
        return CompiledResources(arch=usage.arch, smem_bytes=0, regs_per_thread=0, num_warps=num_warps,
                                 ctas_per_sm=0, limiter="compile",
                                 reason=f"does not compile for {usage.arch}: {usage.error}")
    ctas, limiter, reason = occupancy(device, usage.regs_per_thread, usage.smem_bytes, num_warps)
    return CompiledResources(arch=usage.arch, smem_bytes=usage.smem_bytes, regs_per_thread=usage.regs_per_thread,
                             num_warps=num_warps, ctas_per_sm=ctas, limiter=limiter, reason=reason,
                             spill_bytes=usage.spill_bytes)


def compile_launch(launch: KernelLaunch, device: DevicePreset) -> CompiledResources:
    """Compile ``launch`` for ``device``'s architecture and apply its occupancy rules.

    Uncached; :class:`tuner.profile.cache.CompileCache` compiles once per architecture.
    Never raises for a bad config (see :func:`compile_usage`).
    """
    return on_device(compile_usage(launch, device.compute_capability), device, launch.num_warps)
