"""A stand-in for ``torch.cuda`` that records every call, so that the GPU check's steps
run on any machine (``scripts/gpu-check.sh --dry-run``, run by the test suite) and a
typo, a missing method or a wrong argument in a CUDA path shows up here rather than on
the first lent GPU, whose minutes are few.

What each call becomes:

- ``torch.cuda``'s streams, events, graphs, ``synchronize`` and ``_sleep``: recorded; a
  synchronization inside a graph's capture raises, as CUDA's does. They take no time,
  except that an event's ``elapsed_time`` is the wall time between its two records (so a
  dry run's timings are the CPU's and mean nothing for a GPU).
- ``torch.empty/zeros/ones/randn/rand/full(..., device="cuda")``: recorded with their
  bytes, allocated on the ``meta`` device (no memory at all: a replay's 60 GiB budget
  stays free).
- The replay's spin kernel (:mod:`tuner.replay.spin`, a Triton launch): recorded, its
  arguments checked (it compiles for ``sm_90`` in ``tests/test_replay.py``).
- The registered kernel families (:mod:`tuner.families`): ``make_inputs`` with
  ``device="cuda"`` makes CPU tensors at 1/:data:`SHAPE_DIVISOR` of each dimension, and
  ``run`` runs the family's PyTorch reference on them. The Triton launch inside ``run`` is
  the one CUDA path not reached here; the families' kernels themselves run under
  ``TRITON_INTERPRET=1`` in ``tests/test_kernels*.py``.

Used as a launcher (what the dry run does)::

    python benchmarks/cuda_standin.py --calls CALLS.json -- SCRIPT.py ARGS...
    python benchmarks/cuda_standin.py --calls CALLS.json -- -m tuner replay ... --device cuda

It installs the stand-in, runs the script or module as ``python`` would, and writes how
many times each call was made to ``CALLS.json`` when it ends (also on an error).
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

#: How much smaller than the requested shape a dry run's kernel inputs are.
SHAPE_DIVISOR = 16
#: The device the stand-in says it is: an H100 SXM's figures, named so no record can be
#: mistaken for a measurement.
PROPERTIES = SimpleNamespace(name="dry run (no GPU; torch.cuda stand-in)", multi_processor_count=132, major=9, minor=0,
                             total_memory=80 * 2**30, L2_cache_size=50 * 2**20)
_FACTORIES = ("empty", "zeros", "ones", "randn", "rand", "full")


class RecordingCuda:
    """The calls of ``torch.cuda`` that tuner and the GPU check make, each counted in
    :attr:`calls` (thread-safe: a replay's executors call from their threads)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._current = threading.local()
        standin = self

        class Stream:
            def __init__(self, priority: int = 0, **_: Any) -> None:
                standin.record("Stream")
                self.priority = priority
                self.synchronized = 0  # this stream's drains

            @staticmethod
            def priority_range() -> tuple[int, int]:
                return (0, -5)

            def synchronize(self) -> None:
                standin.no_capture("Stream.synchronize")
                with standin._lock:
                    self.synchronized += 1

            def wait_stream(self, other: Any) -> None:
                standin.record("Stream.wait_stream")

        class Event:
            def __init__(self, enable_timing: bool = False, **_: Any) -> None:
                standin.record("Event")
                self.enable_timing = enable_timing
                self.at: float | None = None

            def record(self, stream: Any = None) -> None:
                standin.record("Event.record")
                self.at = time.perf_counter()

            def synchronize(self) -> None:
                standin.no_capture("Event.synchronize")

            def elapsed_time(self, end: Event) -> float:
                standin.record("Event.elapsed_time")
                if not (self.enable_timing and end.enable_timing) or self.at is None or end.at is None:
                    raise RuntimeError("elapsed_time needs two recorded events made with enable_timing=True")
                return (end.at - self.at) * 1e3

        class CUDAGraph:
            def __init__(self) -> None:
                standin.record("CUDAGraph")
                self.captured = False

            def replay(self) -> None:
                if not self.captured:
                    raise RuntimeError("replay of a CUDA graph that was never captured")
                standin.record("CUDAGraph.replay")

        self.Stream, self.Event, self.CUDAGraph = Stream, Event, CUDAGraph
        self.default_stream = Stream()

    def record(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1

    def no_capture(self, name: str) -> None:
        """What CUDA refuses while a graph is being captured: waiting on the device."""
        self.record(name)
        if getattr(self._current, "capturing", False):
            raise RuntimeError(f"{name}: operation not permitted when stream is capturing (stand-in)")

    # -- module-level functions of torch.cuda ---------------------------------------------------
    def is_available(self) -> bool:
        self.record("is_available")
        return True

    def device_count(self) -> int:
        return 1

    def get_device_properties(self, device: Any = 0) -> SimpleNamespace:
        self.record("get_device_properties")
        return PROPERTIES

    def get_device_name(self, device: Any = 0) -> str:
        return PROPERTIES.name

    def synchronize(self, device: Any = None) -> None:
        self.no_capture("synchronize")

    def empty_cache(self) -> None:
        self.record("empty_cache")

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        """(free, total) bytes: the stand-in's 80 GiB, 70 of them free."""
        self.record("mem_get_info")
        return 70 * 2**30, PROPERTIES.total_memory

    def current_stream(self, device: Any = None) -> Any:
        return getattr(self._current, "stream", None) or self.default_stream

    @contextmanager
    def stream(self, stream: Any):
        self.record("stream")
        previous = getattr(self._current, "stream", None)
        self._current.stream = stream
        try:
            yield
        finally:
            self._current.stream = previous

    @contextmanager
    def graph(self, cuda_graph: Any, **_: Any):
        """A capture: synchronizing inside it raises, as CUDA's does."""
        self.record("graph")
        self._current.capturing = True
        try:
            yield
        finally:
            self._current.capturing = False
        cuda_graph.captured = True

    def _sleep(self, cycles: int) -> None:
        if not isinstance(cycles, int) or cycles < 0:
            raise TypeError(f"torch.cuda._sleep takes a number of cycles >= 0 (an int), got {cycles!r}")
        self.record("_sleep")


def install(cuda: RecordingCuda | None = None) -> RecordingCuda:
    """Put the stand-in in place of ``torch.cuda``'s functions, torch's factories on
    ``device="cuda"`` and the bundled families' inputs and launches (see the module
    docstring); returns it. For a process of its own: nothing is undone."""
    import torch

    cuda = cuda or RecordingCuda()
    for name in ("is_available", "device_count", "get_device_properties", "get_device_name", "synchronize",
                 "empty_cache", "mem_get_info", "current_stream", "stream", "graph", "_sleep", "Stream", "Event",
                 "CUDAGraph"):
        setattr(torch.cuda, name, getattr(cuda, name))
    for name in _FACTORIES:
        setattr(torch, name, _on_meta(getattr(torch, name), cuda, name))
    _install_families(cuda)
    _install_spin(cuda)
    return cuda


def _on_meta(factory: Any, cuda: RecordingCuda, name: str) -> Any:
    def made(*args: Any, **kwargs: Any) -> Any:
        if str(kwargs.get("device", "")).startswith("cuda"):
            kwargs["device"] = "meta"
            cuda.record(f"torch.{name}(device=cuda)")
        return factory(*args, **kwargs)

    return made


def reduced(shape: Any) -> dict[str, Any]:
    return {key: max(1, value // SHAPE_DIVISOR) if isinstance(value, int) else value for key, value in shape.items()}


def _install_families(cuda: RecordingCuda) -> None:
    from tuner.families import family_names, family_spec

    for cls in (family_spec(name).kernel_class() for name in family_names()):
        make_inputs, reference = cls.make_inputs, cls.reference

        def inputs(self: Any, shape: Any, *, device: str = "cpu", _make: Any = make_inputs, **kwargs: Any) -> Any:
            if not str(device).startswith("cuda"):
                return _make(self, shape, device=device, **kwargs)
            cuda.record("family.make_inputs(device=cuda)")
            return _make(self, reduced(shape), device="cpu", **kwargs)

        def run(self: Any, inputs: Any, config: Any, shape: Any, _reference: Any = reference, **_: Any) -> Any:
            cuda.record("family.run")
            return _reference(self, inputs, reduced(shape))

        cls.make_inputs, cls.run = inputs, run


def _install_spin(cuda: RecordingCuda) -> None:
    """The replay's spin kernel (a Triton launch) recorded, with its arguments checked."""
    from tuner.replay import spin

    def recorded(sink: Any, ctas: int, seconds: float) -> None:
        if not (isinstance(ctas, int) and ctas >= 1 and seconds >= 0):
            raise ValueError(f"spin(ctas={ctas!r}, seconds={seconds!r})")
        cuda.record("spin kernel")

    spin.spin = recorded


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print("usage: cuda_standin.py --calls FILE -- SCRIPT.py|-m MODULE ARGS...", file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="cuda_standin.py")
    parser.add_argument("--calls", type=Path, required=True)
    args = parser.parse_args(argv[:split])
    target = argv[split + 1:]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    cuda = install()
    code = 0
    try:
        if target[:1] == ["-m"]:
            sys.argv = [target[1], *target[2:]]
            runpy.run_module(target[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = target
            sys.path.insert(0, str(Path(target[0]).resolve().parent))
            runpy.run_path(target[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        args.calls.write_text(json.dumps(dict(sorted(cuda.calls.items())), indent=1) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
