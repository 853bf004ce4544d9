"""What a config needs to run at a shape: workspace, launches, grids, SMs, the one rule.

An engine serving a tuned table must know more than a config's parameters: how much
global workspace it needs at its largest shapes (reserved before the KV cache is sized),
how many kernels it launches, whether its grid is persistent and to how many SMs it is
sized. The kernel families' ``plan`` (which the profiler and the simulator use), the
runtime's :meth:`tuner.runtime.Dispatcher.requirements` and the exports all take these
figures from this module, so they cannot disagree.

This module imports only the standard library (no torch, Triton, NumPy or Optuna): a
serving process imports it through :mod:`tuner.runtime`. It sits outside
:mod:`tuner.kernels`, whose package import loads Triton.

The formulas, per built-in family (``e`` the element size of the family's ``dtype``, 2
for bf16/fp16; workspace is global memory a config needs beyond its inputs and outputs):

* ``matmul`` (``NW`` = N, or 2N for the ``gated_silu`` epilogue): split-K partials
  ``4·SPLIT_K·M·NW`` bytes (fp32) when ``SPLIT_K > 1``; the unfused intermediate
  ``e·M·NW`` when ``FUSE_EPILOGUE`` is False. Launches: the GEMM (``matmul``, or
  ``matmul_partial`` when split), ``splitk_reduce`` when split, ``epilogue`` when unfused;
  the GEMM's grid is ``cdiv(M, BLOCK_M)·cdiv(N, BLOCK_N)·SPLIT_K`` work items, or
  ``min(sized SMs × CTAs per SM, items)`` when ``PERSISTENT``; the elementwise launches
  ``cdiv(M·N, 1024)``.
* ``decode_attention``: split-KV partials ``4·B·H·S·(D+2)`` bytes with S the splits that
  run (:func:`decode_splits`) when ``S > 1``; the ``materialize`` variant's score matrix
  ``4·B·H·L``. Launches: ``decode_split`` (grid ``B·KV·S``) and ``decode_reduce``
  (``B·H``) when split; ``decode_scores`` (``B·KV·cdiv(L, BLOCK_N)``) and
  ``decode_softmax_pv`` (``B·KV``) when materialized.
* ``fused_moe`` (``P = M·top_k`` pairs): the intermediate ``e·P·N``, the down output
  ``e·P·K`` when ``top_k > 1``, and the align step's int32 arrays at vLLM's bound
  ``R = P + E·(BLOCK_SIZE_M - 1)`` rows: ``4·R`` and ``4·cdiv(R, BLOCK_SIZE_M)``.
  Launches: ``fused_moe_gate_up`` and ``fused_moe_down`` (grids ``blocks·cdiv(N_out,
  BLOCK_SIZE_N)``, blocks from the routing: even when not given), ``moe_sum`` when
  ``top_k > 1``.
* ``rmsnorm``: no workspace (h is an output). Launches: ``add`` (``cdiv(M·N, BLOCK_N)``)
  when the residual is not fused, ``rmsnorm`` (``M``).
* ``comm``: no workspace; one NCCL launch of ``CHANNELS`` CTAs, each holding an SM.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LaunchNeeds", "Requirements", "RequirementsError", "decode_splits", "flash_splits", "margin_problem",
    "matmul_items", "requirements", "sized_sms", "uniform_counts", "workspace_buffers",
]

#: Element sizes of the dtype names the families use (their buffers' and options').
ELEMENT_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4, "i32": 4, "fp8": 1}
#: The most splits decode attention's ``NUM_SPLITS="auto"`` picks (FlashAttention-2's cap).
MAX_AUTO_SPLITS = 128
#: The flat block of the families' untuned elementwise launches (split-K reduce, epilogue, moe_sum).
EW_BLOCK = 1024


class RequirementsError(ValueError):
    """A family, config or shape the requirements cannot be computed for (one line)."""


# --- the SMs a config is sized to --------------------------------------------------------

def sized_sms(config: Mapping[str, Any], sms: int) -> int:
    """The SMs a config sizes its persistent grid and split counts to: the ``sms`` it is
    told, less its ``SM_MARGIN`` (the SMs it leaves to another stream, as PyTorch's
    sm_carveout, FlashAttention-3's sm_margin, DeepGEMM's num_sms and cuBLASLt's
    SM_COUNT_TARGET do), at least one. The one rule of the margin, for the model and
    for the real launch alike."""
    return max(1, sms - int(config.get("SM_MARGIN", 0)))


def margin_problem(config: Mapping[str, Any], sms: int) -> str | None:
    """Why a config's margin cannot run on ``sms`` SMs (it would leave none), or None."""
    margin = int(config.get("SM_MARGIN", 0))
    if margin >= sms:
        return f"SM_MARGIN={margin} leaves no SM of the {sms} it is told"
    return None


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --- the formulas the families' plans share ----------------------------------------------

