"""What a problem file's quantities resolved to, in the units people read them in.

Why: ``tpot: 60`` used to load as 60 seconds and ``budget: 80GB`` as 80 × 10⁹ bytes, and
``tuner validate`` echoed neither, so nobody could spot a misread unit. Bare numbers are
refused now (:mod:`tuner.problem.schema`); this echo shows what every unit became.
"""

from __future__ import annotations

from collections.abc import Iterator

from .knobs import KNOBS, show
from ..units import duration_text, size_text
from .model import Problem


def resolved_lines(problem: Problem) -> Iterator[str]:
    """The SLO, the memory and each regime's traffic, as the loader resolved them."""
    slo = problem.service.slo
    bounds = [f"{name} {duration_text(value)}" for name, value in
              (("deadline", slo.deadline_s), ("ttft", slo.ttft_s), ("tpot", slo.tpot_s)) if value is not None]
    yield f"SLO: {', '.join(bounds)}; capacity at {slo.attainment:.0%} of requests meeting it"
    memory = problem.service.memory
    state = _per_request(problem)
    yield (f"memory: budget {size_text(memory.budget)}, fixed {size_text(memory.fixed)}"
           + (f", {state}" if state else ""))
    for name, values in problem.knobs.choices:
        yield (f"knob {name}: {' | '.join(show(value) for value in values)} (the first is the engine's own; "
               f"{'fixed at start-up' if KNOBS[name].start_up else 'changeable while serving'}: {KNOBS[name].source})")
    for regime in problem.regimes.values():
        rate, span = regime.arrivals.declared_rate, regime.arrivals.rate_range
        shown = ("the trace's own rate" if rate is None else f"{rate:g} req/s" if span is None
                 else f"{span[0]:g}–{span[1]:g} req/s")
        budget = "" if regime.memory_budget is None else f", memory budget {size_text(regime.memory_budget)}"
        yield (f"regime {regime.name}: {shown}, {duration_text(regime.horizon_s)} windows (the first "
               f"{duration_text(regime.warmup_for(regime.horizon_s))} served but not judged){budget}")


def _per_request(problem: Problem) -> str:
    """A request's state at the first regime's mean sizes, or per unit of its one size
    field, or "" where the engine keeps its KV cache in blocks (``batching: vllm``)."""
    if problem.service.kind.engine:
        return "the rest holds the KV cache in blocks"
    per_request = problem.service.memory.per_request
    if per_request.is_constant:
        return f"{size_text(per_request.evaluate({}))} per request"
    sizes = next((r.sizes for r in problem.regimes.values() if r.sizes), None)
    if sizes and set(problem.size_fields) <= set(sizes):
        means = {name: sizes[name].mean for name in problem.size_fields}
        at = ", ".join(f"{name} {value:g}" for name, value in means.items())
        return f"{size_text(per_request.evaluate(means))} per request at the mean sizes ({at})"
    fields = sorted(problem.size_fields)  # a trace's sizes: no mean here, so a round example
    return (f"{size_text(per_request.evaluate({name: 1000.0 for name in fields}))} per request at 1,000 of "
            f"each of {', '.join(fields)}")
