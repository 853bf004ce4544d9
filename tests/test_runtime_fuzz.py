"""Fuzzing the runtime (issue 39, items 2 and 6): no table content, shape or observation
value makes the dispatcher raise inside a service.

Hypothesis damages a valid JSON export (a field of a row, of its params or bucket bounds
set to a wrong type, an extreme or non-finite number or a deep nest; a field dropped; a
key written twice; the file cut short; the document's shape changed), loads it with a
fallback, and then asks for configs and requirements at odd shapes and feeds odd
observations. The contract (docs/runtime.md): ``load_table`` never raises for a bad
table (it serves the fallback and says why), and a lookup or an observation never
raises; a lookup answers a mapping of parameters, the fallback's when the table could
not be served. Runs with the suite's Hypothesis profile (``ci``: a fixed seed, small;
``HYPOTHESIS_PROFILE=long`` by hand: many random cases).
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import tuner.runtime as rt
from tests.test_runtime import FALLBACK, bucketed, rows
from tuner.store.export import json_document

#: Values a damaged field may take: wrong types, extremes, non-finite numbers, deep nests.
ODD_VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, 2**63, 1e308, -1e308, 5e-324, math.nan, math.inf, -math.inf,
    "", "x", "64", "nan", [], [1, 2], [None, 16], [16, None], [64, 16], {}, {"a": 1}, {"M": [None, "x"]},
    [[[[[[[[[[[]]]]]]]]]]], {"nested": {"deeper": {"deepest": [None]}}}, "x" * 10_000,
)
#: Shapes and observations a service may hand over by mistake.
ODD_SHAPES: tuple[Any, ...] = (
    None, {}, {"M": math.nan}, {"M": math.inf}, {"M": -math.inf}, {"M": -1}, {"M": 0}, {"M": 2**70}, {"M": "4"},
    {"M": "many"}, {"M": None}, {"M": [1]}, {"M": True}, {"Q": 5}, {"M": 1e308, "N": math.nan}, {"M": 64},
)
ODD_OBSERVATIONS: tuple[Any, ...] = (math.nan, math.inf, -math.inf, -1, 0, 1e308, 2**70, "x", None, [1], True, -0.0)
OPS = ("qkv", "o", "attn", "")


def _table_rows() -> list:
    return rows() + bucketed([16, 64, 8192], op="attn")


@st.composite
def damaged_exports(draw: st.DrawFn) -> tuple[str, str]:
    """A JSON export's text with one damage, and the damage in words."""
    document = json_document("toy", _table_rows())
    kind = draw(st.sampled_from(("set", "set param", "set bound", "drop", "twice", "cut", "document")))
    block = draw(st.sampled_from(("rows", "details")))
    records = document[block]
    index = draw(st.integers(0, len(records) - 1))
    record = records[index]
    value = draw(st.sampled_from(ODD_VALUES))
    if kind == "set":
        field = draw(st.sampled_from(sorted(record)))
        record[field] = value
    elif kind == "set param" and block == "rows":
        record["params"][draw(st.sampled_from(sorted(record["params"]) + ["NEW"]))] = value
    elif kind == "set bound" and block == "rows" and record.get("bucket_bounds"):
        bounds = record["bucket_bounds"]["M"]
        bounds[draw(st.integers(0, 1))] = value
    elif kind == "drop":
        field = draw(st.sampled_from(sorted(record)))
        del record[field]
    elif kind == "document":
        document = draw(st.sampled_from(([document], {"schema_version": document["schema_version"]},
                                         {**document, "rows": {"0": document["rows"]}},
                                         {**document, "schema_version": value})))
    text = json.dumps(document)
    if kind == "twice":
        field = draw(st.sampled_from(sorted(record)))
        needle = f'"{field}": '
        at = text.find(needle, draw(st.integers(0, len(text) - 1)))
        if at >= 0:
            text = text[:at] + f"{needle}{json.dumps(value)}, " + text[at:]
    elif kind == "cut":
        text = text[:draw(st.integers(0, len(text) - 1))]
    return text, f"{kind} in {block}[{index}] = {value!r}"[:200]


@settings(max_examples=max(1, settings.default.max_examples * 3))
@given(export=damaged_exports(), shapes=st.lists(st.sampled_from(ODD_SHAPES), min_size=1, max_size=4),
       observations=st.lists(st.sampled_from(ODD_OBSERVATIONS), min_size=1, max_size=4))