def matmul_items(config: Mapping[str, Any], shape: Mapping[str, int]) -> int:
    """A matmul config's work items: (K slice, output tile) pairs, one CTA each unless persistent."""
    return _cdiv(shape["M"], config["BLOCK_M"]) * _cdiv(shape["N"], config["BLOCK_N"]) * config["SPLIT_K"]


def flash_splits(ctas: int, num_sms: int, tiles: int, most: int = MAX_AUTO_SPLITS) -> int:
    """FlashAttention-2's split-KV count for ``ctas`` CTAs without splits, ``tiles``
    context tiles and ``num_sms`` SMs (two CTA slots each, as FlashAttention-2 counts).

    One split when the CTAs already fill 80 % of the slots; otherwise the wave
    efficiency of n splits is ``w / ceil(w)`` with ``w = ctas · n / slots``, counts that
    leave the tiles per split unchanged are skipped, and the fewest splits within 85 %
    of the best efficiency win.
    """
    slots = 2 * num_sms
    if ctas >= 0.8 * slots:
        return 1
    most = min(most, slots, tiles)
    efficiency = {}
    for n in range(1, most + 1):
        if n == 1 or _cdiv(tiles, n) != _cdiv(tiles, n - 1):
            waves = ctas * n / slots
            efficiency[n] = waves / math.ceil(waves)
    best = max(efficiency.values())
    return next(n for n, e in efficiency.items() if e >= 0.85 * best)


def decode_splits(config: Mapping[str, Any], shape: Mapping[str, int], num_sms: int) -> int:
    """Decode attention's splits that run: at most one per context tile, kept a power of
    two (the reduce kernel's arange over splits needs one); ``auto`` sized to ``num_sms``
    (the sized SMs, margin already taken off)."""
    tiles = _cdiv(shape["L"], config["BLOCK_N"])
    asked = config["NUM_SPLITS"]
    if asked == "auto":
        chosen = flash_splits(shape["B"] * shape["KV"], num_sms, tiles)
        asked = 1 << (chosen.bit_length() - 1)
    return min(asked, 1 << (tiles.bit_length() - 1))


def uniform_counts(tokens: int, experts: int, top_k: int) -> tuple[int, ...]:
    """``tokens · top_k`` (token, slot) pairs spread as evenly as possible over
    ``experts``: the first ``rem`` experts one more than the rest."""
    base, rem = divmod(tokens * top_k, experts)
    return (base + 1,) * rem + (base,) * (experts - rem)


#: A workspace buffer: ``(name, elements, dtype name)``.
WorkBuffer = tuple[str, int, str]


def workspace_buffers(family: str, options: Mapping[str, Any], config: Mapping[str, Any],
                      shape: Mapping[str, int], num_sms: int) -> tuple[WorkBuffer, ...]:
    """The global workspace buffers of a config at a shape (see the module docstring):
    the families' ``plan`` sums them and their ``run`` allocates them, so what is
    reserved is what runs. ``num_sms``: the sized SMs (margin taken off).

    Raises:
        RequirementsError: an unknown family.
        KeyError: a shape dimension or parameter the family needs is missing.
    """
    dtype = options.get("dtype", "bf16")
    if family == "matmul":
        M, N = shape["M"], shape["N"]
        nw = 2 * N if options.get("epilogue") == "gated_silu" else N
        out: list[WorkBuffer] = []
        if config["SPLIT_K"] > 1:
            out.append(("partials", config["SPLIT_K"] * M * nw, "fp32"))
        if not config["FUSE_EPILOGUE"]:
            out.append(("mid", M * nw, dtype))
        return tuple(out)
    if family == "decode_attention":
        B, H, D = shape["B"], shape["H"], shape["D"]
        if config["VARIANT"] == "materialize":
            return (("scores", B * H * shape["L"], "fp32"),)
        splits = decode_splits(config, shape, num_sms)
        return (("partials", B * H * splits * (D + 2), "fp32"),) if splits > 1 else ()
    if family == "fused_moe":
        top_k, experts, bm = int(options.get("top_k", 2)), int(options.get("experts", 8)), config["BLOCK_SIZE_M"]
        pairs = shape["M"] * top_k
        bound = pairs + experts * (bm - 1)
        out = [("cache1", pairs * shape["N"], dtype)]
        if top_k > 1:
            out.append(("cache3", pairs * shape["K"], dtype))
        out += [("sorted_token_ids", bound, "i32"), ("expert_ids", _cdiv(bound, bm), "i32")]
        return tuple(out)
    if family in ("rmsnorm", "comm"):
        return ()
    raise RequirementsError(f"no requirements are known for kernel family {family!r}")


