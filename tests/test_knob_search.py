"""Engine knobs and kernel configs in one search (issue 40): a regime's study proposes both,
the deployment takes one setting of the start-up knobs for every regime, chosen by
capacity at the SLO against the engine's defaults, and every row carries it.

The problem is the hand-worked interaction of ``tests/test_knobs.py``: one GEMM (N 1024,
K 4096, 32 layers) on an H100 under prefill-heavy traffic, the chunk size
(``max_num_batched_tokens``) 2048 or 8192, two tiles. Alone, four 2048-row steps of the
128×128 tile take 4 × 39.3 = 157.2 us per layer and one 8192-row step of the 128×256
tile 108.6 us (``tuner profile``'s analytic model): the same prompt tokens prefill 1.45×
faster at chunk 8192, so a prefill-bound service serves about 1.45× more at the SLO.
"""

from __future__ import annotations

import dataclasses

import optuna
import pytest
import yaml
from click.testing import CliRunner

from tests.test_capacity_ceiling import ONE_GEMM
from tuner.problem.scenario import Scenario
from tuner.cli import main
from tuner.problem import load_problem
from tuner.search import TuneSettings
from tuner.search.deployment import choose_deployment
from tuner.search.knob_axis import PREFIX
from tuner.search.outcome import capacity_at_slo
from tuner.search.settings import study_name
from tuner.search.tuning import tune_problem
from tuner.store import Store

#: Per layer: four 2048-row steps of the 128x128 tile against one 8192-row step of the 128x256 one.
PREFILL_SPEEDUP = 4 * 39.3 / 108.6


def chunk_problem(tmp_path, short_weight: float | None = None):
    """The one-GEMM service at chunk 2048 (the engine's setting), 8192 the alternative;
    ``short_weight`` adds a regime of short prompts (where the long chunk serves less)."""
    document = yaml.safe_load(ONE_GEMM.read_text())
    document["families"]["gemm"]["space"] = {"BLOCK_M": [128], "BLOCK_N": [128, 256], "BLOCK_K": [64],
                                             "num_warps": [8], "num_stages": [3], "SPLIT_K": [1]}
    document["service"]["operators"][0].update(shape={"M": "tokens", "N": 1024, "K": 4096}, repeat=32)
    document["service"]["max_tokens"] = 2048
    document["service"]["knobs"] = {"max_num_batched_tokens": [2048, 8192]}
    document["service"]["slo"] = {"ttft": "50 ms", "tpot": "20 ms"}
    document["regimes"] = {"prefill_heavy": {"arrivals": {"process": "poisson", "rate": 100},
                                             "sizes": {"prompt": 4096, "output": 4}, "horizon": "5 s"}}
    if short_weight is not None:
        document["regimes"]["short"] = {"arrivals": {"process": "poisson", "rate": 100}, "weight": short_weight,
                                        "sizes": {"prompt": 512, "output": 64}, "horizon": "5 s"}
    path = tmp_path / "chunk.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_problem(path)


SETTINGS = TuneSettings(trials=6, seeds=2)


def rows_of(url: str, problem) -> list:
    with Store(url) as store:
        return store.rows(problem.name)


def test_one_study_proposes_knobs_and_configs_and_the_rows_serve_the_chosen_knobs(tmp_path):
    problem = chunk_problem(tmp_path)
    url = f"sqlite:///{tmp_path / 't.db'}"
    outcome, = tune_problem(problem, url, SETTINGS)
    study = optuna.load_study(study_name=outcome.study_name, storage=url)
    knob = PREFIX + "max_num_batched_tokens"
    assert [t.params[knob] for t in study.trials[:2]] == ["2048", "8192"]  # the baseline under each setting first
    assert {t.params[knob] for t in study.trials} == {"2048", "8192"}
    assert outcome.knobs == (8192,) and outcome.deployment.startswith("weighted capacity at the SLO 1.4")
    under = sum(t.params[knob] == "8192" for t in study.trials if t.state.is_finished())
    assert 0 < outcome.trials_under_knobs == under < outcome.trials == len(study.trials)  # the chosen setting's share
    # answer (a), the engine's defaults with the per-bucket isolated-fastest configs, is figured beside it
    assert outcome.defaults is not None and outcome.defaults.knobs == (2048,)
    ratio = outcome.tuned.capacity.mean / outcome.defaults.capacity.mean
    assert ratio == pytest.approx(PREFILL_SPEEDUP, rel=0.1)
    rows = rows_of(url, problem)
    assert rows and {str(r.engine_args) for r in rows} == {"{'max_num_batched_tokens': 8192}"}


