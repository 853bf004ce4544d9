"""The search: joint space, baselines, constraints, studies (warm starts, pruning, resume,
determinism) and the oracle — on the seed example and on a memory trade-off built here."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from tuner.problem.scenario import Scenario
from tuner.phases import WHOLE_DEVICE
from tuner.errors import IllegalConfigError, StorageError
from tuner.problem import Problem, load_problem
from tuner.search import (
    ONE_CONFIG, PER_BUCKET, SMALLEST, JointSpace, SearchError, TuneSettings, evaluate, study_name, table_rows,
    tune_problem, tune_regime,
)
from tuner.search.baselines import footprint_ladder
from tuner.search.evaluate import check_constraints
from tuner.search.ranking import select_best
from tuner.search.warm_starts import warm_starts
from tuner.problem import resolve_assignment
from tuner.stats import ci_half_width, paired_delta
from tuner.store import Store


optuna.logging.set_verbosity(optuna.logging.WARNING)

ROOT = Path(__file__).resolve().parents[1]
SEED_EXAMPLE = ROOT / "search_spaces" / "seed_example.yaml"

# (name, speed factor, workspace GiB): faster configs need more workspace.
TRADEOFF_VARIANTS = (("w0", 1.00, 0), ("w05", 0.92, 0.5), ("w1", 0.86, 1), ("w2", 0.80, 2), ("w3", 0.76, 3),
                     ("w4", 0.72, 4))


def tradeoff_problem(rate: float = 420.0, horizon: str = "1 s") -> dict:
    """Three operators × six configs = 216 joint assignments, declared profiles.

    The engine reserves the peak workspace × 4 executors before admitting requests of
    2 GiB each into 32 GiB: 16 admitted with no workspace, 8 with the 4 GiB configs.
    The isolated-fastest assignment (all ``w4``) is 28% faster per batch but admits
    half the requests, so under 420 req/s it serves about a quarter of the best
    assignment's goodput; the best sits in the middle of the ladder.
    """
    families, operators = {}, []
    for op, base in (("a", 1.0), ("b", 0.7), ("c", 1.3)):
        families[op] = {
            "space": {"v": [name for name, _, _ in TRADEOFF_VARIANTS]},
            "configs": [{"name": name, "params": {"v": name},
                         "profile": {"latency": f"{base * speed:.4f} * (8 ms + 0.8 ms * batch)",
                                     "workspace": f"{ws} GiB", "sm": 0.1, "dram": 0.05}}
                        for name, speed, ws in TRADEOFF_VARIANTS],
        }
        operators.append({"name": op, "family": op})
    return {
        "name": "tradeoff",
        "service": {"batching": "dynamic", "max_batch": 8, "max_wait": "2 ms", "executors": 4,
                    "memory": {"budget": "48 GiB", "fixed": "16 GiB", "per_request": "2 GiB"},
                    "operators": operators, "slo": {"deadline": "200 ms"}},
        "families": families,
        "regimes": {
            "light": {"description": "far below capacity", "arrivals": {"process": "poisson", "rate": 60},
                      "horizon": horizon},
            "heavy": {"description": "near the best capacity", "arrivals": {"process": "poisson", "rate": rate},
                      "horizon": horizon},
        },
    }


def write_yaml(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def tradeoff(tmp_path_factory) -> Problem:
    return load_problem(write_yaml(tmp_path_factory.mktemp("tradeoff") / "tradeoff.yaml", tradeoff_problem()))


@pytest.fixture(scope="module")
def seed_problem() -> Problem:
    return load_problem(SEED_EXAMPLE)


def memory_store() -> optuna.storages.InMemoryStorage:
    return optuna.storages.InMemoryStorage()


def names(assignment) -> tuple[str, ...]:
    """Config names in cell order (one cell per operator in these problems)."""
    return tuple(config.name for _, config in assignment.cells())


# --- space and baselines -------------------------------------------------------------------


def test_joint_space_of_seed_example(seed_problem):
    space = JointSpace.of(seed_problem)
    assert space.cells == (("stage", 0),) and space.names == ("stage",)
    assert space.choices == (("lean", "fast"),)
    assert space.size == 2 and list(space.points()) == [("lean",), ("fast",)]
    assert space.point({"stage": "fast"}) == ("fast",)
    assert space.point({"stage": "medium"}) is None


def test_baselines_on_seed_example(seed_problem):
    space = JointSpace.of(seed_problem)
    assert names(PER_BUCKET.assignment(space)) == ("fast",)  # 8 ms beats 10 ms alone
    assert names(ONE_CONFIG.assignment(space)) == ("fast",)
    assert names(SMALLEST.assignment(space)) == ("lean",)  # no workspace


def test_baselines_and_ladder_on_tradeoff(tradeoff):
    space = JointSpace.of(tradeoff)
    assert space.size == 216
    assert names(PER_BUCKET.assignment(space)) == ("w4",) * 3
    assert names(SMALLEST.assignment(space)) == ("w0",) * 3
    assert [names(a) for a in footprint_ladder(space)] == [(name,) * 3 for name, _, _ in TRADEOFF_VARIANTS]
    assert [names(a) for a in footprint_ladder(space, levels=3)] == [("w0",) * 3, ("w1",) * 3, ("w4",) * 3]


def test_ci_half_width_is_student_t():
    assert ci_half_width([5.0]) is None
    # n = 3, s = 1: t(0.975, 2) = 4.3027 → 4.3027 / sqrt(3)
    assert ci_half_width([1.0, 2.0, 3.0]) == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5)


# --- constraints ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ShapeLimited:
    """A Profile (the protocol, not a KernelProfile) that cannot run batches above ``limit``;
    with ``workspace_too`` it refuses the workspace query as well."""

    inner: object
    limit: float
    workspace_too: bool = False
    source: str = "modeled"
    variables_read = frozenset({"*"})  # its launches depend on its limit: not memoised

    def launches(self, variables: Mapping[str, float], device, tag: str, partition=WHOLE_DEVICE):
        if variables["batch"] > self.limit:
            raise IllegalConfigError(f"batch {variables['batch']} > {self.limit}")
        return self.inner.launches(variables, device, tag, partition)

    def workspace_bytes(self, variables: Mapping[str, float], partition=WHOLE_DEVICE) -> float:
        if self.workspace_too:
            raise IllegalConfigError("no workspace at this shape")
        return self.inner.workspace_bytes(variables, partition)


def with_profile(problem: Problem, family: str, config: str, wrap) -> Problem:
    fam = problem.families[family]
    configs = tuple(dataclasses.replace(c, profile=wrap(c.profile)) if c.name == config else c for c in fam.configs)
    families = {**problem.families, family: dataclasses.replace(fam, configs=configs)}
    return dataclasses.replace(problem, families=families)


def test_memory_constraint_is_positive_exactly_when_nothing_fits(tmp_path):
    document = yaml.safe_load(SEED_EXAMPLE.read_text())
    # fast's 5 GiB × 8 executors + 40 GiB fixed + one 4 GiB request = 84 GiB > 72 GiB
    document["families"]["stage"]["configs"][1]["profile"]["workspace"] = "5 GiB"
    problem = load_problem(write_yaml(tmp_path / "p.yaml", document))
    space = JointSpace.of(problem)
    fast = check_constraints(problem, space.assignment(("fast",)), "heavy")
    assert not fast.feasible and fast.memory == pytest.approx((84 - 72) / 72)
    assert "exceeds the budget" in fast.reason
    lean = check_constraints(problem, space.assignment(("lean",)), "heavy")
    assert lean.feasible and lean.memory == pytest.approx((44 - 72) / 72)


def test_infeasible_trials_are_kept_with_zero_goodput(tmp_path):
    document = yaml.safe_load(SEED_EXAMPLE.read_text())
    document["families"]["stage"]["configs"][1]["profile"]["workspace"] = "5 GiB"
    problem = load_problem(write_yaml(tmp_path / "p.yaml", document))
    storage = memory_store()
    outcome = tune_regime(problem, "heavy", storage, TuneSettings(trials=4, seeds=2, horizon_s=5))
    assert names(outcome.tuned.assignment) == ("lean",)
    assert not outcome.baseline.evaluation.feasible
    assert outcome.baseline.evaluation.mean == 0.0
    study = optuna.load_study(study_name=outcome.study_name, storage=storage)
    infeasible = [t for t in study.trials if t.params == {"stage": "fast"}]
    assert infeasible and all(t.value == 0.0 for t in infeasible)
    assert all(t.constraints["memory"] > 0 and t.user_attrs["constraint"][0] > 0 for t in infeasible)
    assert "memory" in infeasible[0].user_attrs["infeasible"]
    assert study.best_trial.params == {"stage": "lean"}


def test_illegal_shapes_make_a_trial_infeasible_not_fatal(seed_problem):
    # fast cannot run any batch: the baselines skip it, the study records it as illegal
    problem = with_profile(seed_problem, "stage", "fast", lambda p: ShapeLimited(p, limit=0))
    space = JointSpace.of(problem)
    assert names(PER_BUCKET.assignment(space)) == ("lean",)
    no_workspace = with_profile(seed_problem, "stage", "fast", lambda p: ShapeLimited(p, limit=0, workspace_too=True))
    verdict = check_constraints(no_workspace, JointSpace.of(no_workspace).assignment(("fast",)), "light")
    assert verdict.legality == 1.0 and not verdict.feasible
    assert space.choices == (("lean",),)  # pruned before any simulation, as triton.autotune's prune_configs_by
    illegal = evaluate(Scenario.of(problem, "light", [0], 5.0), space.assignment(("fast",))).constraints
    assert illegal.legality == 1.0 and illegal.reason.startswith("illegal: batch")
    storage = memory_store()
    outcome = tune_regime(problem, "light", storage, TuneSettings(trials=3, seeds=2, horizon_s=5))
    assert names(outcome.tuned.assignment) == ("lean",) and outcome.trials == 1  # the space has one point


def test_no_legal_config_is_an_error(seed_problem):
    problem = seed_problem
    for name in ("lean", "fast"):
        problem = with_profile(problem, "stage", name, lambda p: ShapeLimited(p, limit=0))
    with pytest.raises(SearchError, match="no config of family 'stage' can run operator 'stage'"):
        PER_BUCKET.assignment(JointSpace.of(problem))


# --- studies -------------------------------------------------------------------------------


def test_seed_example_table_is_fast_when_light_lean_when_heavy(seed_problem, tmp_path):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    outcomes = tune_problem(seed_problem, url, TuneSettings(horizon_s=10, oracle=True))
    by_regime = {o.regime: o for o in outcomes}
    assert names(by_regime["light"].tuned.assignment) == ("fast",)  # goodput ties; the faster config wins
    assert names(by_regime["heavy"].tuned.assignment) == ("lean",)
    heavy = by_regime["heavy"]
    assert heavy.tuned.evaluation.mean > 10 * heavy.baseline.evaluation.mean
    for o in outcomes:
        tuned = o.tuned.evaluation
        assert tuned.mean >= 0.99 * o.oracle.best.evaluation.mean
    rows = {(r.regime, r.op): r for r in Store(url).rows()}
    assert rows["light", "stage"].config == "fast" and rows["heavy", "stage"].config == "lean"
    row = rows["heavy", "stage"]
    assert row.study_name == "tuner:seed_example:heavy" and row.source == "declared"
    assert row.kernel_source_hash is None and row.problem_hash == seed_problem.file_hash
    assert row.goodput_ci_rps > 0 and row.oracle_goodput_rps == pytest.approx(row.goodput_rps)
    assert row.bucket == 0 and row.bucket_bounds is None and row.baseline_config == "fast"
    assert row.regime_rate_rps == 720.0  # the file's rate, for the runtime's classifier
    # paired over the same 3 seeds: lean − fast, and its t-interval excludes 0
    assert row.delta_ci_rps is not None and row.goodput_rps - row.baseline_goodput_rps > row.delta_ci_rps


def test_tuned_reaches_the_oracle_with_a_tenth_of_its_simulations(tradeoff):
    storage = memory_store()
    outcome = tune_regime(tradeoff, "heavy", storage, TuneSettings(trials=20, seeds=3, oracle=True))
    oracle = outcome.oracle
    assert oracle.size == 216 and oracle.cost == 216 * 3
    assert outcome.tuned.evaluation.mean >= 0.99 * oracle.best.evaluation.mean
    assert outcome.study_simulations <= 0.10 * oracle.cost
    # the point of the product: the isolated-fastest choice loses under load
    assert outcome.baseline.evaluation.mean < 0.5 * oracle.best.evaluation.mean
    # 420 req/s is above every assignment's capacity: a 1 s window sees a transient, and
    # the outcome says so rather than passing it off as a steady state
    assert outcome.baseline.evaluation.overloaded == 3


def test_capacity_ranks_the_ladder_where_goodput_at_a_stable_rate_ties(tmp_path):
    """Below saturation every rung serves every request (goodput = the arrival rate, a tie);
    capacity still tells them apart: the middle rung admits enough requests and runs fast
    enough, the isolated-fastest rung admits half as many (paired over the same seeds)."""
    problem = load_problem(write_yaml(tmp_path / "t.yaml", tradeoff_problem(rate=300, horizon="2 s")))
    rung = {v: resolve_assignment(problem, [f"{op}={v}" for op in "abc"]) for v in ("w0", "w1", "w4")}
    goodput = {v: evaluate(Scenario.of(problem, "heavy", (0, 1, 2), None), a) for v, a in rung.items()}
    assert goodput["w0"].values == goodput["w1"].values and not goodput["w1"].overloaded
    capacity = {v: evaluate(Scenario.of(problem, "heavy", (0, 1, 2), None), a, metric="capacity") for v, a in rung.items()}
    assert paired_delta(capacity["w1"], capacity["w0"]).mean > 0
    assert paired_delta(capacity["w0"], capacity["w4"]).excludes_zero
    assert all(c.mean > 300 for c in (capacity["w0"], capacity["w1"])) and capacity["w4"].mean < 300


def test_the_wilcoxon_pruner_stops_clearly_worse_trials(tradeoff):
    storage = memory_store()
    settings = TuneSettings(trials=8, seeds=6, horizon_s=0.5)  # one seed ties everywhere
    tune_regime(tradeoff, "heavy", storage, settings)
    study = optuna.load_study(study_name=study_name("tradeoff", "heavy"), storage=storage)
    for worse in (("w4", "w4", "w3"), ("w3", "w4", "w4")):  # near the isolated-fastest: half the concurrency
        study.enqueue_trial(dict(zip(("a", "b", "c"), worse)))
    tune_regime(tradeoff, "heavy", storage, dataclasses.replace(settings, trials=10))
    study = optuna.load_study(study_name=study_name("tradeoff", "heavy"), storage=storage)
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    assert pruned, "with 6 paired seeds (one a tie) a much worse assignment is pruned after 5"
    best = study.best_trial
    for trial in pruned:
        steps = sorted(trial.intermediate_values)
        assert len(steps) < 6 and steps == list(range(len(steps)))
        assert all(trial.intermediate_values[s] <= best.intermediate_values[s] for s in steps)
        assert sum(trial.intermediate_values[s] < best.intermediate_values[s] for s in steps) >= 4


def test_repeated_points_replay_stored_values(tradeoff):
    storage = memory_store()
    settings = TuneSettings(trials=6, seeds=2, horizon_s=0.5)
    tune_regime(tradeoff, "light", storage, settings)
    study = optuna.load_study(study_name=study_name("tradeoff", "light"), storage=storage)
    for params in (study.trials[0].params, study.trials[2].params):  # a user enqueues points already run
        study.enqueue_trial(params, skip_if_exists=False)
    tune_regime(tradeoff, "light", storage, dataclasses.replace(settings, trials=8))
    study = optuna.load_study(study_name=study_name("tradeoff", "light"), storage=storage)
    replays = [t for t in study.trials if "duplicate_of" in t.user_attrs]
    assert len(replays) == 2
    for trial in replays:
        original = study.trials[trial.user_attrs["duplicate_of"]]
        assert trial.user_attrs["simulations"] == 0
        assert trial.intermediate_values == original.intermediate_values
    distinct = {tuple(t.params.values()) for t in study.trials}
    assert sum(t.user_attrs["simulations"] for t in study.trials) <= 2 * len(distinct)


def test_warm_starts_come_first_and_include_neighbour_bests(tradeoff):
    storage = memory_store()
    settings = TuneSettings(trials=10, seeds=2, horizon_s=0.5)
    light = tune_regime(tradeoff, "light", storage, settings)
    space = JointSpace.of(tradeoff)
    starts = [a for a, knobs in warm_starts(tradeoff, "heavy", space, storage)]
    assert [names(a) for a in starts[:2]] == [("w4",) * 3, ("w0",) * 3]
    assert light.tuned.assignment in starts
    heavy = tune_regime(tradeoff, "heavy", storage, settings)
    study = optuna.load_study(study_name=heavy.study_name, storage=storage)
    first = [tuple(t.params[name] for name in space.names) for t in study.trials[:len(starts)]]
    assert first == [names(a) for a in starts]


def test_select_best_breaks_goodput_ties_by_latency(seed_problem):
    storage = memory_store()
    tune_regime(seed_problem, "light", storage, TuneSettings(trials=2, seeds=2, horizon_s=5))
    study = optuna.load_study(study_name=study_name("seed_example", "light"), storage=storage)
    values = {t.params["stage"]: t.value for t in study.trials}
    assert values["fast"] == values["lean"]
    assert names(select_best(JointSpace.of(seed_problem), study.trials, 2).assignment) == ("fast",)


def test_a_study_refuses_other_settings(tradeoff):
    storage = memory_store()
    tune_regime(tradeoff, "light", storage, TuneSettings(trials=2, seeds=2, horizon_s=0.5))
    with pytest.raises(SearchError, match=r"was run with seeds \[0, 1\] but this run asks for \[0, 1, 2\].*--fresh"):
        tune_regime(tradeoff, "light", storage, TuneSettings(trials=2, seeds=3, horizon_s=0.5))


def test_unknown_regime_is_an_error(tradeoff):
    with pytest.raises(SearchError, match="no regime 'medium'"):
        tune_problem(tradeoff, "sqlite://", TuneSettings(), ["medium"])


@pytest.mark.parametrize("bad, message", [
    ({"trials": 0}, "trials must be at least 1 but got 0"),
    ({"seeds": 0}, "seeds must be at least 1 but got 0"),
    ({"horizon_s": -1.0}, "horizon must be a finite number of seconds > 0 but got -1.0"),
    ({"p_threshold": 1.5}, "p_threshold must be between 0 and 1 but got 1.5"),
])
def test_settings_are_validated(bad, message):
    with pytest.raises(SearchError, match=message):
        TuneSettings(**bad)


class Interrupt:
    """An Optuna callback that presses Ctrl-C after ``after`` trials of this run."""

    def __init__(self, after: int) -> None:
        self.after, self.seen = after, 0

    def __call__(self, study, trial) -> None:
        self.seen += 1
        if self.seen >= self.after:
            raise KeyboardInterrupt


def test_interrupting_loses_no_trial_and_a_rerun_resumes(tradeoff, storage_url):
    settings = TuneSettings(trials=9, seeds=2, horizon_s=0.5)
    with pytest.raises(KeyboardInterrupt):
        tune_problem(tradeoff, storage_url, settings, ["heavy"], callbacks=[Interrupt(4)])
    with Store(storage_url) as store:
        assert store.rows("tradeoff") == []  # the table is written only when a regime is done
    study = optuna.load_study(study_name=study_name("tradeoff", "heavy"), storage=storage_url)
    done = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(done) == 4
    before = {t.number: t.params for t in done}

    outcomes = tune_problem(tradeoff, storage_url, settings, ["heavy"])
    study = optuna.load_study(study_name=study_name("tradeoff", "heavy"), storage=storage_url)
    done = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(done) == 9 == outcomes[0].trials
    assert {t.number: t.params for t in done if t.number in before} == before
    assert sorted(t.number for t in done)[4:] == list(range(4, 9))
    with Store(storage_url) as store:
        assert {r.op for r in store.rows("tradeoff")} == {"a", "b", "c"}


def test_same_seed_same_table(tradeoff, tmp_path):
    """Twice in one process, then with the seeds simulated in three worker processes
    (tuner.search.parallel): the same trials, the same table."""
    settings = TuneSettings(trials=10, seeds=2, horizon_s=0.5, oracle=False)
    tables = []
    for run, sim_jobs in (("one", 1), ("two", 1), ("pool", 3)):
        url = f"sqlite:///{tmp_path / run}.db"
        tune_problem(tradeoff, url, settings, sim_jobs=sim_jobs)
        with Store(url) as store:
            tables.append([dataclasses.replace(r, created_at=None) for r in store.rows()])
        trials = optuna.load_study(study_name=study_name("tradeoff", "heavy"), storage=url).trials
        tables[-1].append([(t.params, t.value) for t in trials])
    assert tables[0] == tables[1] == tables[2]


def test_table_rows_carry_provenance(seed_problem):
    outcome = tune_regime(seed_problem, "heavy", memory_store(), TuneSettings(trials=2, seeds=2, horizon_s=5))
    (row,) = table_rows(outcome)
    assert (row.problem, row.regime, row.op, row.config, row.params) == (
        "seed_example", "heavy", "stage", "lean", {"variant": "lean"})
    assert row.device == "generic" and row.seeds == 2 and row.horizon_s == 5.0
    assert row.trial_number == outcome.tuned.trial
    assert row.baseline_goodput_rps == outcome.baseline.evaluation.mean
    assert row.oracle_goodput_rps is None and row.created_at.tzinfo is not None


def test_the_oracle_declines_a_space_over_its_limit(tradeoff):
    settings = TuneSettings(trials=2, seeds=1, horizon_s=0.2, oracle=True, oracle_limit=100)
    outcome = tune_regime(tradeoff, "light", memory_store(), settings)
    assert outcome.oracle.size == 216 and outcome.oracle.limit == 100
    assert outcome.oracle.best is None and outcome.oracle.simulations == 0


def test_built_in_kernel_families_tune_through_the_profile_protocol(tmp_path):
    """Modeled profiles (compiled resources from a stand-in): rows say 'modeled', carry the
    kernel's parameters, and export as vLLM tiles with the extra parameters noted."""
    from tests.test_modeled import GEMM_PROBLEM, FakeResources
    from tuner.store.export import vllm_config

    problem = load_problem(write_yaml(tmp_path / "gemm.yaml", GEMM_PROBLEM), resources=FakeResources())
    outcome = tune_regime(problem, "steady", memory_store(), TuneSettings(trials=4, seeds=1, horizon_s=1))
    rows = table_rows(outcome)
    assert [r.bucket for r in rows] == list(range(problem.operator("proj").bucketing.size))
    row = rows[-1]  # the largest bucket: its representative shape is the largest batch's
    assert row.source == "modeled" and row.shape == {"M": 1024, "N": 4096, "K": 4096}
    entry, note = vllm_config(row)
    assert {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages"} <= set(entry)
    assert entry["SPLIT_K"] == row.params["SPLIT_K"] and "SPLIT_K" in note


# --- a bucketed problem whose best assignment is derived by hand -----------------------------


def ladder_problem() -> dict:
    """Two operators, each with buckets M ≤ 1 and 1 < M ≤ 4 (every request is one batch of
    size n ∈ {1, 4}, equally likely), three configs trading time for workspace:

    ======  =====================  ==================
    config  time alone at M        workspace at M
    ======  =====================  ==================
    v0      1.00 · (1 + M) ms      0
    v1      0.85 · (1 + M) ms      M/32 GiB
    v2      0.70 · (1 + M) ms      M/2 GiB
    ======  =====================  ==================

    The engine reserves the peak workspace × 8 executors out of 17 GiB free for 2 GiB
    requests. By hand (capacity = admitted servers / mean service time of n ∈ {1, 4}):
    all v0: 8 / 7 ms = 1143/s; all v1: reserves 8 × 1/8 = 1 GiB, still 8 admitted,
    8 / 5.95 ms = 1345/s; v2 in the small buckets: reserves 4 GiB, 6 admitted,
    6 / 5.65 ms = 1062/s; v2 in a large bucket: reserves 16 GiB, nothing fits. At 1250
    req/s only all-v1 is below capacity: it is the optimum, the per-bucket
    isolated-fastest (all v2) serves nothing, and the smallest footprint (all v0) is
    overloaded.
    """
    configs = [{"name": name, "params": {"v": name},
                "profile": {"latency": f"{speed} * (1 ms + 1 ms * M)", "workspace": f"M * {ws} GiB",
                            "sm": 0.05, "dram": 0.05}}
               for name, speed, ws in (("v0", 1.0, 0), ("v1", 0.85, 1 / 32), ("v2", 0.7, 0.5))]
    operators = [{"name": op, "family": "stage", "shape": {"M": "n"}, "buckets": {"M": [1, 4]}} for op in "ab"]
    return {
        "name": "ladder",
        "service": {"batching": "dynamic", "max_batch": 1, "max_context": 4, "executors": 8,
                    "memory": {"budget": "33 GiB", "fixed": "16 GiB", "per_request": "2 GiB"},
                    "operators": operators, "slo": {"deadline": "50 ms"}},
        "families": {"stage": {"space": {"v": ["v0", "v1", "v2"]}, "configs": configs}},
        "regimes": {"heavy": {"arrivals": {"process": "poisson", "rate": 1250},
                              "sizes": {"n": {"dist": "empirical", "values": [1, 4]}}, "horizon": "4 s"}},
    }


def test_search_finds_the_hand_derived_optimum_of_a_bucketed_problem(tmp_path):
    problem = load_problem(write_yaml(tmp_path / "ladder.yaml", ladder_problem()))
    space = JointSpace.of(problem)
    assert space.cells == (("a", 0), ("a", 1), ("b", 0), ("b", 1)) and space.size == 81
    outcome = tune_regime(problem, "heavy", memory_store(), TuneSettings(trials=8, seeds=3, oracle=True))
    assert names(outcome.tuned.assignment) == ("v1",) * 4
    assert names(outcome.oracle.best.assignment) == ("v1",) * 4
    assert outcome.study_simulations <= 0.2 * outcome.oracle.cost  # 36 of the 81 points are feasible
    assert names(outcome.baseline.assignment) == ("v2",) * 4 and not outcome.baseline.evaluation.feasible
    footprint = outcome.baselines["smallest_footprint"].evaluation
    assert names(outcome.baselines["smallest_footprint"].assignment) == ("v0",) * 4
    assert outcome.tuned.evaluation.mean > 1.3 * footprint.mean  # overloaded: its queue grows past 50 ms


def test_a_capacity_study_picks_the_config_with_more_headroom_where_goodput_ties(tmp_path):
    """In light traffic both seed-example variants meet every deadline: a goodput study
    picks `fast` (lower latency), a capacity study `lean` (8 servers of 10 ms take more
    traffic than 4 of 8 ms). Both figures are stored whichever was maximised. In this
    regime the guard keeps `fast` even for the capacity study: `lean` serves each light-load
    request 2 ms slower (10 vs 8 ms), a p90 loss beyond its interval, and the runtime
    switches to another regime's configs when the load rises."""
    document = yaml.safe_load(SEED_EXAMPLE.read_text())
    settings = TuneSettings(trials=2, seeds=2, horizon_s=10)
    chosen = {}
    for objective in ("goodput", "capacity"):
        document["objective"] = objective
        problem = load_problem(write_yaml(tmp_path / f"{objective}.yaml", document))
        outcome = tune_regime(problem, "light", memory_store(), settings)
        assert outcome.objective == objective
        assert outcome.tuned.evaluation.metric == "goodput" and outcome.tuned.capacity.metric == "capacity"
        assert len(outcome.tuned.evaluation.rates) == 2 and not outcome.tuned.evaluation.overloaded
        row = table_rows(outcome)[0]
        assert row.objective == objective and row.capacity_rps == pytest.approx(outcome.tuned.capacity.mean)
        best = outcome.candidate or outcome.tuned  # the study's pick, before the guard
        chosen[objective] = (names(best.assignment), best.capacity.mean, names(outcome.tuned.assignment), row.guard)
    assert chosen["goodput"][0] == chosen["goodput"][2] == ("fast",) and chosen["goodput"][3] is None
    assert chosen["capacity"][0] == ("lean",) and chosen["capacity"][1] > 1.4 * chosen["goodput"][1]
    assert chosen["capacity"][2] == ("fast",) and "but p90 latency +2" in chosen["capacity"][3]


# ---- storage atomicity: a failed run writes nothing it cannot keep ------------------------

QUICK = TuneSettings(trials=3, seeds=2, horizon_s=2)


def sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def tuned_db(seed_problem, tmp_path) -> Path:
    """A database holding seed_example's light regime, tuned and written."""
    path = tmp_path / "tuner.db"
    tune_problem(seed_problem, f"sqlite:///{path}", QUICK, ["light"])
    return path


class Failing:
    """Replaces the simulator: raises ``error`` from the objective's ``after``-th evaluation on."""

    def __init__(self, error: BaseException, after: int = 0) -> None:
        self.error, self.after, self.calls = error, after, 0

    def __call__(self, *args, **kwargs):
        from tuner.search import evaluate as real

        self.calls += 1
        if self.calls > self.after:
            raise self.error
        return real(*args, **kwargs)


@pytest.mark.parametrize("failure", ["bad regime", "error in the first trial", "Ctrl-C in the first trial",
                                     "a new problem's first trial"])
def test_a_run_that_fails_before_a_trial_finished_leaves_the_database_byte_identical(
        failure, seed_problem, tradeoff, tuned_db, monkeypatch):
    before = sha256(tuned_db)
    url = f"sqlite:///{tuned_db}"
    if failure == "bad regime":
        with pytest.raises(SearchError):
            tune_problem(seed_problem, url, QUICK, ["heavy", "nope"])
    else:
        error = KeyboardInterrupt() if failure.startswith("Ctrl-C") else RuntimeError("simulator failed")
        monkeypatch.setattr("tuner.search.objective.evaluate", Failing(error))
        problem = tradeoff if failure.startswith("a new problem") else seed_problem
        with pytest.raises(type(error)):
            tune_problem(problem, url, QUICK, ["heavy"])
    assert sha256(tuned_db) == before


def test_a_rehearsed_study_is_the_study_a_plain_run_makes(seed_problem, monkeypatch):
    """The rehearsal's trial is replayed, not simulated again: same trials, same simulations."""
    from tuner.search import evaluate as real
    from tuner.search.study import run_study

    runs = {}
    for rehearse in (False, True):
        calls = []
        monkeypatch.setattr("tuner.search.objective.evaluate", lambda *a, **k: calls.append(1) or real(*a, **k))
        study = run_study(seed_problem, "heavy", memory_store(), QUICK, rehearse=rehearse)
        runs[rehearse] = ([(t.number, t.params, t.value, t.user_attrs, t.state) for t in study.trials], len(calls))
    assert runs[True] == runs[False]


def test_an_interrupted_run_keeps_its_finished_trials(seed_problem, tuned_db, monkeypatch):
    url = f"sqlite:///{tuned_db}"
    monkeypatch.setattr("tuner.search.objective.evaluate", Failing(KeyboardInterrupt(), after=1))
    with pytest.raises(KeyboardInterrupt):
        tune_problem(seed_problem, url, QUICK, ["heavy"])
    states = [t.state for t in optuna.load_study(study_name=study_name("seed_example", "heavy"), storage=url).trials]
    assert states.count(TrialState.COMPLETE) == 1  # kept: a rerun resumes from it
    monkeypatch.undo()
    assert [o.regime for o in tune_problem(seed_problem, url, QUICK, ["heavy"])] == ["heavy"]


def failing_rows(monkeypatch) -> None:
    """Make the rows' transaction fail after its writes (so they must be rolled back)."""
    from tuner.errors import StorageError
    from tuner.store import store

    def write(session, *args, **kwargs):
        real(session, *args, **kwargs)
        session.flush()
        raise StorageError("disk full")

    real = store.write_regime
    monkeypatch.setattr(store, "write_regime", write)
    monkeypatch.setattr("tuner.search.staging.write_regime", write)


def test_a_failure_writing_the_rows_keeps_the_trials_and_the_old_rows(seed_problem, tuned_db, monkeypatch):
    url = f"sqlite:///{tuned_db}"
    with Store(url) as store:
        old = store.rows()
    failing_rows(monkeypatch)
    with pytest.raises(StorageError, match="disk full"):
        tune_problem(seed_problem, url, QUICK, ["heavy"])
    with Store(url) as store:
        assert store.rows() == old
    monkeypatch.undo()
    outcomes = tune_problem(seed_problem, url, QUICK, ["heavy"])
    assert outcomes[0].study_simulations > 0 and outcomes[0].trials == 2  # the space's 2 points, from the study


def test_a_failed_fresh_run_leaves_the_old_study_intact_and_usable(seed_problem, tuned_db, monkeypatch):
    url = f"sqlite:///{tuned_db}"
    before = sha256(tuned_db)
    other = dataclasses.replace(QUICK, seeds=3)
    for failure in (Failing(RuntimeError("simulator failed")), Failing(KeyboardInterrupt(), after=1)):  # after a trial finished
        monkeypatch.setattr("tuner.search.objective.evaluate", failure)
        with pytest.raises(type(failure.error)):
            tune_problem(seed_problem, url, other, ["light"], fresh=True)
        assert sha256(tuned_db) == before
    monkeypatch.undo()
    failing_rows(monkeypatch)
    with pytest.raises(StorageError, match="disk full"):
        tune_problem(seed_problem, url, other, ["light"], fresh=True)
    assert sha256(tuned_db) == before
    monkeypatch.undo()
    assert tune_problem(seed_problem, url, QUICK, ["light"]) == []  # the old study, complete and written

    tune_problem(seed_problem, url, other, ["light"], fresh=True)
    study = optuna.load_study(study_name=study_name("seed_example", "light"), storage=url)
    assert study.user_attrs["seeds"] == [0, 1, 2]
    assert all(len(t.intermediate_values) == 3 for t in study.trials if t.state == TrialState.COMPLETE)
    with Store(url) as store:
        assert {r.seeds for r in store.rows()} == {3}
        assert store.written_key(study.study_name) is not None
    with pytest.raises(SearchError, match="--fresh"):  # the old settings are the ones refused now
        tune_problem(seed_problem, url, QUICK, ["light"])


@pytest.mark.parametrize("moment", ["writing the swapped-in rows", "deleting the scratch database",
                                    "stopping the seed processes"])
def test_a_ctrl_c_once_the_fresh_swap_began_lets_the_run_succeed(seed_problem, tuned_db, monkeypatch, moment):
    """Issue 39, item 5: a fresh run interrupted after its swap had committed said "the
    studies and table are as they were" and exited 130, though the database had changed.
    The swap is the run's success: a SIGINT from its first write to the end of the
    clean-up is ignored, and the run returns its outcomes with the new study in place."""
    import os
    import signal

    from tuner.search import parallel, staging

    def interrupting(real):
        def call(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGINT)
            return real(*args, **kwargs)
        return call

    if moment == "writing the swapped-in rows":
        monkeypatch.setattr(staging, "write_regime", interrupting(staging.write_regime))
    elif moment == "deleting the scratch database":
        monkeypatch.setattr(staging.shutil, "rmtree", interrupting(staging.shutil.rmtree))
    else:
        monkeypatch.setattr(parallel, "seed_pool", _interrupted_on_exit(parallel.seed_pool))
    url = f"sqlite:///{tuned_db}"
    other = dataclasses.replace(QUICK, seeds=3)
    outcomes = tune_problem(seed_problem, url, other, ["light"], fresh=True)
    assert [o.regime for o in outcomes] == ["light"]
    study = optuna.load_study(study_name=study_name("seed_example", "light"), storage=url)
    assert study.user_attrs["seeds"] == [0, 1, 2]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back afterwards


def _interrupted_on_exit(real):
    """``parallel.seed_pool`` whose exit (the run's last clean-up) gets a SIGINT first."""
    import contextlib
    import os
    import signal

    @contextlib.contextmanager
    def pool(*args, **kwargs):
        with real(*args, **kwargs) as opened:
            yield opened
            os.kill(os.getpid(), signal.SIGINT)
    return pool


def test_a_fresh_run_keeps_the_other_regimes_and_warm_starts_from_them(seed_problem, tuned_db):
    url = f"sqlite:///{tuned_db}"
    tune_problem(seed_problem, url, QUICK, ["heavy"])
    light = optuna.load_study(study_name=study_name("seed_example", "light"), storage=url).trials
    tune_problem(seed_problem, url, QUICK, ["heavy"], fresh=True)
    again = optuna.load_study(study_name=study_name("seed_example", "light"), storage=url).trials
    assert [(t.params, t.value) for t in again] == [(t.params, t.value) for t in light]
    names = {s.study_name for s in optuna.get_all_study_summaries(url)}
    assert names == {study_name("seed_example", "light"), study_name("seed_example", "heavy")}
