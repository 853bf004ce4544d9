"""Engine knobs (issue 40, first part): ``service.knobs`` in a problem file, checked against
the registry and the service, applied to a deployment, simulated by ``tuner simulate
--knob`` and swept by ``tuner knobs`` against the engine's defaults."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.test_service import token_service, trace_file
from tuner.problem.scenario import Scenario
from tuner.cli import main
from tuner.errors import ProblemError
from tuner.problem.assignment import Assignment
from tuner.problem.knobs import KNOBS, parse_setting
from tuner.sim import simulate

MS = 1e-3


def two_at_once(tmp_path, knobs: dict | None = None) -> dict:
    """Two requests at t = 0 (A then B), each a 1-token prompt and 2 output tokens (a third
    at 10 s, past the 5 s window: a trace must span time); every iteration is one 1 ms
    kernel, whatever it holds; 2 sequences and 2 tokens per iteration."""
    document = token_service(trace_file(tmp_path, [(0, 1, 2), (0, 1, 2), (10, 1, 2)], "t,prompt,output"))
    document["regimes"]["replay"]["horizon"] = "5 s"
    if knobs is not None:
        document["service"]["knobs"] = knobs
    return document


def test_max_num_seqs_is_the_sequences_an_iteration_holds_by_hand(tmp_path, write_problem):
    """A's arrival starts an iteration before B is seen. max_num_seqs 2: [0,1) A prefills;
    [1,2) A decodes (done at 2 ms) beside B's prefill; [2,3) B decodes (done at 3 ms):
    3 kernels. max_num_seqs 1: A prefills and decodes (done at 2 ms), then B does (done at
    4 ms): 4 kernels."""
    problem = write_problem(two_at_once(tmp_path, {"max_num_seqs": [2, 1]}))
    both = simulate(problem, Assignment.default(problem), "replay").metrics
    one_at_a_time = problem.with_knobs({"max_num_seqs": 1})
    single = simulate(one_at_a_time, Assignment.default(one_at_a_time), "replay").metrics
    assert (both.completed, single.completed) == (2, 2)
    assert (both.kernels, single.kernels) == (3, 4)
    assert (both.latency_p50_s, single.latency_p50_s) == (pytest.approx(2.5 * MS), pytest.approx(3 * MS))
    assert problem.service.max_batch == 2 and one_at_a_time.service.max_batch == 1  # the file's service unchanged


@pytest.mark.parametrize("knobs, where, says", [
    ({"max_seqs": [2]}, "service.knobs.max_seqs", "unknown knob (known: cudagraph_capture_sizes, "),
    ({"max_num_seqs": [1, 2]}, "service.knobs.max_num_seqs[0]", "1 is not what the service runs (2)"),
    ({"max_num_seqs": [2, 1, 1]}, "service.knobs.max_num_seqs[2]", "1 is listed twice"),
    ({"max_num_seqs": [2, 0]}, "service.knobs.max_num_seqs[1]", "expected a whole number >= 1"),
    ({"max_num_seqs": []}, "service.knobs.max_num_seqs", "expected a list of values"),
    ({"cudagraph_capture_sizes": [None]}, "service.knobs.cudagraph_capture_sizes", "batching vllm, not continuous"),
    ({"max_num_seqs": [2, 4]}, "service.knobs", "max_num_seqs=4: max_num_seqs 4 > max_num_batched_tokens 2"),
    ({"nccl_channels": [None, 8]}, "service.knobs.nccl_channels",
     "changes nothing here: no operator runs a collective (kernel: comm)"),
    ({"max_num_seqs": [2, *range(3, 40)], "max_num_batched_tokens": [2, *range(40, 48)]}, "service.knobs",
     "342 combinations; at most 256"),
])
def test_a_bad_knobs_block_is_one_line_naming_its_key(tmp_path, write_problem, knobs, where, says):
    with pytest.raises(ProblemError) as raised:
        write_problem(two_at_once(tmp_path, knobs))
    message = str(raised.value)
    assert f"{where}: " in message and says in message and "\n" not in message


def test_buckets_cover_every_value_the_knobs_may_take(tmp_path):
    """The buckets are cut over the widest deployment the knobs allow, so a config is
    chosen for the M a larger chunk makes, not stretched from the default's last bucket."""
    import yaml

    from tests.test_capacity_ceiling import ONE_GEMM
    from tuner.problem import load_problem

    document = yaml.safe_load(ONE_GEMM.read_text())
    document["service"]["knobs"] = {"max_num_batched_tokens": [8192, 16384]}
    path = tmp_path / "one_gemm_knobs.yaml"
    path.write_text(yaml.safe_dump(document))
    last = lambda problem: problem.service.operators[0].bucketing.buckets[-1].label  # noqa: E731
    assert (last(load_problem(ONE_GEMM)), last(load_problem(path))) == ("M4097..8192", "M8193..16384")


