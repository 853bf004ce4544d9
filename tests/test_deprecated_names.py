"""Public names that moved keep working for a release, warning where they went."""

from __future__ import annotations

import pytest

import tuner.kernels
import tuner.sim
from tuner.families import get_family
from tuner.sim.regime_switch import DispatcherSwitch, NoSwitch, RegimeSwitch


@pytest.mark.parametrize("old, family", [("MatmulFamily", "matmul"), ("DecodeAttentionFamily", "decode_attention"),
                                         ("RmsNormFamily", "rmsnorm"), ("CommFamily", "comm"),
                                         ("FusedMoeFamily", "fused_moe")])
def test_an_old_family_class_is_the_registrys_with_a_warning(old, family):
    with pytest.warns(DeprecationWarning, match=rf"tuner\.kernels\.{old} is deprecated .*tuner\.families\.{family}"):
        cls = getattr(tuner.kernels, old)
    assert type(get_family(family)) is cls


def test_the_old_switch_names_are_the_regime_switchs():
    with pytest.warns(DeprecationWarning, match="simulate_switching"):
        assert tuner.sim.simulate_policy is tuner.sim.simulate_switching
    with pytest.warns(DeprecationWarning):
        assert (tuner.sim.StaticPolicy, tuner.sim.DispatcherPolicy, tuner.sim.SwitchPolicy) == (
            NoSwitch, DispatcherSwitch, RegimeSwitch)


def test_a_name_never_there_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'NoSuchFamily'"):
        tuner.kernels.NoSuchFamily  # noqa: B018
    with pytest.raises(ImportError, match="no_such_name"):
        from tuner.sim import no_such_name  # noqa: F401