def test_no_table_shape_or_observation_makes_the_runtime_raise(export, shapes, observations) -> None:
    text, damage = export
    logging.getLogger("tuner.runtime").setLevel(logging.CRITICAL)  # the warnings are the point, not the output
    with tempfile.TemporaryDirectory(prefix="tuner-runtime-fuzz-") as directory:
        path = Path(directory) / "table.json"
        path.write_text(text)
        dispatcher = rt.load_table(path, fallback=FALLBACK)
        served = dispatcher.fallback_reason is None
        for op in OPS:
            for shape in shapes:
                params = dispatcher.config(op, shape)
                assert isinstance(params, Mapping), damage
                if not served:
                    assert dict(params) == FALLBACK, (damage, dispatcher.fallback_reason)
                dispatcher.config_name(op, shape)
                dispatcher.requirements(op, shape)
        for value in observations:
            dispatcher.observe_arrival(value)
            dispatcher.observe_queue(value)
            dispatcher.observe_free_memory(value)
            dispatcher.tick(value)
        dispatcher.reservation()


# --- the decorator, misused -------------------------------------------------------------

class _Config:
    """``triton.Config``'s interface, as the decorator's checks and matching read it."""

    def __init__(self, kwargs: Any, num_warps: Any = 4, num_stages: Any = 3) -> None:
        self.kwargs, self.num_warps, self.num_stages = kwargs, num_warps, num_stages
        self.num_ctas, self.maxnreg, self.pre_hook = 1, None, None

    def all_kwargs(self) -> dict:
        return {**self.kwargs, "num_warps": self.num_warps, "num_stages": self.num_stages}

    def __repr__(self) -> str:
        return f"Config({self.kwargs!r}, num_warps={self.num_warps!r})"


def _target(kind: str) -> Any:
    from tests.test_autotune_dropin import Kernel, tutorial_like, with_runtime_k, with_split

    kernel = {"tutorial": tutorial_like, "split": with_split, "runtime K": with_runtime_k}.get(kind)
    if kernel is not None:
        return Kernel(kernel)
    return {"plain function": lambda a, M: None, "None": None, "number": 3, "class": _Config}[kind]


#: (One config at most: with more, a launch the table does not serve is benchmarked by
#: Triton's autotuner, which needs a GPU.)
CONFIG_LISTS: tuple[Any, ...] = (
    None, [], "configs", 3, [1], [None], [_Config({"BLOCK_M": 16})], [_Config({"BLOCK_SIZE_M": 64}, num_warps=None)],
    [_Config({"BLOCK_SIZE_M": [64]})],
    [_Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8})],
)


@settings(max_examples=max(1, settings.default.max_examples * 3))
@given(target=st.sampled_from(("tutorial", "split", "runtime K", "plain function", "None", "number", "class")),
       configs=st.sampled_from(CONFIG_LISTS), generator=st.booleans(),
       key=st.sampled_from(([], ["M"], ["Q"], "M", 3, {"M": "M"}, {"M": 3}, [None])),
       op=st.sampled_from((None, "qkv", "attn", "", 3)),
       table=st.sampled_from(("dispatcher", "path", "missing path", None, 3, "")),
       names=st.sampled_from((None, "matmul", "gemm", {"BLOCK_M": "BLOCK_SIZE_M"}, {"BLOCK_M": 3}, 3)),
       fallback=st.sampled_from((None, {}, {"BLOCK_SIZE_M": 64}, 3, {"BLOCK_SIZE_M": math.nan})),
       prune=st.sampled_from((None, {}, {"topk": 1}, {"perf_model": None, "top_k": 2}, 3)),
       shapes=st.lists(st.sampled_from((1, 8, 80, 10**6, -1, math.nan, "8", None)), min_size=1, max_size=3))
def test_the_decorator_misused_is_one_line_at_decoration_or_launches(target, configs, generator, key, op, table, names,
                                                                     fallback, prune, shapes) -> None:
    """Issue 39, item 6: ``tuner.runtime.autotune`` with any mix of odd arguments, on a
    kernel or on something that is not one, either refuses at decoration with a one-line
    TypeError or ValueError, or launches at any M; a launch with no config it can give
    is a one-line RuntimeError. Never another exception from inside the decorator."""
    logging.getLogger("tuner.runtime").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory(prefix="tuner-autotune-fuzz-") as directory:
        from tuner.store.export import export_json
        from tests.test_runtime import row, TILES

        path = export_json("toy", [row(r, "qkv") for r in TILES], Path(directory) / "t.json")
        table_value = {"dispatcher": rt.load_table(path), "path": str(path),
                       "missing path": str(Path(directory) / "none.json")}.get(table, table)
        given_configs = (c for c in configs) if generator and isinstance(configs, list) else configs
        arguments = {"configs": given_configs, "key": key, "op": op, "table": table_value, "names": names,
                     "fallback": fallback, "prune_configs_by": prune}
        try:
            kernel = rt.autotune(**arguments)(_target(target))
        except (TypeError, ValueError) as refused:
            assert "\n" not in str(refused) and str(refused), (arguments, refused)
            return
        for m in shapes:
            try:
                kernel[(1,)]("a", m, 8, 8) if target == "runtime K" else kernel[(1,)]("a", m)
            except RuntimeError as cannot:
                assert "\n" not in str(cannot), (arguments, cannot)