def test_every_registered_knob_says_where_the_engine_reads_it_and_when():
    for knob in KNOBS.values():  # vLLM, SGLang and NCCL fix all of them at engine start
        assert knob.source.startswith(("vllm/", "python/sglang/", "src/graph/")) and knob.start_up


@pytest.mark.parametrize("comm_ms, on_ms, off_ms", [(4.0, 28.0 + 44.0, 28.0 + 56.0), (15.0, 50.0 + 70.0, 50.0 + 100.0)])
def test_two_batch_overlap_as_a_knob_runs_the_hand_worked_schedules(tmp_path, write_problem, comm_ms, on_ms, off_ms):
    """tests/test_two_batch.py's layer (GEMM 10 ms, all-reduce per token; A and B
    together). On: its hand-worked schedule (A's prefill alone, then both split in two
    micro-batches). Off: every kernel in series on one stream, as an engine without the
    overlap runs them: A alone 10 + c + 10 + c, then two tokens 20 + 2c + 20 + 2c
    (c = 4 ms: 28 + 56; c = 15 ms: 50 + 100), 4 kernels per step."""
    from tests.test_two_batch import MS, overlapped
    from tests.test_two_batch import two_at_once as together

    document = overlapped(together(tmp_path), comm_ms)
    document["service"]["knobs"] = {"two_batch_overlap": [True, False]}
    problem = write_problem(document)
    off = problem.with_knobs({"two_batch_overlap": False})
    on_m = simulate(problem, Assignment.default(problem), "replay").metrics
    off_m = simulate(off, Assignment.default(off), "replay").metrics
    assert (on_m.latency_p50_s, off_m.latency_p50_s) == (pytest.approx(on_ms * MS), pytest.approx(off_ms * MS))
    assert (on_m.kernels, off_m.kernels) == (12, 8) and off.service.overlap == "independent"
    assert parse_setting("two_batch_overlap=false") == ("two_batch_overlap", False)


def test_two_batch_overlap_needs_a_second_stream(tmp_path, write_problem):
    with pytest.raises(ProblemError) as raised:
        write_problem(two_at_once(tmp_path, {"two_batch_overlap": [False, True]}))
    message = str(raised.value)
    assert "service.knobs: two_batch_overlap=true: two_batch overlaps operators on another partition" in message
    with pytest.raises(ProblemError, match=r"service.knobs.two_batch_overlap\[1\]: expected true or false"):
        write_problem(two_at_once(tmp_path, {"two_batch_overlap": [False, 1]}))


def test_command_line_settings_parse_as_the_engine_takes_them(tmp_path, write_problem):
    problem = write_problem(two_at_once(tmp_path, {"max_num_seqs": [2, 1]}))
    assert parse_setting("max_num_seqs=1") == ("max_num_seqs", 1)
    assert parse_setting("cudagraph_capture_sizes=1,2,4") == ("cudagraph_capture_sizes", (1, 2, 4))
    assert parse_setting("cudagraph_capture_sizes=default") == ("cudagraph_capture_sizes", None)
    for bad, says in (("max_num_seqs", "expected NAME=VALUE"), ("max_num_seqs=x", "invalid literal"),
                      ("cudagraph_capture_sizes=4,2", "must ascend")):
        with pytest.raises(ValueError, match=says):
            parse_setting(bad)