def _launches(family: str, options: Mapping[str, Any], config: Mapping[str, Any], shape: Mapping[str, int],
              num_sms: int, ctas_per_sm: int | None, expert_counts: Sequence[int] | None
              ) -> tuple[tuple[str, int | None, bool], ...]:
    """``(name, grid, persistent)`` per launch, in order; a persistent grid is None when
    the compiled occupancy (``ctas_per_sm``) is unknown."""
    if family == "matmul":
        M, N = shape["M"], shape["N"]
        split, fused = config["SPLIT_K"], config["FUSE_EPILOGUE"]
        items = matmul_items(config, shape)
        persistent = bool(config["PERSISTENT"])
        grid: int | None = items
        if persistent:
            grid = None if ctas_per_sm is None else min(num_sms * ctas_per_sm, items)
        out = [("matmul" if split == 1 else "matmul_partial", grid, persistent)]
        if split > 1:
            out.append(("splitk_reduce", _cdiv(M * N, EW_BLOCK), False))
        if not fused:
            out.append(("epilogue", _cdiv(M * N, EW_BLOCK), False))
        return tuple(out)
    if family == "decode_attention":
        B, H, KV = shape["B"], shape["H"], shape["KV"]
        if config["VARIANT"] == "materialize":
            return (("decode_scores", B * KV * _cdiv(shape["L"], config["BLOCK_N"]), False),
                    ("decode_softmax_pv", B * KV, False))
        splits = decode_splits(config, shape, num_sms)
        split = (("decode_split", B * KV * splits, False),)
        return split + ((("decode_reduce", B * H, False),) if splits > 1 else ())
    if family == "fused_moe":
        top_k, experts, bm = int(options.get("top_k", 2)), int(options.get("experts", 8)), config["BLOCK_SIZE_M"]
        counts = expert_counts if expert_counts is not None else uniform_counts(shape["M"], experts, top_k)
        blocks = sum(_cdiv(int(c), bm) for c in counts)
        bn = config["BLOCK_SIZE_N"]
        out = [("fused_moe_gate_up", blocks * _cdiv(shape["N"], bn), False),
               ("fused_moe_down", blocks * _cdiv(shape["K"], bn), False)]
        if top_k > 1:
            out.append(("moe_sum", _cdiv(shape["M"] * shape["K"], EW_BLOCK), False))
        return tuple(out)
    if family == "rmsnorm":
        M, N = shape["M"], shape["N"]
        add = options.get("residual", True) and not config["FUSE_RESIDUAL"]
        return ((("add", _cdiv(M * N, config["BLOCK_N"]), False),) if add else ()) + (("rmsnorm", M, False),)
    if family == "comm":
        return ((str(options.get("collective", "all_reduce")), int(config["CHANNELS"]), True),)
    raise RequirementsError(f"no requirements are known for kernel family {family!r}")


# --- the value -----------------------------------------------------------------------------

@dataclass(frozen=True)
class LaunchNeeds:
    """One launch of a config at a shape.

    Attributes:
        name: what it does (``matmul_partial``, ``splitk_reduce``, …), as in the family's plan.
        grid: CTAs launched; None for a persistent grid whose occupancy is unknown.
        persistent: the grid is sized to the SMs and loops over work items.
        shared_bytes, registers: shared memory and registers per CTA from the compiled
            kernel (None when not known: not compiled, or a declared profile).
        ctas_per_sm: the occupancy the device allows it (None when not known).
    """

    name: str
    grid: int | None
    persistent: bool
    shared_bytes: int | None = None
    registers: int | None = None
    ctas_per_sm: int | None = None


