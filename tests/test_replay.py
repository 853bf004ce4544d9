"""``tuner replay`` (issue 41): the service executed on a wall clock, held against
queueing theory, its memory budget and Ctrl-C.

The problems are one-server queues with a declared service time D (one executor, one
request per batch): an M/D/1 queue, whose figures are closed forms, and which the replay
executes as real waits on a real thread. Tolerances allow the harness's own overhead (a
thread hand-off per batch, well under a millisecond here) and the sampling spread of a
few hundred requests.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from benchmarks.cuda_standin import RecordingCuda as StandIn
from tuner.cli import main
from tuner.problem import load_problem
from tuner.problem.assignment import Assignment
from tuner.replay import MemoryLedger, replay
from tuner.replay.kernels import CudaKernels, KernelRunner
from tuner.replay.run import ReplayRun
from tuner.sim import simulate
from tuner.sim.program import bind

SERVICE_S = 0.02  # D

ONE_SERVER = """
name: one_server
device: {{name: generic, sms: 132}}
service:
  batching: dynamic
  max_batch: 1
  executors: 1
  memory: {{budget: {budget} GiB, fixed: 0, per_request: 1 GiB}}
  operators:
    - {{name: stage, family: stage}}
  slo: {{deadline: 200 ms}}
families:
  stage:
    space: {{variant: [only]}}
    configs:
      - name: only
        params: {{variant: only}}
        profile: {{latency: 20 ms, workspace: 0, sm: 0.1, dram: 0.05}}
regimes:
  light: {{arrivals: {{process: poisson, rate: 10}}, horizon: 6 s, warmup: 1 s}}
  overload: {{arrivals: {{process: poisson, rate: 100}}, horizon: 4 s, warmup: 1 s}}
