"""The serving side of tuner: load the config table, watch the load, hand out configs.

Light to import (the standard library and tuner's error, table-codec, schema-version and
requirements modules): no Optuna, SQLAlchemy, NumPy, torch or Triton. See ``docs/runtime.md``.

    dispatcher = tuner.runtime.load_table("table.json", fallback={"BLOCK_M": 64, ...})
    dispatcher.observe_arrival()          # per request
    dispatcher.tick()                     # at a safe point: the regime may change here
    dispatcher.config("qkv", {"M": 384})  # per launch: the current regime's params for M's bucket
    dispatcher.requirements("qkv", {"M": 384})  # what that config needs: workspace, launches, SMs
    dispatcher.reservation({"qkv": {"M": 8192}})  # workspace to reserve for the whole table
"""

from __future__ import annotations

from .autotune import Autotuned, autotune
from .classify import RateClassifier
from .dispatcher import Dispatcher, load_table
from .graphs import graph_configs, graph_key, graph_stable
from .monitor import LoadMonitor, LoadSnapshot
from .served import OpConfigs, Table, read_table
from ..requirements import LaunchNeeds, Requirements

__all__ = [
    "Autotuned", "Dispatcher", "LaunchNeeds", "LoadMonitor", "LoadSnapshot", "OpConfigs", "RateClassifier",
    "Requirements", "Table", "autotune", "graph_configs", "graph_key", "graph_stable", "load_table", "read_table",
]
