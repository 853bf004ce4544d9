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

from tuner.errors import IllegalConfigError
from tuner.problem import Problem, load_problem
from tuner.search import (
    JointSpace, SearchError, TuneSettings, check_constraints, ci_half_width, footprint_ladder,
    isolated_fastest, select_best, smallest_footprint, study_name, table_rows, tune_problem, tune_regime,
    warm_starts,
)
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


# --- space and baselines -------------------------------------------------------------------


def test_joint_space_of_seed_example(seed_problem):
    space = JointSpace.of(seed_problem)
    assert space.operators == ("stage",)
    assert space.choices == (("lean", "fast"),)
    assert space.size == 2 and list(space.points()) == [("lean",), ("fast",)]
    assert space.point({"stage": "fast"}) == ("fast",)
    assert space.point({"stage": "medium"}) is None


def test_baselines_on_seed_example(seed_problem):
    space = JointSpace.of(seed_problem)
    assert isolated_fastest(space) == ("fast",)  # 8 ms beats 10 ms alone
    assert smallest_footprint(space) == ("lean",)  # no workspace


def test_baselines_and_ladder_on_tradeoff(tradeoff):
    space = JointSpace.of(tradeoff)
    assert space.size == 216
    assert isolated_fastest(space) == ("w4",) * 3
    assert smallest_footprint(space) == ("w0",) * 3
    assert footprint_ladder(space) == [(name,) * 3 for name, _, _ in TRADEOFF_VARIANTS]
    assert footprint_ladder(space, levels=3) == [("w0",) * 3, ("w1",) * 3, ("w4",) * 3]  # caps 0, 1, 4 GiB


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

    def launches(self, variables: Mapping[str, float], device, tag: str):
        if variables["batch"] > self.limit:
            raise IllegalConfigError(f"batch {variables['batch']} > {self.limit}")
        return self.inner.launches(variables, device, tag)

    def workspace_bytes(self, variables: Mapping[str, float]) -> float:
        if self.workspace_too:
            raise IllegalConfigError("no workspace at this shape")
        return self.inner.workspace_bytes(variables)


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
    assert outcome.tuned.point == ("lean",)
    assert not outcome.isolated_fastest.evaluation.feasible
    assert outcome.isolated_fastest.evaluation.mean == 0.0
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
    assert isolated_fastest(space) == ("lean",)
    no_workspace = with_profile(seed_problem, "stage", "fast", lambda p: ShapeLimited(p, limit=0, workspace_too=True))
    verdict = check_constraints(no_workspace, JointSpace.of(no_workspace).assignment(("fast",)), "light")
    assert verdict.legality == 1.0 and not verdict.feasible
    storage = memory_store()
    outcome = tune_regime(problem, "light", storage, TuneSettings(trials=3, seeds=2, horizon_s=5))
    assert outcome.tuned.point == ("lean",)
    study = optuna.load_study(study_name=outcome.study_name, storage=storage)
    illegal = [t for t in study.trials if t.params == {"stage": "fast"}]
    assert illegal and illegal[0].constraints["legality"] == 1.0 and illegal[0].value == 0.0
    assert illegal[0].user_attrs["infeasible"].startswith("illegal: batch")


def test_no_legal_config_is_an_error(seed_problem):
    problem = seed_problem
    for name in ("lean", "fast"):
        problem = with_profile(problem, "stage", name, lambda p: ShapeLimited(p, limit=0))
    with pytest.raises(SearchError, match="no config of family 'stage' can run operator 'stage'"):
        isolated_fastest(JointSpace.of(problem))


# --- studies -------------------------------------------------------------------------------


def test_seed_example_table_is_fast_when_light_lean_when_heavy(seed_problem, tmp_path):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    outcomes = tune_problem(seed_problem, url, TuneSettings(horizon_s=10, oracle=True))
    by_regime = {o.regime: o for o in outcomes}
    assert by_regime["light"].tuned.point == ("fast",)  # goodput ties; the faster config wins
    assert by_regime["heavy"].tuned.point == ("lean",)
    heavy = by_regime["heavy"]
    assert heavy.tuned.evaluation.mean > 10 * heavy.isolated_fastest.evaluation.mean
    for o in outcomes:
        tuned = o.tuned.evaluation
        assert tuned.mean + tuned.ci >= o.isolated_fastest.evaluation.mean
        assert tuned.mean >= 0.99 * o.oracle.best.evaluation.mean
    rows = {(r.regime, r.op): r for r in Store(url).rows()}
    assert rows["light", "stage"].config == "fast" and rows["heavy", "stage"].config == "lean"
    row = rows["heavy", "stage"]
    assert row.study_name == "tuner:seed_example:heavy" and row.source == "declared"
    assert row.kernel_source_hash is None and row.problem_hash == seed_problem.file_hash
    assert row.goodput_ci_rps > 0 and row.oracle_goodput_rps == pytest.approx(row.goodput_rps)