"""


def _problem(tmp_path: Path, budget_gib: float = 64):
    path = tmp_path / "one_server.yaml"
    path.write_text(ONE_SERVER.format(budget=budget_gib))
    return load_problem(path)


def test_light_load_meets_the_slo_and_waits_as_md1_says(tmp_path):
    """ρ = λD = 0.2: M/D/1's mean wait ρD / (2(1 − ρ)) = 2.5 ms, so the median sojourn
    lies between D and D plus a few mean waits; P(sojourn > 200 ms) is ~0."""
    problem = _problem(tmp_path)
    result = replay(problem, Assignment.default(problem), "light", seed=1)
    metrics = result.metrics
    assert metrics.slo_attainment >= 0.99
    assert SERVICE_S <= metrics.latency_p50_s <= SERVICE_S + 4 * 0.0025 + 0.003
    assert result.unfinished == 0 and metrics.completed == metrics.arrivals
    # the same requests as the simulator's, served alike
    simulated = simulate(problem, Assignment.default(problem), "light", seed=1).metrics
    assert metrics.arrivals == simulated.arrivals and metrics.judged == simulated.judged


def test_overload_goodput_stays_below_the_measured_capacity(tmp_path):
    """λ = 100/s against one server of D = 20 ms: capacity 1/D = 50/s; the backlog grows."""
    problem = _problem(tmp_path)
    result = replay(problem, Assignment.default(problem), "overload", seed=0, drain_s=1.0)
    metrics = result.metrics
    assert metrics.throughput_rps <= 1.0 / SERVICE_S * 1.02
    assert metrics.goodput_rps <= metrics.throughput_rps
    assert metrics.overloaded and result.unfinished > 0  # the drain ended with requests still queued


def test_the_budget_binds_and_is_never_exceeded(tmp_path):
    """A 3 GiB budget admits three 1 GiB requests at once: under overload it is full,
    never over."""
    problem = _problem(tmp_path, budget_gib=3)
    result = replay(problem, Assignment.default(problem), "overload", seed=0, drain_s=0.5)
    assert result.metrics.memory_peak_bytes == 3 * 2**30
    assert result.metrics.admission_stall_s > 0  # requests waited for memory


def test_the_ledger_reserves_before_it_allocates():
    made: list[int] = []
    ledger = MemoryLedger(10.0, allocate=lambda n: made.append(n) or n, scale=0.5)
    assert ledger.reserve("a", 6.0) and made == [3]
    assert not ledger.reserve("b", 5.0) and made == [3]  # refused: nothing allocated
    ledger.release("a")
    assert ledger.reserve("b", 10.0) and ledger.peak == 10.0 and ledger.used == 10.0
    with pytest.raises(ValueError, match="already holds"):
        ledger.reserve("b", 1.0)


def test_ctrl_c_stops_the_executors_and_frees_the_memory(tmp_path):
    problem = _problem(tmp_path)
    workload = problem.regimes["overload"].workload(0, problem.service.jitter, None)
    bound = bind(problem.service_for("overload"), Assignment.default(problem), problem.size_fields)
    ledger = MemoryLedger(problem.memory_budget("overload"), scale=2.0 ** -20)
    calls = [0]
    base = threading.Event()

    def clock() -> float:  # Ctrl-C (which reaches the main thread only) a few hundred readings into the run
        calls[0] += 1
        if calls[0] > 400 and threading.current_thread() is threading.main_thread():
            raise KeyboardInterrupt
        base.wait(0.0005)
        return calls[0] * 0.001

    run = ReplayRun(bound, workload, ledger, problem.size_fields, "cpu", clock=clock)
    with pytest.raises(KeyboardInterrupt):
        run.run()
    assert ledger.used == 0.0
    assert not [t for t in threading.enumerate() if t.name.startswith("replay executor") and t.is_alive()]


def test_the_command_measures_and_compares(tmp_path):
    problem = _problem(tmp_path)
    result = CliRunner().invoke(main, ["replay", str(problem.path), "--regime", "light", "--duration", "2",
                                       "--compare"])
    assert result.exit_code == 0, result.output
    assert "measured on the cpu" in result.output and "simulated" in result.output
    bad = CliRunner().invoke(main, ["replay", str(problem.path), "--regime", "nope"])
    assert bad.exit_code == 2 and bad.output.count("\n") == 1 and "no regime 'nope'" in bad.output
    import torch

    if not torch.cuda.is_available():
        no_gpu = CliRunner().invoke(main, ["replay", str(problem.path), "--device", "cuda"])
        assert no_gpu.exit_code == 2 and no_gpu.output.count("\n") == 1 and "no CUDA GPU here" in no_gpu.output


def test_a_kernel_familys_operator_runs_its_reference_at_a_reduced_shape(tmp_path, monkeypatch):
    """A GEMM service (tests/test_modeled.py's): every batch calls the matmul family's
    PyTorch reference once per launch (repeat 4), at the batch's shape divided by 16."""
    from tests.test_modeled import GEMM_PROBLEM, FakeResources
    from tuner.families.matmul.kernel import MatmulFamily

    path = tmp_path / "gemm.yaml"
    path.write_text(yaml.safe_dump({**GEMM_PROBLEM, "regimes": {
        "steady": {"arrivals": {"process": "poisson", "rate": 20}, "horizon": "2 s"}}}))
    problem = load_problem(path, resources=FakeResources())
    shapes: list[dict[str, int]] = []
    reference = MatmulFamily.reference

    def counted(self, inputs, shape):
        shapes.append(dict(shape))
        return reference(self, inputs, shape)

    monkeypatch.setattr(MatmulFamily, "reference", counted)
    result = replay(problem, Assignment.default(problem), "steady", seed=0)
    metrics = result.metrics
    assert metrics.iterations > 0 and metrics.kernels == len(shapes) == 4 * metrics.iterations
    assert {(s["N"], s["K"]) for s in shapes} == {(256, 256)}
    assert all(s["M"] % 8 == 0 and 8 <= s["M"] <= 64 for s in shapes)  # batch · 128 / 16, batch 1..8
    assert "CPU references" in result.kernels and metrics.completed == metrics.arrivals


class RecordingCuda(StandIn):
    """The GPU check's ``torch.cuda`` stand-in (``benchmarks/cuda_standin.py``: calls
    counted, each thread's current stream its own, as torch's is), which also records
    each spin kernel with the stream it was launched on."""

    def __init__(self) -> None:
        super().__init__()
        self.spins: list[tuple[int, float, object]] = []

    def spin(self, ctas: int, seconds: float) -> None:
        with self._lock:
            self.spins.append((ctas, seconds, self.current_stream()))


def test_the_cuda_path_runs_on_a_stand_in_that_records_every_call(tmp_path, monkeypatch):
    """Every call a GPU replay makes, reached on the CPU: a stream per executor (and one
    per neighbour priority), the declared 20 ms stage as a spin kernel of 20 ms on its
    0.1 of the 132 SMs (13 CTAs) on the executor's stream, one drain per batch; a
    family's kernel called by ``run`` at the full shape with the config's parameters."""
    from tests.test_modeled import GEMM_PROBLEM, FakeResources
    from tuner.families.matmul.kernel import MatmulFamily
    from tuner.profile.compiled import compile_launch
    from tuner.profile.devices import H100
    from tuner.replay.kernels import CudaKernels
    from tuner.replay.spin import spin_launch

    assert compile_launch(spin_launch(13), H100).reason is None  # the spin kernel compiles for sm_90
    problem = _problem(tmp_path)
    cuda = RecordingCuda()
    backend = CudaKernels(2, cuda=cuda, lane_priorities=(-1,), extra=(3,), launch_spin=cuda.spin)
    assert [s.priority for s in backend.streams] == [-1, -1, 0]  # the problem's order in CUDA's range
    result = _replayed(problem, "light", backend, seconds=2.0)
    spins = cuda.spins
    assert spins and all(c == (13, pytest.approx(SERVICE_S), backend.streams[0]) for c in spins)
    assert backend.streams[0].synchronized == result.metrics.iterations == len(spins)

    path = tmp_path / "gemm.yaml"
    path.write_text(yaml.safe_dump({**GEMM_PROBLEM, "regimes": {
        "steady": {"arrivals": {"process": "poisson", "rate": 20}, "horizon": "1 s"}}}))
    gemm = load_problem(path, resources=FakeResources())
    ran: list[tuple[dict, dict]] = []
    monkeypatch.setattr(MatmulFamily, "make_inputs", lambda self, shape, *, seed, dtype, device: {"device": device})
    monkeypatch.setattr(MatmulFamily, "run", lambda self, inputs, params, shape: ran.append((params, dict(shape))))
    cuda = RecordingCuda()
    result = _replayed(gemm, "steady", CudaKernels(1, cuda=cuda, launch_spin=cuda.spin), seconds=1.0)
    assert len(ran) == result.metrics.kernels == 4 * result.metrics.iterations > 0
    assert {(s["N"], s["K"]) for _, s in ran} == {(4096, 4096)}
    default = next(iter(Assignment.default(gemm).cells()))[1]
    assert all(params == default.param_dict for params, _ in ran)


def _replayed(problem, regime: str, backend, seconds: float):
    workload = problem.regimes[regime].workload(0, problem.service.jitter, seconds)
    bound = bind(problem.service_for(regime), Assignment.default(problem), problem.size_fields)
    ledger = MemoryLedger(problem.memory_budget(regime), allocate=lambda n: n)
    runner = KernelRunner(bound, backend, bound.service.launch_overhead_s, problem.size_fields)
    return ReplayRun(bound, workload, ledger, problem.size_fields, "cuda", runner).run(drain_s=1.0)


@pytest.mark.parametrize("partition", [None, 0.25])
def test_a_neighbour_alone_progresses_as_the_simulator_says_it_would(tmp_path, partition):
    """A closed-loop neighbour (10 ms on 0.5 of the SMs, 5 ms gap) beside a service with
    no traffic: the work it does in the window over the simulator's closed form for it
    alone is 1 (minus the harness's waits). On a 0.25 partition its launches last twice
    as long (the GPU layer's rate at half its SMs), and the ratio is still 1: the replay
    times each launch as the simulator does."""
    text = ONE_SERVER.format(budget=64).replace("  slo: {deadline: 200 ms}", (
        "  neighbors:\n    - {name: tenant, profile: {latency: 10 ms, sm: 0.5, dram: 0.0, compute: 1.0}, gap: 5 ms"
        + (", partition: side}\n  partitions: {main: {share: 0.75}, side: {share: 0.25}}\n" if partition else "}\n")
        + "  slo: {deadline: 200 ms}")).replace("rate: 10}", "rate: 0.001}")
    path = tmp_path / "neighbour.yaml"
    path.write_text(text)
    problem = load_problem(path)
    result = replay(problem, Assignment.default(problem), "light", duration_s=1.5, drain_s=0.1)
    simulated = simulate(problem, Assignment.default(problem), "light", horizon_s=1.5).metrics
    assert simulated.neighbor_progress_ratio == pytest.approx(1.0, abs=0.02)
    assert 0.85 <= result.metrics.neighbor_progress_ratio <= 1.02


def test_the_trace_holds_every_batch_and_the_counters(tmp_path):
    """``--trace``: a Trace Event file whose batch slices are the replay's batches (one
    per request here: max_batch 1), each as long as the 20 ms stage or more, on the
    executor's track, with the memory and queue counters; an existing non-trace file is
    refused (one line, exit 2) and kept."""
    problem = tmp_path / "one_server.yaml"
    problem.write_text(ONE_SERVER.format(budget=64))
    trace = tmp_path / "replay.json"
    done = CliRunner().invoke(main, ["replay", str(problem), "--regime", "light", "--duration", "1.5", "--json",
                                     "--trace", str(trace)])
    assert done.exit_code == 0, done.output
    result = json.loads(done.output)
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert names == {"executor 0: batches (host clock)", "executor 0: kernels (CPU clock)"}
    batches = [e for e in events if e.get("ph") == "X" and e["name"] == "batch"]
    assert len(batches) == result["iterations"] == result["completed"] > 0
    assert all(e["dur"] >= 0.99 * SERVICE_S * 1e6 for e in batches)
    assert {e["name"] for e in events if e.get("ph") == "C"} >= {"M(t) reserved memory", "queue depth"}
    other = tmp_path / "notes.txt"
    other.write_text("mine")
    refused = CliRunner().invoke(main, ["replay", str(problem), "--duration", "0.5", "--trace", str(other)])
    assert refused.exit_code == 2 and other.read_text() == "mine"


def test_an_operator_on_another_partition_runs_on_its_lanes_stream(tmp_path):
    """Lanes as streams: the service's operators on its partition launch on the
    executor's first stream, the one placed on another partition on a second stream at
    that partition's priority, and each batch drains both (the simulator's lanes, joined
    at the batch's end)."""
    text = ONE_SERVER.format(budget=64).replace(
        "    - {name: stage, family: stage}",
        "    - {name: stage, family: stage}\n    - {name: side_stage, family: stage, partition: side}").replace(
        "  slo: {deadline: 200 ms}",
        "  partitions: {main: {share: 0.5}, side: {share: 0.5, priority: -1}}\n  partition: main\n"
        "  slo: {deadline: 200 ms}")
    path = tmp_path / "lanes.yaml"
    path.write_text(text)
    problem = load_problem(path)
    cuda = RecordingCuda()
    backend = CudaKernels(1, cuda=cuda, lane_priorities=(0, -1), launch_spin=cuda.spin)
    result = _replayed(problem, "light", backend, seconds=1.0)
    first, second = backend.streams
    assert (first.priority, second.priority) == (0, -1)
    on = [c[2] for c in cuda.spins]
    assert on.count(first) == on.count(second) == result.metrics.iterations > 0
    assert first.synchronized == second.synchronized == result.metrics.iterations


def test_a_kernel_that_fails_in_a_worker_ends_the_replay_in_one_line(tmp_path):
    """An executor's batch that raises (a GPU out of memory, a kernel that cannot
    launch) stops the replay with a TunerError naming it, instead of leaving that
    executor busy until the deadline and reporting the rest as unfinished."""
    from tuner.errors import TunerError

    def failing(ctas: int, seconds: float) -> None:
        raise RuntimeError("CUDA out of memory (stand-in)\nsecond line")

    backend = CudaKernels(1, cuda=RecordingCuda(), launch_spin=failing)
    started = time.perf_counter()
    with pytest.raises(TunerError, match=r"^replay: an executor failed at .*RuntimeError: CUDA out of memory"):
        _replayed(_problem(tmp_path), "light", backend, seconds=2.0)
    assert time.perf_counter() - started < 1.5  # at the first batch, not the deadline


def test_the_problems_priorities_keep_their_order_in_the_devices_range():
    """CUDA clamps a priority outside its range (0 to -5 on an H100) to the nearest end:
    the problem's 0 and 3 would run alike. Mapped by rank, the least urgent at 0."""
    from tuner.replay.kernels import device_priorities

    assert device_priorities((0, 3, -1, 0), (0, -5)) == {3: 0, 0: -1, -1: -2}
    assert device_priorities((0,), (0, -5)) == {0: 0}
    assert device_priorities(tuple(range(8)), (0, -2)) == {7: 0, 6: -1, 5: -2, 4: -2, 3: -2, 2: -2, 1: -2, 0: -2}


def test_a_users_own_kernel_is_replayed_as_a_user_would_run_it(tmp_path, monkeypatch):
    """The user-kernel tutorial's problem file (tests/test_user_kernel.py), replayed: on
    the CPU its Triton kernel cannot run and it has no PyTorch reference, so its launches
    wait out their modeled time (every request served); on a GPU its inputs (the user's
    builder's arguments, grid and sizes included) are made per shape, never shared from a
    larger one, and made with the keyword arguments the family protocol names."""
    import shutil

    from tests.test_user_kernel import KERNEL, PROBLEM
    from tuner.kernels.user import UserKernelFamily

    shutil.copy(KERNEL, tmp_path / "tutorial_matmul.py")
    path = tmp_path / "problem.yaml"
    path.write_text(yaml.safe_dump(PROBLEM, sort_keys=False))
    problem = load_problem(path)
    result = replay(problem, Assignment.default(problem), "light", duration_s=1.0, drain_s=3.0)
    assert result.metrics.completed == result.metrics.arrivals > 0 and result.metrics.kernels == 0

    made: list[dict] = []
    monkeypatch.setattr(UserKernelFamily, "make_inputs",
                        lambda self, shape, *, seed, dtype, device: made.append(dict(shape)) or {"shape": shape})
    launched: list[bool] = []
    monkeypatch.setattr(UserKernelFamily, "run",
                        lambda self, inputs, config, shape: launched.append(inputs["shape"] == shape))
    cuda = RecordingCuda()
    result = _replayed(problem, "light", CudaKernels(1, cuda=cuda, launch_spin=cuda.spin), seconds=1.0)
    assert result.metrics.kernels == len(launched) > 0 and all(launched)  # each launch on inputs of its shape
    assert len(made) == len({s["M"] for s in made})  # one set per shape, made once