def test_a_start_up_knob_is_one_setting_for_every_regime(tmp_path):
    """Short prompts never fill a 2048-token step, and the longer chunk only delays their
    decodes: there chunk 8192 serves less. One setting serves both regimes, so the
    engine's default stays, saying which regime would lose; at weight 0 the short regime
    counts for nothing and the same studies choose 8192."""
    problem = chunk_problem(tmp_path, short_weight=1.0)
    url = f"sqlite:///{tmp_path / 'both.db'}"
    settings = TuneSettings(trials=6, seeds=3)  # two seeds leave the short regime's loss inside its interval
    outcomes = tune_problem(problem, url, settings)
    assert [o.knobs for o in outcomes] == [(2048,), (2048,)]
    assert "max_num_batched_tokens=8192: weighted capacity at the SLO 1.2" in outcomes[0].deployment
    assert "but regime 'short' loses" in outcomes[0].deployment
    assert {str(r.engine_args) for r in rows_of(url, problem)} == {"{'max_num_batched_tokens': 2048}"}

    regimes = dict(problem.regimes, short=dataclasses.replace(problem.regimes["short"], weight=0.0))
    unweighted = dataclasses.replace(problem, regimes=regimes)
    studies = {name: optuna.load_study(study_name=study_name(problem.name, name), storage=url) for name in regimes}

    def capacity(regime, knobs, assignment):
        return capacity_at_slo(unweighted, regime, studies[regime], settings, knobs, assignment)

    trials = {name: study.get_trials(deepcopy=False) for name, study in studies.items()}
    assert choose_deployment(unweighted, trials, settings.seeds, capacity).knobs == (8192,)


def test_tuning_some_regimes_of_a_problem_with_knobs_is_one_line(tmp_path):
    problem = chunk_problem(tmp_path, short_weight=1.0)
    result = CliRunner().invoke(main, ["tune", problem.path, "--regimes", "short", "--storage",
                                       f"sqlite:///{tmp_path / 'x.db'}", "-q"])
    assert result.exit_code == 2
    assert "tune every regime together (drop --regimes; prefill_heavy left out)" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_seed_processes_simulate_a_knob_variant_as_this_process_does(tmp_path):
    """A seed pool is made for the problem file as loaded; its workers run a knob variant
    by loading the file and applying the variant's values (not the file's defaults)."""
    from tuner.search import PER_BUCKET, JointSpace, parallel
    from tuner.search.evaluate import evaluate
    from tuner.search.knob_axis import KnobAxis

    problem = chunk_problem(tmp_path)
    variant = KnobAxis(problem.knobs).variant(problem, (8192,))
    assignment = PER_BUCKET.assignment(JointSpace.of(problem))
    alone = evaluate(Scenario.of(variant, "prefill_heavy", range(2), None), assignment, metric="capacity")
    defaults = evaluate(Scenario.of(problem, "prefill_heavy", range(2), None), assignment, metric="capacity")
    assert alone.values != defaults.values  # so the pool's answer tells the two apart
    with parallel.seed_pool(problem, f"sqlite:///{tmp_path / 'pool.db'}", 2) as pool:
        assert pool.serves(variant)
        pooled = evaluate(Scenario.of(variant, "prefill_heavy", range(2), None), assignment, metric="capacity", seed_runner=pool)
    assert pooled.values == alone.values


def test_the_adopted_setting_gets_trials_of_its_own_for_its_configs(tmp_path):
    """The study shares its budget among the settings, so the one adopted (chunk 8192)
    had a share of the 4 trials; before the rows are figured its configs are searched
    under it until 4 trials ran with it (here all 4 of its points: two GEMMs, two tiles
    each in the 4096-row bucket), no knob moving. A rerun adds nothing."""
    chunk_problem(tmp_path)
    document = yaml.safe_load((tmp_path / "chunk.yaml").read_text())
    first_op = document["service"]["operators"][0]
    document["service"]["operators"] = [dict(first_op, repeat=16), dict(first_op, name="proj2", repeat=16)]
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(document))
    problem = load_problem(path)
    settings = TuneSettings(trials=4, seeds=2)
    url = f"sqlite:///{tmp_path / 'w.db'}"
    outcome, = tune_problem(problem, url, settings)
    study = optuna.load_study(study_name=outcome.study_name, storage=url)
    knob = PREFIX + "max_num_batched_tokens"
    shared = [t.params[knob] for t in study.trials[:settings.trials]]
    continued = study.trials[settings.trials:]
    assert outcome.knobs == (8192,) and 0 < shared.count("8192") < settings.trials
    assert continued and {t.params[knob] for t in continued} == {"8192"}
    assert outcome.trials_under_knobs == settings.trials == shared.count("8192") + len(continued)
    rows = [(r.regime, r.op, r.bucket, r.config, r.engine_args) for r in rows_of(url, problem)]
    assert tune_problem(problem, url, settings) == []  # its rows are written from these studies already
    assert len(optuna.load_study(study_name=outcome.study_name, storage=url).trials) == len(study.trials)
    assert [(r.regime, r.op, r.bucket, r.config, r.engine_args) for r in rows_of(url, problem)] == rows
