"""Profiling a whole problem: fill the compile cache for its configs, or measure them on
a GPU. Sits above :mod:`tuner.problem` and :mod:`tuner.profile`, which know nothing of it."""

from .fill import fill_problem, profile_one

__all__ = ["fill_problem", "profile_one"]