@dataclass(frozen=True)
class Requirements:
    """What one config needs at one shape (see the module docstring for the formulas).

    Attributes:
        family: the kernel family.
        shape: the shape it was computed at, ``(dim, value)`` pairs.
        workspace: global workspace by buffer, ``(name, bytes)`` pairs.
        launches: each launch, in order.
        device_sms: the SMs it is told (the device's, or its partition's when sized to it).
        margin: the SMs it leaves to other streams (``SM_MARGIN``).
        sized_sms: what its persistent grid and split counts are sized to (told − margin).
        shape_range: the range of the bucket the config was tuned for, ``(dim, low, high)``
            with ``low`` exclusive (None: open) and ``high`` inclusive (None: the last
            bucket, which also serves larger shapes); empty when not from a table.
    """

    family: str
    shape: tuple[tuple[str, int], ...]
    workspace: tuple[tuple[str, int], ...]
    launches: tuple[LaunchNeeds, ...]
    device_sms: int
    margin: int
    sized_sms: int
    shape_range: tuple[tuple[str, float | None, float | None], ...] = ()

    @property
    def workspace_bytes(self) -> int:
        """Total workspace, every buffer live together."""
        return sum(b for _, b in self.workspace)

    @property
    def launch_count(self) -> int:
        return len(self.launches)

    @property
    def persistent(self) -> bool:
        return any(launch.persistent for launch in self.launches)

    @property
    def ctas(self) -> int | None:
        """CTAs over every launch (None when a persistent grid's occupancy is unknown)."""
        grids = [launch.grid for launch in self.launches]
        return None if None in grids else sum(grids)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as the exports and ``tuner table show --json`` write it."""
        return {
            "family": self.family, "shape": dict(self.shape), "workspace_bytes": self.workspace_bytes,
            "workspace": dict(self.workspace), "launches": [launch.__dict__.copy() for launch in self.launches],
            "persistent": self.persistent, "device_sms": self.device_sms, "margin": self.margin,
            "sized_sms": self.sized_sms, "shape_range": {d: [lo, hi] for d, lo, hi in self.shape_range},
        }


def requirements(family: str, config: Mapping[str, Any], shape: Mapping[str, Any], *, sms: int,
                 options: Mapping[str, Any] | None = None, ctas_per_sm: int | None = None,
                 resources: Mapping[str, Mapping[str, Any]] | None = None,
                 shape_range: Mapping[str, Sequence[Any]] | None = None,
                 expert_counts: Sequence[int] | None = None) -> Requirements:
    """What ``config`` of ``family`` (built with ``options``) needs at ``shape``.

    Args:
        sms: the SMs the config is told (the device's, or its partition's when kernels
            are sized to the partition); its ``SM_MARGIN`` is taken off here.
        ctas_per_sm: the compiled occupancy of a persistent launch (None: taken from
            ``resources`` when they have it, else the persistent grid is None).
        resources: per launch name, ``shared_bytes``, ``registers`` (per CTA) and
            ``ctas_per_sm`` from the compiled kernel, as a table row carries them.
        shape_range: the bucket's bounds ``{dim: [low, high]}``.
        expert_counts: ``fused_moe``'s pairs per expert (None: spread evenly).

    Raises:
        RequirementsError: an unknown family, a shape lacking a dimension the family
            needs, a config lacking a parameter, or a value of the wrong kind (one line).
    """
    options = options or {}
    resources = resources or {}
    try:
        unbounded = [k for k, v in shape.items() if isinstance(v, float) and not math.isfinite(v)]
        if unbounded:
            raise RequirementsError(f"shape {unbounded[0]}={shape[unbounded[0]]!r} is not a finite number")
        dims = {k: int(math.ceil(v)) for k, v in shape.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        sized = sized_sms(config, int(sms))
        buffers = workspace_buffers(family, options, config, dims, sized)
        if ctas_per_sm is None:
            found = [r.get("ctas_per_sm") for r in resources.values() if isinstance(r, Mapping)]
            ctas_per_sm = min((c for c in found if isinstance(c, int) and c > 0), default=None)
        planned = _launches(family, options, config, dims, sized, ctas_per_sm, expert_counts)
    except RequirementsError:
        raise
    except KeyError as exc:
        raise RequirementsError(f"{family}: the shape or config lacks {exc.args[0]!r}") from None
    except (TypeError, ValueError, ZeroDivisionError, AttributeError) as exc:
        raise RequirementsError(f"{family}: cannot compute requirements at {dict(shape)!r}: {exc}") from None
    launches = []
    for name, grid, persistent in planned:
        r = resources.get(name)
        r = r if isinstance(r, Mapping) else {}
        launches.append(LaunchNeeds(name, grid, persistent, r.get("shared_bytes"), r.get("registers"),
                                    r.get("ctas_per_sm")))
    bounds = tuple((d, pair[0], pair[1]) for d, pair in (shape_range or {}).items())
    return Requirements(
        family=family, shape=tuple(dims.items()),
        workspace=tuple((name, count * ELEMENT_BYTES[dtype]) for name, count, dtype in buffers),
        launches=tuple(launches), device_sms=int(sms), margin=int(config.get("SM_MARGIN", 0)), sized_sms=sized,
        shape_range=bounds,
    )
