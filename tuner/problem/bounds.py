"""How much one simulation may hold: checked before anything is allocated.

A run holds every arrival of its window at once (the workload's arrays, then per request
Python lists of times, sizes and state in :mod:`tuner.sim.service` and
:mod:`tuner.sim.batching`), so ``rate × horizon`` decides its memory before it starts,
and a file that asks for 1e13 arrivals must be refused when it loads, not die in numpy.
Measured peak memory per arrival (one seed, 2 cores, 24 GiB): ``seed_example`` heavy
270 B (peak RSS over 0.2 to 0.9 M arrivals); ``llm_decode`` light 480 B (peak RSS of its
per-request state at 1 M arrivals; its launch memos come on top and have limits of their
own). At :data:`BYTES_PER_ARRIVAL` the largest run, :data:`MAX_ARRIVALS`, takes about
2.5 GB: room for a few parallel runs on a 24 GiB machine.

The same rule serves the loader (each regime at its own horizon and highest rate) and
:meth:`~tuner.problem.model.Regime.workload` (a ``--horizon`` override, a capacity
search's rate), so ``tuner validate`` refuses exactly what ``tuner simulate`` could not run.
"""

from __future__ import annotations

from ..traffic import ArrivalProcess, OnOff
from .explain import Invalid

#: Arrivals one simulation may hold (rate × horizon, the expected count).
MAX_ARRIVALS = 5_000_000
#: Memory one arrival costs a run: above both measurements in the module docstring.
BYTES_PER_ARRIVAL = 500
#: Executors of one service: a GPU runs at most 128 kernels at once (compute capability
#: 9.0), so more executors only queue, and each is scanned on every dispatch (~250 B of
#: state each: 1e6 executors measured 310 MB, so memory is not what binds here).
MAX_EXECUTORS = 1024
#: Requests per batch or sequences per iteration: 64× vLLM's largest ``max_num_seqs``
#: (1024); each batch is planned request by request on every step.
MAX_BATCH = 65_536
#: Kernel launches one simulation may make (the service's and its neighbours'): 30× the
#: most a shipped problem makes (toy_llm heavy, 1.5 M in 60 s), and 1-15 minutes at the
#: 60,000-600,000 launches a second the compiled core simulates. Loading bounds arrivals and
#: a neighbour's cycle, but not their product with a long horizon, nor a service's tiny
#: kernels times long outputs: a run past this is stopped with what drove it.
MAX_LAUNCHES = 50_000_000
#: Tokens per continuous iteration and the longest context: 2^24 (16.8 M) is beyond any
#: served model's window (10 M), and ``max_batch × max_context`` stays an exact integer.
MAX_TOKENS = 2**24


def check_sample(key: str, process: ArrivalProcess, horizon_s: float) -> None:
    """Refuse a window whose sample would not fit: too many arrivals, or (on/off traffic)
    too many bursts to draw.

    Raises:
        Invalid: at ``key``, with the count, the limit and what to change.
    """
    rate = process.mean_rate
    expected = rate * horizon_s
    if expected > MAX_ARRIVALS:
        raise Invalid(
            key,
            f"rate × horizon = {rate:.3g} req/s × {horizon_s:.3g} s = {expected:.3g} expected arrivals; "
            f"at most {MAX_ARRIVALS:.3g} can be simulated (about {_gb(MAX_ARRIVALS * BYTES_PER_ARRIVAL)} "
            f"at {BYTES_PER_ARRIVAL} B each); shorten the horizon or lower the rate",
        )
    if isinstance(process, OnOff):
        cycles = horizon_s / (process.on_s + process.off_s)
        if cycles > MAX_ARRIVALS:
            raise Invalid(
                key,
                f"horizon / (on + off) = {cycles:.3g} on/off cycles; at most {MAX_ARRIVALS:.3g} can be drawn "
                "(each is drawn and held like an arrival); lengthen on and off or shorten the horizon",
            )


def check_count(key: str, value: int, limit: int, what: str, why: str) -> None:
    """Refuse a count above ``limit``, saying why the limit is there.

    Raises:
        Invalid: at ``key``.
    """
    if value > limit:
        raise Invalid(key, f"{value} {what}; at most {limit} can be simulated ({why})")


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.3g} GB"
