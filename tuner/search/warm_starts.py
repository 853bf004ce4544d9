"""Where a study starts: the points enqueued before its sampler proposes any.

The baselines (THE baseline, the per-bucket isolated-fastest assignment, first), under
the engine's defaults and, where the problem lists engine knobs, under every other
knob combination; the *footprint ladder* (per workspace cap, each cell's fastest config under it: the engine
reserves the peak workspace, so this is the memory trade-off's natural axis), and the
best of the neighbouring regimes' studies. A study continued under one knob setting
(the one deployed: :func:`pinned_starts`) starts again from the baselines and the ladder
under that setting, then from the configs its own best trials found under the others.
So the tuned assignment is never below a
baseline by construction, which is why the tests judge the search against the oracle and
a hand-derived optimum instead.
"""

from __future__ import annotations

import optuna

from ..problem.assignment import Assignment
from ..problem.model import Problem
from .baselines import BASELINES, PER_BUCKET, footprint_ladder
from .knob_axis import KnobKey
from .ranking import finished_trials, select_best
from .settings import study_name
from .space import JointSpace


def warm_starts(problem: Problem, regime: str, space: JointSpace,
                storage: optuna.storages.BaseStorage) -> list[tuple[Assignment, KnobKey]]:
    """The (assignment, knob values) a study starts from, in order, without repeats: the
    baselines under the engine's defaults (THE baseline first), the per-bucket baseline
    under every other knob combination (what a knob-only tuner tries: issue 40's answer
    (b) is among them), the footprint ladder under the defaults, then the best of this
    problem's other regimes already in the storage."""
    axis = space.axis
    defaults = axis.defaults
    out: list[tuple[Assignment, KnobKey]] = []
    per_bucket = PER_BUCKET.assignment(space)
    for start in (*((b.assignment(space), defaults) for b in BASELINES),
                  *((per_bucket, key) for key in axis.keys()[1:]),
                  *((a, defaults) for a in footprint_ladder(space)),
                  *_neighbour_bests(problem, regime, space, storage)):
        if start not in out:
            out.append(start)
    return out


def _neighbour_bests(problem: Problem, regime: str, space: JointSpace,
                     storage: optuna.storages.BaseStorage) -> list[tuple[Assignment, KnobKey]]:
    """The best points of this problem's other regimes' studies in the storage, nearest
    regime (in file order) first; studies of another version of the problem are ignored."""
    names = list(problem.regimes)
    here = names.index(regime)
    existing = {s.study_name for s in storage.get_all_studies()}
    points: list[tuple[Assignment, KnobKey]] = []
    for other in sorted((n for n in names if n != regime), key=lambda n: (abs(names.index(n) - here), names.index(n))):
        other_name = study_name(problem.name, other)
        if other_name not in existing:
            continue
        study = optuna.load_study(study_name=other_name, storage=storage)
        attrs = study.user_attrs
        if attrs.get("problem_hash") != problem.file_hash:
            continue
        best = select_best(space, finished_trials(study), len(attrs.get("seeds", ())))
        if best is not None and (best.assignment, best.knobs) not in points:
            points.append((best.assignment, best.knobs))
    return points


def pinned_starts(space: JointSpace, study: optuna.Study, knobs: KnobKey) -> list[tuple[Assignment, KnobKey]]:
    """Where a study continued under the knob values ``knobs`` starts: the baselines and
    the footprint ladder under them, then, best first, the configs the study's best trial
    under each other setting found, tried under these (a config good under one chunk
    size is the natural first guess under another)."""
    seeds = len(study.user_attrs.get("seeds", ()))
    trials = finished_trials(study)
    others = [best for key in space.axis.keys() if key != knobs
              and (best := select_best(space, trials, seeds, key)) is not None]
    others.sort(key=lambda best: -best.evaluation.mean)
    out: list[tuple[Assignment, KnobKey]] = []
    for assignment in (*(b.assignment(space) for b in BASELINES), *footprint_ladder(space),
                       *(best.assignment for best in others)):
        if (assignment, knobs) not in out:
            out.append((assignment, knobs))
    return out
