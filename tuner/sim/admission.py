"""Memory admission (DESIGN §4): one rule for the simulator and the search's constraint.

The rule: ``fixed + reserved workspace + Σ admitted state ≤ budget``. A request is
admitted first-come first-served when its state fits beside those already admitted, and
one whose state can never fit (not even alone) is rejected on arrival. The search's
``memory`` constraint (:func:`tuner.search.evaluate.check_constraints`) asks the same
question of one request of minimal state before anything is simulated.

The rule is written once, here, as a few named expressions. They do not all associate
alike, and each is kept exactly as written: floating-point addition does not associate,
so ``budget - (fixed + reserved)`` and ``budget - fixed - reserved`` may differ in the
last bit, and every simulated number (admissions, memory timelines, the constraint
values the studies stored) is pinned to the last digit. Do not "simplify" one into another.

:class:`Admission` is one run's ledger under this rule: what is held, what is queued for
admission, and how much room the requests' state has.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .batching import BatchingPolicy


def base_memory(fixed: float, reserved: float) -> float:
    """Memory held whatever is admitted: the fixed part (weights) plus the assignment's
    reserved workspace."""
    return fixed + reserved


def capacity(budget: float, base: float) -> float:
    """Bytes of request state admission may hold beside ``base`` (:func:`base_memory`):
    ``budget - (fixed + reserved)``, the base summed first."""
    return budget - base


def headroom(budget: float, fixed: float, reserved: float) -> float:
    """The most state one request may hold and ever be admitted beside ``fixed`` and
    ``reserved``: ``budget - fixed - reserved``, subtracted left to right (not
    :func:`capacity`'s association; see the module's docstring). Also the room left while
    a switch to more workspace is pending, with the larger of the two reservations."""
    return budget - fixed - reserved


def fits_beside(budget: float, fixed: float, reserved: float, held_state: float) -> bool:
    """Whether ``reserved`` workspace fits beside the fixed part and ``held_state`` bytes
    of admitted state: ``fixed + reserved + held_state ≤ budget``, summed left to right."""
    return fixed + reserved + held_state <= budget


def overflow(budget: float, fixed: float, reserved: float, state: float) -> float:
    """How far one request of ``state`` overflows the budget, as a fraction of it:
    ``((fixed + reserved) + state - budget) / budget``, the search's ``memory``
    constraint (feasible when ≤ 0). Positive when the need exceeds the budget (as
    computed here: the simulator's rejection test, ``state > headroom``, rounds in its own
    order); with no budget, 1 when anything is needed, else 0."""
    need = fixed + reserved + state
    return (need - budget) / budget if budget > 0 else (1.0 if need > 0 else 0.0)


class Admission:
    """One run's memory ledger: the budget, the memory held whatever is admitted
    (``base_memory``), the room left for request state (``capacity``), the requests
    waiting for admission (``queue``), the state the admitted ones hold (``memory_used``,
    ``admitted`` of them), and the memory an engine policy holds itself (``engine_held``:
    its KV blocks in use, shown in the memory timeline, never admitted on).

    The run owns it and tells it of switches: a switch of assignment changes the reserved
    workspace, so the base and the capacity; while a switch waits for memory, the
    capacity is narrowed so that admission pauses (:meth:`pause_for`).
    """

    def __init__(self, budget: float, fixed: float, reserved: float) -> None:
        self.budget = budget
        self.fixed = fixed
        self.reserved = reserved  # the workspace of the assignment in force
        self.base_memory = base_memory(fixed, reserved)
        self.capacity = capacity(budget, self.base_memory)
        self.queue: deque[int] = deque()
        self.memory_used = 0.0
        self.engine_held = 0.0
        self.admitted = 0

    def never_fits(self, state: float) -> bool:
        """Whether a request of ``state`` can never be admitted under the assignment in
        force (its reserve, even while a switch to another is pending): rejected."""
        return state > headroom(self.budget, self.fixed, self.reserved)

    def admit(self, state: list[float], policy: BatchingPolicy, admit_t: list[float], now: float) -> bool:
        """Admit the queue's head while its state fits, first come first served, handing
        each admitted request to ``policy``; whether any was admitted."""
        queue, room = self.queue, self.capacity
        admitted_any = False
        while queue and self.memory_used + state[queue[0]] <= room:
            r = queue.popleft()
            self.memory_used += state[r]
            admit_t[r] = now
            self.admitted += 1
            policy.admitted(r, now)
            admitted_any = True
        return admitted_any

    def release(self, state: float) -> None:
        """A request holding ``state`` finished: its memory is free."""
        self.memory_used -= state
        self.admitted -= 1

    def fits(self, reserved: float) -> bool:
        """Whether an assignment reserving ``reserved`` fits beside the admitted state."""
        return fits_beside(self.budget, self.fixed, reserved, self.memory_used)

    def switch_to(self, reserved: float) -> None:
        """An assignment reserving ``reserved`` is now in force."""
        self.reserved = reserved
        self.base_memory = base_memory(self.fixed, reserved)
        self.capacity = capacity(self.budget, self.base_memory)

    def resume(self) -> None:
        """No switch is pending: admission has the whole capacity again."""
        self.capacity = capacity(self.budget, self.base_memory)

    def pause_for(self, reserved: float) -> None:
        """A switch to an assignment reserving ``reserved`` waits for memory: admit only
        what fits beside the larger of the two reservations, so that the wait ends."""
        self.capacity = headroom(self.budget, self.fixed, max(reserved, self.reserved))
