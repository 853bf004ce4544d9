"""The evaluator: a discrete-event service on a fluid-shared GPU (DESIGN §4).

Nothing here knows about Optuna; the search calls :func:`simulate`. The core modules run
compiled when the install could compile them (:mod:`tuner.sim.native` says which build).
"""

from .native import BUILD  # first: it decides which build of the core modules loads
from .gpu import SharedGPU, Kernel
from .metrics import Metrics
from .program import BoundService, bind
from .recording import Recording
from .regime_switch import DispatcherSwitch, NoSwitch, RegimeSwitch
from .service import ServiceRun, SimResult, simulate, simulate_switching
from .chrome_trace import write_chrome_trace
from ..deprecated import moved_names

__all__ = [
    "BUILD", "BoundService", "SharedGPU", "Kernel", "Metrics", "Recording", "ServiceRun", "SimResult",
    "DispatcherSwitch", "NoSwitch", "RegimeSwitch", "bind", "simulate", "simulate_switching",
    "write_chrome_trace",
]

#: The regime switch's names before "policy" came to mean batching alone.
__getattr__ = moved_names(__name__, {
    "simulate_policy": "tuner.sim.service:simulate_switching",
    "SwitchPolicy": "tuner.sim.regime_switch:RegimeSwitch",
    "StaticPolicy": "tuner.sim.regime_switch:NoSwitch",
    "DispatcherPolicy": "tuner.sim.regime_switch:DispatcherSwitch",
})
