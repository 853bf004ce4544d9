"""A trial's user attributes are one typed value with one codec (issue 42, item 3)."""

from __future__ import annotations

import json
import math

import optuna

from tuner.search.evaluate import Constraints, Evaluation
from tuner.search.trial_record import TrialRecord


def _stored(record: TrialRecord) -> optuna.trial.FrozenTrial:
    """A finished trial holding ``record`` as Optuna stores it (through JSON)."""
    attrs = json.loads(json.dumps(record.attributes()))
    return optuna.trial.create_trial(value=1.0, user_attrs=attrs, intermediate_values={0: 1.0, 1: 3.0})


def test_an_evaluation_survives_the_study_as_it_was_measured() -> None:
    evaluation = Evaluation((1.0, 3.0), latency_p50_s=0.25, visited=frozenset({("qkv", 1), ("o", 0)}),
                            rates=(4.9, 5.2), overloaded=1, latency_p90_s=(0.5, math.inf))
    index = {("qkv", 0): 0, ("qkv", 1): 1, ("o", 0): 2}
    record = TrialRecord.run(Constraints(reserved_bytes=2.0**30), 6, evaluation, index)
    back = TrialRecord.of(_stored(record))
    assert back == record
    assert back.visited == (1, 2) and back.latency_p90_s == (0.5, None)  # JSON has no infinity
    again = back.evaluation((1.0, 3.0), Constraints(), "goodput")
    assert again.latency_p90_s == (0.5, math.inf) and again.rates == (4.9, 5.2) and again.overloaded == 1
    assert again.mean == 2.0 and again.latency_p50_s == 0.25


def test_what_was_not_recorded_is_absent_and_reads_as_the_evaluations_defaults() -> None:
    record = TrialRecord.run(Constraints(memory=0.5, reason="needs 90 GiB"), 0)
    assert record.attributes() == {"constraint": [0.5, 0.0], "simulations": 0, "infeasible": "needs 90 GiB"}
    old = optuna.trial.create_trial(value=0.0, user_attrs={"simulations": 2})  # a study from before most keys
    evaluation = TrialRecord.of(old).evaluation((), Constraints(), "goodput")
    assert (evaluation.rates, evaluation.overloaded, evaluation.lower_bounds, evaluation.latency_p90_s) == ((), 0, 0, ())