def test_simulate_runs_the_engine_with_a_knob_and_says_so(tmp_path, write_problem):
    problem = write_problem(two_at_once(tmp_path, {"max_num_seqs": [2, 1]}))
    runner = CliRunner()
    result = runner.invoke(main, ["simulate", problem.path, "--knob", "max_num_seqs=1", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["knobs"] == {"max_num_seqs": "1"} and document["kernels"] == 4
    refused = runner.invoke(main, ["simulate", problem.path, "--knob", "max_num_seqs=3"])
    assert refused.exit_code == 2 and "knob max_num_seqs=3 is not among its values (2, 1)" in refused.stderr


def test_knobs_sweeps_every_combination_against_the_defaults_paired_by_seed(tmp_path, write_problem):
    """The defaults first, with no difference of their own; every other combination with
    its paired difference; the best by capacity named with its verdict."""
    document = two_at_once(tmp_path, {"max_num_seqs": [2, 1]})
    document["regimes"] = {"steady": {"arrivals": {"process": "poisson", "rate": 100},
                                      "sizes": {"prompt": 1, "output": 2}, "horizon": "2 s"}}
    problem = write_problem(document)
    result = CliRunner().invoke(main, ["knobs", problem.path, "--seeds", "2", "--json", "-q"])
    assert result.exit_code == 0, result.output
    [first, second] = json.loads(result.stdout)["regimes"]["steady"]
    assert first["default"] and first["knobs"] == {"max_num_seqs": "2"} and first["capacity_delta_rps"] is None
    assert not second["default"] and second["knobs"] == {"max_num_seqs": "1"}
    assert second["capacity_rps"] < first["capacity_rps"]  # one sequence per 1 ms iteration serves half as many
    text = CliRunner().invoke(main, ["knobs", problem.path, "--seeds", "2", "-q"])
    assert "max_num_seqs=2: goodput " in text.stdout and "(defaults)" in text.stdout
    assert "best capacity: the defaults" in text.stdout
    plain = write_problem(two_at_once(tmp_path), "plain.yaml")
    none = CliRunner().invoke(main, ["knobs", plain.path])
    assert none.exit_code == 2 and "service.knobs lists no engine knob to sweep" in none.stderr


def test_regimes_that_differ_only_in_load_search_each_capacity_once(tmp_path, write_problem, monkeypatch):
    from tuner.search import knob_sweep

    document = two_at_once(tmp_path, {"max_num_seqs": [2, 1]})
    steady = {"arrivals": {"process": "poisson", "rate": 100}, "sizes": {"prompt": 1, "output": 2}, "horizon": "2 s"}
    document["regimes"] = {"light": steady, "heavy": {**steady, "arrivals": {"process": "poisson", "rate": 400}}}
    problem = write_problem(document)
    calls: list[str] = []
    real = knob_sweep.evaluate
    monkeypatch.setattr(knob_sweep, "evaluate", lambda *a, **k: calls.append(k["metric"]) or real(*a, **k))
    shared: dict = {}
    light = knob_sweep.sweep_knobs(Scenario.of(problem, "light", range(2)), capacities=shared)
    heavy = knob_sweep.sweep_knobs(Scenario.of(problem, "heavy", range(2)), capacities=shared)
    assert calls.count("capacity") == 2 and calls.count("goodput") == 4  # two combinations; goodput per regime
    assert [a.capacity for a in light] == [a.capacity for a in heavy]


def test_four_answers_say_so_when_the_configs_add_nothing_beyond_the_knobs(tmp_path, write_problem):
    """One config per operator: tuning the configs can add nothing, so (c) is (a) and (d)
    is (b) seed by seed, the interaction is 0, and the command says the configs add
    nothing beyond the best knobs (issue 40: "if the kernels add nothing beyond the knobs,
    the table says so with the numbers")."""
    from tuner.search import TuneSettings
    from tuner.search.knob_sweep import four_answers

    document = two_at_once(tmp_path, {"max_num_seqs": [2, 1]})
    document["regimes"] = {"steady": {"arrivals": {"process": "poisson", "rate": 100},
                                      "sizes": {"prompt": 1, "output": 2}, "horizon": "2 s"}}
    problem = write_problem(document)
    four = four_answers(problem, "steady", TuneSettings(trials=2, seeds=2))
    a, b, c, d = four.answers
    assert a.values == c.values == {"max_num_seqs": 2} and b.values == d.values == {"max_num_seqs": 2}
    assert a.capacity.values == c.capacity.values and b.capacity.values == d.capacity.values
    assert four.interaction().mean == 0
    result = CliRunner().invoke(main, ["knobs", problem.path, "--tune", "--trials", "2", "--seeds", "2", "-q"])
    assert result.exit_code == 0, result.output
    assert "(d) − (b): +0 ± 0 req/s: the tuned configs add nothing significant beyond the best knobs" in result.stdout
    assert "[I " not in result.output  # no Optuna log line per trial
    as_json = CliRunner().invoke(main, ["knobs", problem.path, "--tune", "--trials", "2", "--seeds", "2", "--json"])
    rows = json.loads(as_json.stdout)["regimes"]["steady"]["answers"]
    assert [row["answer"][:3] for row in rows] == ["(a)", "(b)", "(c)", "(d)"] and rows[0]["capacity_delta_rps"] is None


def test_the_chunk_size_decides_which_tile_serves_more(tmp_path):
    """Issue 40's hand-worked interaction. One GEMM (N 1024, K 4096, 32 layers) on an H100,
    prefill-heavy traffic (4096-token prompts fill every step to the chunk size), two
    tiles. Alone (the analytic model, `tuner profile`): at M 2048 the 128×128 tile takes
    39.3 us and the 128×256 one 55.2 us (at 2048 rows the wider tile leaves SMs idle);
    at M 8192, 142.5 us against 108.6 us. So max_num_batched_tokens sets the M the
    prefill GEMM runs, and with it which tile is faster and which serves more at the SLO:
    each tile wins at its own chunk size, and the per-bucket isolated-fastest baseline
    picks each in its own bucket."""
    import yaml

    from tests.test_capacity_ceiling import ONE_GEMM
    from tuner.problem import load_problem, resolve_assignment
    from tuner.search import PER_BUCKET, JointSpace
    from tuner.search.evaluate import evaluate

    document = yaml.safe_load(ONE_GEMM.read_text())
    document["families"]["gemm"]["space"] = {"BLOCK_M": [128], "BLOCK_N": [128, 256], "BLOCK_K": [64],
                                             "num_warps": [8], "num_stages": [3], "SPLIT_K": [1]}
    document["service"]["operators"][0].update(shape={"M": "tokens", "N": 1024, "K": 4096}, repeat=32)
    document["service"]["knobs"] = {"max_num_batched_tokens": [8192, 2048]}
    document["service"]["slo"] = {"ttft": "50 ms", "tpot": "20 ms"}
    document["regimes"] = {"prefill_heavy": {"arrivals": {"process": "poisson", "rate": 100},
                                             "sizes": {"prompt": 4096, "output": 4}, "horizon": "10 s"}}
    path = tmp_path / "chunk_and_tile.yaml"
    path.write_text(yaml.safe_dump(document))
    problem = load_problem(path)
    narrow, wide = (config.name for config in problem.families["gemm"].configs)
    assert "bn128" in narrow and "bn256" in wide
    baseline = PER_BUCKET.assignment(JointSpace.of(problem)).as_dict(problem)["proj"]
    assert (baseline["M1025..2048"], baseline["M4097..8192"]) == (narrow, wide)

    def capacity(chunk: int, config: str) -> float:
        deployment = problem.with_knobs({"max_num_batched_tokens": chunk})
        assignment = resolve_assignment(deployment, [f"proj={config}"])
        return evaluate(Scenario.of(deployment, "prefill_heavy", range(2), None), assignment, metric="capacity").mean

    assert capacity(2048, narrow) > capacity(2048, wide)
    assert capacity(8192, wide) > capacity(8192, narrow)
