"""Config choice at run time in the simulator: the load-aware table against static choices
on traffic whose rate swings between the seed example's light and heavy regimes."""

from __future__ import annotations

import itertools

import yaml

from tests.conftest import SEED_EXAMPLE
from tuner.problem import load_problem, resolve_assignment
from tuner.runtime import Dispatcher
from tuner.runtime.served import OpConfigs, Table
from tuner.sim import DispatcherSwitch, NoSwitch, simulate_switching

TUNED = {"light": "fast", "bursty": "lean", "heavy": "lean"}  # what `tuner tune` writes for the seed example
RATES = {"light": 100.0, "bursty": 300.0, "heavy": 720.0}


def daily_problem(tmp_path):
    """The seed example plus a diurnal regime: 40 to 760 req/s and back every 20 s."""
    document = yaml.safe_load(SEED_EXAMPLE.read_text())
    document["regimes"]["daily"] = {"arrivals": {"process": "diurnal", "rate": 400, "amplitude": 0.9,
                                                 "period": "20 s", "phase": -1.5708}, "horizon": "40 s"}
    path = tmp_path / "daily.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return load_problem(path)


def table() -> Table:
    configs = {regime: {"stage": OpConfigs.fixed({"variant": config}, config)} for regime, config in TUNED.items()}
    return Table(problem="seed_example", device="generic", regimes=tuple(TUNED), configs=configs, rates=RATES,
                 source="test")


def run(problem, policy, regime="daily", horizon_s=None):
    assignments = {regime: resolve_assignment(problem, [f"stage={config}"]) for regime, config in TUNED.items()}
    return simulate_switching(problem, assignments, policy, regime, seed=3, horizon_s=horizon_s).metrics


def test_the_table_beats_the_isolated_fastest_and_matches_the_best_static_choice(tmp_path):
    problem = daily_problem(tmp_path)
    dispatched = run(problem, DispatcherSwitch(Dispatcher(table(), regime_rates=RATES)))
    static = {regime: run(problem, NoSwitch(regime)) for regime in TUNED}
    fastest_alone = static["light"]  # `fast` everywhere: what the isolated-fastest baseline holds
    assert dispatched.arrivals == fastest_alone.arrivals  # the same workload for every policy
    assert dispatched.config_switches >= 2  # light -> heavy -> light at least
    assert dispatched.goodput_rps >= 0.98 * max(m.goodput_rps for m in static.values())
    assert dispatched.goodput_rps > 1.3 * fastest_alone.goodput_rps


def test_a_switch_to_more_workspace_waits_for_the_memory(tmp_path):
    # Starting on `lean` (no workspace) with 8 requests admitted, a switch to `fast`
    # (16 GiB reserved) cannot happen before the admitted state drops to 16 GiB.
    problem = daily_problem(tmp_path)
    switch_once = itertools.chain(["heavy"], itertools.repeat("light"))
    policy = NoSwitch("heavy")
    policy.choose = lambda now: next(switch_once)  # type: ignore[method-assign]
    metrics = run(problem, policy, regime="bursty", horizon_s=5)
    assert metrics.config_switches == 1
    assert metrics.memory_peak_bytes <= problem.service.memory.budget
