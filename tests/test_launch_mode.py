"""``service.launch: graphs | eager`` on hand-computed iterations.

One request arrives at t = 0 at an idle executor (dynamic batching, max_batch 1), so its
latency is one iteration's. The iteration is ``n`` launches, launch i taking ``d_i`` alone
on the GPU (SM share 0.3: nothing contends), with ``o`` = ``launch_overhead`` before each
kernel on the GPU.

eager, host cost ``c`` per launch: the host issues launch i at ``h_i = (i + 1)·c`` and the
kernel starts at ``max(h_i, e_{i-1})``, so ``e_i = max(h_i, e_{i-1}) + o + d_i``:

* host-bound, n = 4, c = 10 µs, d = 2 µs, o = 1 µs: e = 13, 23, 33, 43 → n·c + o + d = 43 µs
  (the GPU waits 10 + 7 + 7 + 7 = 31 of 43 µs on the host: a host-bound iteration, one
  whose GPU waited on the host for more than half of it)
* device-bound, n = 4, c = 2 µs, d = 10 µs, o = 1 µs: e = 13, 24, 35, 46 → c + n·(o + d) = 46 µs
* both, d = 2, 30, 2, 2 µs, c = 10 µs, o = 0: e = 12, 50, 52, 54 → 54 µs (the host leads,
  then the 30 µs kernel lets it run ahead: launches 2 and 3 were issued at 30 and 40 µs)

graphs, replay cost ``R`` per iteration and ``o`` per node: ``R + Σ (o + d_i)``:

* R = 15 µs, o = 1 µs, d = 2 µs: 15 + 4·3 = 27 µs (15 of them waiting on the host's
  replay: host-bound too); R = 0: 12 µs, today's model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_service import trace_file
from tuner.errors import ProblemError
from tuner.problem.assignment import Assignment
from tuner.problem.model import EAGER_HOST_LAUNCH_S
from tuner.sim import simulate
from tuner.sim.program import eager_span

US = 1e-6


def iteration(trace: str, device_us: list[float], overhead_us: float, **launch: object) -> dict:
    """One operator per launch, each of its own family (``d_i`` µs alone)."""
    service: dict = {
        "batching": "dynamic", "max_batch": 1,
        "memory": {"budget": "10 GiB", "fixed": "1 GiB"},
        "operators": [{"name": f"op{i}", "family": f"f{i}", "shape": {"B": "batch"}} for i in range(len(device_us))],
        "slo": {"deadline": "1 s"},
        "launch_overhead": f"{overhead_us} us",
    }
    service.update(launch)
    return {
        "name": "launches",
        "service": service,
        "families": {f"f{i}": {"space": {"v": [1]}, "configs": [
            {"name": f"k{i}", "params": {"v": 1}, "profile": {"latency": f"{d} us", "sm": 0.3}}]}
            for i, d in enumerate(device_us)},
        "regimes": {"replay": {
            "arrivals": {"process": "trace", "file": trace, "offset": 0, "time_column": "t", "columns": {}},
            "horizon": "20 s", "warmup": 0}},
    }


def one_request(tmp_path: Path) -> str:
    return trace_file(tmp_path, [(0,), (0.5,)], "t")  # replayed: one request every 0.5 s


CASES = [  # device µs per launch, o µs, launch keys, iteration µs, host-bound
    ([2, 2, 2, 2], 1, {"launch": "eager", "host_launch": "10 us"}, 43.0, 1),
    ([10, 10, 10, 10], 1, {"launch": "eager", "host_launch": "2 us"}, 46.0, 0),
    ([2, 30, 2, 2], 0, {"launch": "eager", "host_launch": "10 us"}, 54.0, 0),
    ([2, 2, 2, 2], 1, {"launch": "graphs", "graph_replay": "15 us"}, 27.0, 1),  # 15 of 27 µs on the host
    ([2, 2, 2, 2], 1, {}, 12.0, 0),
    ([2, 2, 2, 2], 1, {"launch": "graphs"}, 12.0, 0),
]


@pytest.mark.parametrize("merged", [True, False])
@pytest.mark.parametrize("device_us,overhead_us,launch,expected_us,host_bound", CASES)
def test_one_iteration_takes_the_hand_computed_time(tmp_path, write_problem, device_us, overhead_us, launch,
                                                    expected_us, host_bound, merged) -> None:
    # merged: the lone executor's batch as one launch (the default); unmerged: kernel by
    # kernel, as a recorded run simulates it: the same time either way
    problem = write_problem(iteration(one_request(tmp_path), device_us, overhead_us, **launch))
    m = simulate(problem, Assignment.default(problem), "replay", record=not merged).metrics
    assert m.completed == m.iterations == 40  # each request alone in its iteration
    assert m.latency_p50_s == pytest.approx(expected_us * US, rel=1e-9)
    assert m.latency_p99_s == pytest.approx(expected_us * US, rel=1e-9)
    assert m.host_bound_iterations == 40 * host_bound


def test_each_eager_kernel_starts_when_the_host_has_issued_it_and_its_stream_is_free(tmp_path,
                                                                                     write_problem) -> None:
    # d = 2, 30, 2, 2 µs, c = 10 µs, o = 0: kernels run [10,12] [20,50] [50,52] [52,54]
    problem = write_problem(iteration(one_request(tmp_path), [2, 30, 2, 2], 0, launch="eager", host_launch="10 us"))
    recording = simulate(problem, Assignment.default(problem), "replay", record=True).recording
    slices = [(round(start / US, 6), round(end / US, 6)) for _, _, start, end in recording.slices if start < 1e-3]
    assert slices == [(10.0, 12.0), (20.0, 50.0), (50.0, 52.0), (52.0, 54.0)]


def test_eager_span_is_the_recurrence() -> None:
    assert eager_span([2.0, 2.0, 2.0, 2.0], 1.0, 10.0) == 43.0
    assert eager_span([10.0, 10.0, 10.0, 10.0], 1.0, 2.0) == 46.0
    assert eager_span([2.0, 30.0, 2.0, 2.0], 0.0, 10.0) == 54.0
    assert eager_span([2.0, 2.0], 1.0, 0.0) == 6.0  # no host cost: Σ (o + d)


def test_one_host_thread_issues_every_lane_in_program_order(tmp_path, write_problem) -> None:
    # A (lane 0), B (a second stream), C (lane 0), 2 µs each, c = 10 µs, o = 0. The host
    # issues A at 10, B at 20, C at 30 µs: A [10,12], B [20,22], C [30,32] -> 32 µs. A host
    # thread per lane would issue C second on its lane, at 20 µs, and end at 22.
    document = iteration(one_request(tmp_path), [2, 2, 2], 0, launch="eager", host_launch="10 us")
    document["service"]["partitions"] = {"side": {"share": 1.0, "sized_to": "device"}}
    document["service"]["operators"][1]["partition"] = "side"
    problem = write_problem(document)
    m = simulate(problem, Assignment.default(problem), "replay").metrics
    assert m.latency_p50_s == pytest.approx(32 * US, rel=1e-9)


def test_more_launches_cost_more_eagerly_only_while_the_host_is_the_bottleneck(tmp_path, write_problem) -> None:
    # The same 8 µs of device work as one launch or split in three (partial, reduce,
    # epilogue: 6 + 1 + 1 µs), c = 21 µs (the default), o = 0.
    # eager: one launch 21 + 8 = 29 µs; three: e = 21 + 6 = 27, 42 + 1 = 43, 63 + 1 = 64 µs.
    # graphs (R = 0): 8 µs both.
    for device_us, eager_us in (([8], 29.0), ([6, 1, 1], 64.0)):
        for launch, expected in (({"launch": "eager"}, eager_us), ({"launch": "graphs"}, 8.0)):
            problem = write_problem(iteration(one_request(tmp_path), device_us, 0, **launch))
            m = simulate(problem, Assignment.default(problem), "replay").metrics
            assert m.latency_p50_s == pytest.approx(expected * US, rel=1e-9), (device_us, launch)
    assert EAGER_HOST_LAUNCH_S == 21e-6


@pytest.mark.parametrize("launch,message", [
    ({"host_launch": "10 us"}, "service.host_launch: only applies to launch: eager"),
    ({"launch": "graphs", "host_launch": "10 us"}, "service.host_launch: only applies to launch: eager"),
    ({"launch": "eager", "graph_replay": "5 us"}, "service.graph_replay: only applies to launch: graphs"),
    ({"launch": "lazy"}, "service.launch"),
    ({"launch": "eager", "host_launch": "-1 us"}, "service.host_launch"),
])
def test_a_bad_launch_key_is_one_line_naming_it(tmp_path, write_problem, launch, message) -> None:
    with pytest.raises(ProblemError) as raised:
        write_problem(iteration(one_request(tmp_path), [2], 0, **launch))
    text = str(raised.value)
    assert message in text and "\n" not in text, text


class _Launches:
    """A profile that launches fixed kernels (seconds each): a split-K partial and its
    reduction, or one fused kernel."""

    variables_read = frozenset({"*"})  # says nothing of what it reads: never memoised

    def __init__(self, *seconds: float) -> None:
        self.seconds = seconds

    def launches(self, values: object, device: object, op: str, partition: object = None) -> tuple:
        return tuple((f"k{i}", ((t, 0.3, 0.0, 0.3, 0.0),)) for i, t in enumerate(self.seconds))

    def workspace_bytes(self, values: object, partition: object = None) -> float:
        return 0.0


def two_configs(tmp_path: Path, **launch: object) -> dict:
    """One operator whose family has two configs, ``fused`` and ``split``."""
    document = iteration(one_request(tmp_path), [8], 0, **launch)
    document["families"]["f0"] = {"space": {"v": [1, 2]}, "configs": [
        {"name": name, "params": {"v": v}, "profile": {"latency": "8 us", "sm": 0.3}}
        for name, v in (("fused", 1), ("split", 2))]}
    return document


def _assignments(problem, fused: _Launches, split: _Launches) -> list[Assignment]:
    import dataclasses

    configs = {c.name: c for c in problem.family_of("op0").configs}
    return [Assignment((("op0", (dataclasses.replace(configs[name], profile=profile),)),))
            for name, profile in (("fused", fused), ("split", split))]


def test_the_mechanism_line_names_host_bound_launches_under_eager_only(tmp_path, write_problem) -> None:
    from tuner.search.launches import host_bound_note
    from tuner.search.summary import mechanism
    from tuner.search.space import JointSpace

    # fused 8 µs vs partial 6 + reduce 1 + epilogue 1 µs, c = 21 µs, o = 0: eager spans
    # 29 µs and 64 µs (the split one host-bound: 64 > 21 + 8); under graphs nothing to say
    eager = write_problem(two_configs(tmp_path, launch="eager"), "eager.yaml")
    fused, split = _assignments(eager, _Launches(8 * US), _Launches(6 * US, 1 * US, 1 * US))
    note = host_bound_note(JointSpace.of(eager), split, fused, [("op0", 0)])
    assert note == ("host-bound iterations (launch: eager, 21 µs of host per launch): "
                    "op0[0] baseline 1 launch in 29 µs, tuned 3 launches in 64 µs (host-bound)")
    assert note in mechanism(JointSpace.of(eager), split, fused)
    # both device-bound (30 µs kernels after a 21 µs host): no note
    long_fused, long_split = _assignments(eager, _Launches(60 * US), _Launches(30 * US, 30 * US))
    assert host_bound_note(JointSpace.of(eager), long_split, long_fused, [("op0", 0)]) == ""
    graphs = write_problem(two_configs(tmp_path), "graphs.yaml")
    fused, split = _assignments(graphs, _Launches(8 * US), _Launches(6 * US, 1 * US, 1 * US))
    assert host_bound_note(JointSpace.of(graphs), split, fused, [("op0", 0)]) == ""
    assert "host-bound" not in mechanism(JointSpace.of(graphs), split, fused)


def test_the_documented_split_k_example_flips_between_graphs_and_eager() -> None:
    # docs/problem-files.md#launch-behaviour: llm_decode's gemm family on its H100 preset,
    # M = 8, N = 1024, K = 4096; launch_overhead 4 µs, host 21 µs (modeled figures)
    from tuner.problem.load import load_problem

    problem = load_problem(Path(__file__).resolve().parents[1] / "search_spaces" / "llm_decode.yaml")
    device, gap = problem.service.device, problem.service.launch_overhead_s
    values = dict(problem.operator("o_proj").variables({"tokens": 8, "batch": 8, "prefill_tokens": 0,
                                                        "decode_seqs": 8, "context": 8192, "max_context": 1024}))
    values.update(N=1024, K=4096)
    best: dict[int, tuple[float, float]] = {}
    for config in problem.family_of("o_proj").configs:
        split = dict(config.params)["SPLIT_K"]
        seconds = [sum(p[0] for p in phases) for _, phases in config.profile.launches(values, device, "o_proj")]
        graphs, eager = sum(seconds) + gap * len(seconds), eager_span(seconds, gap, EAGER_HOST_LAUNCH_S)
        if split not in best or graphs < best[split][0]:
            best[split] = (graphs, eager)
    (one_graphs, one_eager), (four_graphs, four_eager) = best[1], best[4]
    assert four_graphs < one_graphs and four_eager > one_eager, best


def test_under_eager_a_config_with_fewer_launches_is_never_pruned_as_dominated(tmp_path, write_problem) -> None:
    # split: 3 launches in 7 µs alone, fused: 1 in 8 µs, the same workspace and shares.
    # Under graphs split dominates fused (faster alone, nothing else differs); eagerly
    # fused's one launch is an axis of its own (29 µs against split's 64 µs), so both stay.
    import dataclasses

    from tuner.search.space import CellCost, _dominates

    config = Assignment.default(write_problem(two_configs(tmp_path))).config("op0")
    split = CellCost(config, 7 * US, 7 * US, 0.0, 0.3, 0.0, None, 3)
    fused = dataclasses.replace(split, latency_s=8 * US, lowest_latency_s=8 * US, launches=1)
    assert _dominates(split, fused, shared=False, earlier=False)
    assert not _dominates(split, fused, shared=False, earlier=False, eager=True)
    assert not _dominates(fused, split, shared=False, earlier=False, eager=True)


def test_the_simulate_table_counts_host_bound_iterations_when_the_host_issues_launches(tmp_path, write_problem,
                                                                                       capsys) -> None:
    from tuner.console import metrics_table

    for launch, shown in (({"launch": "eager", "host_launch": "10 us"}, True), ({}, False)):
        problem = write_problem(iteration(one_request(tmp_path), [2, 2, 2, 2], 1, **launch))
        m = simulate(problem, Assignment.default(problem), "replay").metrics
        metrics_table(problem, Assignment.default(problem), [("replay", m)], 0)
        out = capsys.readouterr().out
        assert ("host-bound" in out and "40 of 40" in out) == shown, out


def test_two_batch_overlap_issues_its_micro_batches_in_interleave_order(tmp_path, write_problem) -> None:
    # tests/test_two_batch.py's layer (GEMM 10 ms, all-reduce 4 ms per token, on two
    # streams), launched eagerly at 6 ms of host each (o = 0). The first iteration (A's
    # prefill alone) issues g1 ar1 g2 ar2 at 6, 12, 18, 24 ms: g1 [6,16], ar1 [16,20],
    # g2 [20,30], ar2 [30,34] -> 34 ms. The second (micro-batches A and B) issues A.g1 B.g1
    # A.ar1 B.ar1 A.g2 B.g2 A.ar2 B.ar2 at 6, 12, ..., 48 ms: A.g1 [6,16], B.g1 [16,26],
    # A.ar1 [18,22], B.ar1 [26,30], A.g2 [30,40], B.g2 [40,50], A.ar2 [42,46],
    # B.ar2 [50,54] -> 54 ms. Both requests end at 34 + 54 = 88 ms. (A host thread per
    # stream would end the second iteration at 50 ms.)
    from tests.test_two_batch import MS, overlapped, two_at_once

    document = overlapped(two_at_once(tmp_path), 4.0)
    document["service"].update(launch="eager", host_launch="6 ms")
    problem = write_problem(document)
    m = simulate(problem, Assignment.default(problem), "replay").metrics
    assert m.completed == 2
    assert m.latency_p50_s == pytest.approx(88 * MS, rel=1e-9)


def test_each_executor_has_its_own_host_thread(tmp_path, write_problem) -> None:
    # two executors, two requests at once, each alone in its iteration (host-bound case:
    # c = 10 µs, d = 2 µs, o = 1 µs; SM shares 0.3 + 0.3 never contend): both take 43 µs,
    # as one request alone does; one host thread for both would issue 8 launches, 80 µs.
    document = iteration(trace_file(tmp_path, [(0,), (0,), (0.5,)], "t"), [2, 2, 2, 2], 1, launch="eager",
                         host_launch="10 us")
    document["service"]["executors"] = 2
    problem = write_problem(document)
    m = simulate(problem, Assignment.default(problem), "replay").metrics
    assert m.latency_p99_s == pytest.approx(43 * US, rel=1e-9)
    assert m.host_bound_iterations == m.iterations == m.completed
