"""Regime switches under CUDA graphs: which configs every captured batch size needs.

An engine that serves decode steps from CUDA graphs (vLLM captures one graph per batch
size in ``cudagraph_capture_sizes``, padding a step to the next captured size) bakes each
kernel's launch parameters into its graph at start-up. A dispatcher that later switches
regime changes the config ``config()`` returns, but a replayed graph keeps launching the
one it captured. So an engine has two honest choices, and this module gives what each
needs:

* capture every variant at start-up: :func:`graph_configs` lists, per operator and
  captured size, the distinct configs any regime of the table serves there (an engine
  captures one graph per combination it meets, and after a switch replays the graph of
  the new regime's configs, :func:`graph_key`);
* or switch only what no graph holds: :func:`graph_stable` names the operators whose
  config at every captured size is the same in every regime (their switch changes no
  graph), so an engine can pin the others to the regime it captured with.

Shapes passed beyond a captured size (prefill, eager steps) are not in a graph: a switch
reaches them at the next launch, as ``config()`` says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .served import Table

Params = Mapping[str, Any]


def graph_configs(table: Table, capture_sizes: Sequence[int], dims: Mapping[str, str]
                  ) -> dict[str, dict[int, dict[str, Params]]]:
    """``op -> captured size -> regime -> params``: the config each regime serves an
    operator at each captured batch size.

    Args:
        table: the table a dispatcher serves (``dispatcher.table``).
        capture_sizes: the engine's captured batch sizes (vLLM's
            ``cudagraph_capture_sizes``).
        dims: per operator in a graph, the key dimension the batch size is
            (``{"qkv": "M", "decode_attn": "B"}``); an operator's other key dimensions take
            their last bucket, as ``config()`` gives a missing value. Operators not named
            are not in a graph.

    Raises:
        KeyError: an operator the table does not have.
    """
    out: dict[str, dict[int, dict[str, Params]]] = {}
    for op, dim in dims.items():
        per_size: dict[int, dict[str, Params]] = {}
        for size in sorted(set(int(s) for s in capture_sizes)):
            per_size[size] = {regime: table.configs[regime][op].pick({dim: size}) for regime in table.regimes}
        out[op] = per_size
    return out


def graph_stable(table: Table, capture_sizes: Sequence[int], dims: Mapping[str, str]) -> tuple[str, ...]:
    """The operators (of ``dims``) whose config at every captured size is the same in every
    regime: switching regime changes none of their graphs' launches."""
    found = graph_configs(table, capture_sizes, dims)
    return tuple(op for op, per_size in found.items()
                 if all(len({_identity(p) for p in by_regime.values()}) == 1 for by_regime in per_size.values()))


def graph_key(table: Table, regime: str, size: int, dims: Mapping[str, str]) -> tuple[tuple[str, Any], ...]:
    """What identifies the graph a step of ``size`` needs under ``regime``: each graphed
    operator's config there. Two regimes with equal keys replay the same graph."""
    return tuple((op, _identity(table.configs[regime][op].pick({dim: size}))) for op, dim in sorted(dims.items()))


def _identity(params: Params) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((name, repr(value)) for name, value in params.items()))
