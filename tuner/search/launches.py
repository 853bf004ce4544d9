"""The mechanism line's note on launch behaviour (``service.launch: eager``).

An eager engine issues every launch from one host thread per executor, ``host_launch``
apart; a config whose launches run shorter on the GPU than the host takes to issue them
is host-bound, and then its launch count, not its kernel time, sets what it costs (a
split-K partial + reduce, an unfused epilogue). :func:`host_bound_note` names the changed
cells where that holds, worked from the configs at each bucket's representative shape
(``Metrics.host_bound_iterations`` counts the iterations a simulation found host-bound).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import IllegalConfigError
from ..problem.assignment import Assignment
from ..sim.program import eager_span
from .space import JointSpace

#: Cells the note names before it counts the rest (it rides in a table cell).
NAMED = 2


def host_bound_note(space: JointSpace, tuned: Assignment, base: Assignment,
                    changed: Sequence[tuple[str, int]]) -> str:
    """``host-bound iterations (...): qkv[0] baseline 3 launches in 64 µs (host-bound),
    tuned 1 launch in 29 µs`` for the changed cells whose launches, in either assignment,
    end later issued by the host than the GPU alone would end them: their
    :func:`~tuner.sim.program.eager_span` exceeds ``host_launch + Σ (launch_overhead +
    d_i)``, the span when only the first launch waits. "" where the service does not
    launch eagerly or no changed cell is host-bound."""
    problem = space.problem
    service = problem.service
    if service.launch != "eager" or service.host_launch_s <= 0.0:
        return ""
    host, gap = service.host_launch_s, service.launch_overhead_s
    largest = service.largest_batch_variables(problem.size_fields)
    notes = []
    for op_name, bucket in changed:
        values = problem.operator(op_name).bucket_variables(largest, bucket)
        seen = []
        for label, assignment in (("baseline", base), ("tuned", tuned)):
            try:
                launches = assignment.config(op_name, bucket).profile.launches(values, service.device, op_name)
            except IllegalConfigError:
                break
            seconds = [sum(phase[0] for phase in phases) for _, phases in launches]
            span = eager_span(seconds, gap, host)
            alone = host + sum(gap + t for t in seconds)
            seen.append((label, len(seconds), span, span > alone * (1.0 + 1e-9)))
        if len(seen) == 2 and any(bound for _, _, _, bound in seen):
            shown = ", ".join(f"{label} {n} launch{'' if n == 1 else 'es'} in {span * 1e6:.3g} µs"
                              + (" (host-bound)" if bound else "") for label, n, span, bound in seen)
            notes.append(f"{op_name}[{bucket}] {shown}")
    if not notes:
        return ""
    more = f"; and {len(notes) - NAMED} more cells" if len(notes) > NAMED else ""
    return (f"host-bound iterations (launch: eager, {host * 1e6:.3g} µs of host per launch): "
            + "; ".join(notes[:NAMED]) + more)