def test_tuned_reaches_the_oracle_with_a_tenth_of_its_simulations(tradeoff):
    storage = memory_store()
    outcome = tune_regime(tradeoff, "heavy", storage, TuneSettings(trials=20, seeds=3, oracle=True))
    oracle = outcome.oracle
    assert oracle.size == 216 and oracle.cost == 216 * 3
    assert outcome.tuned.evaluation.mean >= 0.99 * oracle.best.evaluation.mean
    assert outcome.study_simulations <= 0.10 * oracle.cost
    # the point of the product: the isolated-fastest choice loses under load
    assert outcome.isolated_fastest.evaluation.mean < 0.5 * oracle.best.evaluation.mean
    assert outcome.tuned.evaluation.mean > outcome.smallest_footprint.evaluation.mean


def test_the_wilcoxon_pruner_stops_clearly_worse_trials(tradeoff):
    storage = memory_store()
    tune_regime(tradeoff, "heavy", storage, TuneSettings(trials=12, seeds=5, horizon_s=0.5))
    study = optuna.load_study(study_name=study_name("tradeoff", "heavy"), storage=storage)
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    assert pruned, "with 5 paired seeds a much worse assignment is pruned after 4"
    best = study.best_trial
    for trial in pruned:
        steps = sorted(trial.intermediate_values)
        assert len(steps) < 5 and steps == list(range(len(steps)))
        assert all(trial.intermediate_values[s] < best.intermediate_values[s] for s in steps)


def test_repeated_points_replay_stored_values(tradeoff):
    storage = memory_store()
    tune_regime(tradeoff, "light", storage, TuneSettings(trials=25, seeds=2, horizon_s=0.5))
    study = optuna.load_study(study_name=study_name("tradeoff", "light"), storage=storage)
    replays = [t for t in study.trials if "duplicate_of" in t.user_attrs]
    assert replays, "light traffic: many assignments tie, TPE repeats points"
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
    starts = warm_starts(tradeoff, "heavy", space, storage)
    assert starts[:2] == [("w4",) * 3, ("w0",) * 3]
    assert light.tuned.point in starts
    heavy = tune_regime(tradeoff, "heavy", storage, settings)
    study = optuna.load_study(study_name=heavy.study_name, storage=storage)
    first = [tuple(t.params[op] for op in space.operators) for t in study.trials[:len(starts)]]
    assert first == starts


def test_select_best_breaks_goodput_ties_by_latency(seed_problem):
    storage = memory_store()
    tune_regime(seed_problem, "light", storage, TuneSettings(trials=2, seeds=2, horizon_s=5))
    study = optuna.load_study(study_name=study_name("seed_example", "light"), storage=storage)
    values = {t.params["stage"]: t.value for t in study.trials}
    assert values["fast"] == values["lean"]
    assert select_best(JointSpace.of(seed_problem), study.trials, 2).point == ("fast",)


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
    settings = TuneSettings(trials=10, seeds=2, horizon_s=0.5, oracle=False)
    tables = []
    for run in ("one", "two"):
        url = f"sqlite:///{tmp_path / run}.db"
        tune_problem(tradeoff, url, settings)
        with Store(url) as store:
            tables.append([dataclasses.replace(r, created_at=None) for r in store.rows()])
        trials = optuna.load_study(study_name=study_name("tradeoff", "heavy"), storage=url).trials
        tables[-1].append([(t.params, t.value) for t in trials])
    assert tables[0] == tables[1]


def test_table_rows_carry_provenance(seed_problem):
    outcome = tune_regime(seed_problem, "heavy", memory_store(), TuneSettings(trials=2, seeds=2, horizon_s=5))
    (row,) = table_rows(outcome)
    assert (row.problem, row.regime, row.op, row.config, row.params) == (
        "seed_example", "heavy", "stage", "lean", {"variant": "lean"})
    assert row.device == "generic" and row.seeds == 2 and row.horizon_s == 5.0
    assert row.trial_number == outcome.tuned.trial
    assert row.baseline_goodput_rps == outcome.isolated_fastest.evaluation.mean
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
    space = JointSpace.of(problem)
    assert space.size == 4
    outcome = tune_regime(problem, "steady", memory_store(), TuneSettings(trials=4, seeds=1, horizon_s=1))
    assert outcome.tuned.evaluation.mean >= outcome.isolated_fastest.evaluation.mean
    (row,) = table_rows(outcome)
    assert row.source == "modeled" and row.shape == {"M": 1024, "N": 4096, "K": 4096}
    entry, note = vllm_config(row)
    assert {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages"} <= set(entry)
    assert entry["SPLIT_K"] == row.params["SPLIT_K"] and "SPLIT_K" in note
