"""When two evaluations are one run: the rule that lets a result be reused without simulating.

A simulation launches kernels only in the cells (operator, bucket) its traffic reaches;
the other cells' configs never run on that trajectory, and the reserved workspace is the
only way an assignment acts on admission without launching. So an assignment with the
same reserved workspace and the same config in every cell another's simulations
launched replays that run event for event, with the same numbers: the study reuses a
trial this way, and the capacity memo a capacity.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TypeVar

Cell = TypeVar("Cell")


def repeats_run(reserved: float | None, other_reserved: float | None, visited: Collection[Cell] | None,
                same_config: Callable[[Cell], bool]) -> bool:
    """Whether an assignment reserving ``reserved`` bytes repeats the run of another that
    reserved ``other_reserved`` and launched the cells ``visited``, where ``same_config``
    tells whether the two set the same config in a cell. False when the other's cells or
    either workspace were not recorded (then nothing can be said)."""
    if not visited or reserved is None or other_reserved is None or reserved != other_reserved:
        return False
    return all(same_config(cell) for cell in visited)
