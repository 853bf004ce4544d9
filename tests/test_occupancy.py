"""Occupancy rules, checked against arithmetic done by hand.

Constants used below (tuner/profile/devices.py):
  A100 (sm_80): 164 KB = 167936 B shared per SM, at most 163 KB = 166912 B per CTA.
  H100/H200 (sm_90): 228 KB = 233472 B per SM, at most 227 KB = 232448 B per CTA.
  Both: 65536 registers per SM in 4 sub-partitions of 16384, allocated per warp in units
  of 256; 64 warps and 32 CTAs per SM; 255 registers per thread; 1 KB (1024 B) reserved
  per CTA; shared memory allocated in units of 128 B.
"""

from __future__ import annotations

import pytest

from tuner.profile.devices import A100, H100, H200
from tuner.profile.occupancy import occupancy


def test_register_limited_brief_example():
    # 128 regs × 128 threads: 4 warps; a warp takes 128×32 = 4096 registers (a multiple
    # of 256). A sub-partition's 16384 registers hold 16384 // 4096 = 4 warps, the SM
    # 4 × 4 = 16 warps' worth → 16 // 4 = 4 CTAs. Warps allow 64 // 4 = 16, blocks 32,
    # shared memory (0 + 1024 B) → 167936 // 1024 = 164.
    assert occupancy(A100, 128, 0, 4) == (4, "registers", None)
    assert occupancy(H100, 128, 0, 4) == (4, "registers", None)


def test_elementwise_kernel_is_warp_limited_and_ties_name_warps():
    # 28 regs × 32 = 896 → rounded up to 1024 per warp; 16384 // 1024 = 16 warps per
    # sub-partition → 64 warps → 64 // 4 = 16 CTAs. Warps: 64 // 4 = 16 as well. The tie
    # is named "warps": fewer registers would not help.
    assert occupancy(A100, 28, 0, 4) == (16, "warps", None)
    assert occupancy(H200, 28, 0, 4) == (16, "warps", None)


def test_shared_memory_limited():
    # 64 regs × 32 = 2048 per warp → 16384 // 2048 = 8 per sub-partition → 32 warps
    # → 8 CTAs of 4 warps. Warps: 16. Shared: 49152 + 1024 = 50176 (= 392 × 128, no
    # rounding). A100: 167936 // 50176 = 3 (3 × 50176 = 150528, 4 × = 200704).
    # H100: 233472 // 50176 = 4 (4 × 50176 = 200704, 5 × = 250880).
    assert occupancy(A100, 64, 49152, 4) == (3, "shared memory", None)
    assert occupancy(H100, 64, 49152, 4) == (4, "shared memory", None)


def test_shared_memory_rounds_up_to_the_allocation_unit():
    # 32526 + 1024 = 33550 B, rounded up to 128: 263 × 128 = 33664 B.
    # A100: 167936 // 33664 = 4 (4 × 33664 = 134656; 5 × = 168320 > 167936), where the
    # unrounded 33550 would allow 5 (5 × 33550 = 167750). 1 warp, 16 regs: warps 64,
    # registers 16 × 32 = 512 per warp → 32 per sub-partition → 128 CTAs, blocks 32.
    assert occupancy(A100, 16, 32526, 1) == (4, "shared memory", None)


def test_blocks_limited():
    # 1 warp of 16 regs: registers allow 128 CTAs (above), warps 64 // 1 = 64, shared
    # (0 + 1024) → 164 (A100) / 228 (H100): the 32-CTA cap binds.
    assert occupancy(A100, 16, 0, 1) == (32, "blocks", None)
    assert occupancy(H100, 16, 0, 1) == (32, "blocks", None)


def test_registers_are_allocated_per_sub_partition():
    # 80 regs × 32 = 2560 per warp (= 10 × 256). Per sub-partition 16384 // 2560 = 6
    # warps (6.4 rounded down) → 4 × 6 = 24 warps → 24 one-warp CTAs. Counting the SM
    # as one pool would give 65536 // 2560 = 25.
    assert occupancy(H100, 80, 0, 1) == (24, "registers", None)


def test_hopper_register_limited_8_warps():
    # 168 regs × 32 = 5376 per warp (= 21 × 256). 16384 // 5376 = 3 per sub-partition
    # → 12 warps → 12 // 8 = 1 CTA. Warps 64 // 8 = 8; shared 65536 + 1024 = 66560
    # → 233472 // 66560 = 3.
    assert occupancy(H100, 168, 65536, 8) == (1, "registers", None)
    # 255 regs: 8160 → 8192 per warp; 8 warps need 65536 registers: exactly one SM's.
    assert occupancy(H100, 255, 0, 8) == (1, "registers", None)


def test_one_cta_may_use_all_shared_memory_a_cta_may_have():
    # A100: 166912 + 1024 = 167936 = the whole SM → 1 CTA.
    assert occupancy(A100, 32, 166912, 4) == (1, "shared memory", None)
    # H100: 232448 + 1024 = 233472 = the whole SM → 1 CTA.
    assert occupancy(H100, 32, 232448, 4) == (1, "shared memory", None)
    # 200 KB fits an sm_90 CTA but not an sm_80 one.
    assert occupancy(H100, 32, 200 * 1024, 4)[0] == 1
    assert occupancy(A100, 32, 200 * 1024, 4)[0] == 0


@pytest.mark.parametrize(
    ("device", "regs", "smem", "warps", "limiter", "words"),
    [
        # One byte over the per-CTA maximum.
        (A100, 32, 166913, 4, "shared memory", "166913 bytes"),
        (H100, 32, 232449, 4, "shared memory", "232449 bytes"),
        # ptxas never assigns more than 255; 256 is over the per-thread limit.
        (H100, 256, 0, 4, "registers", "256 registers per thread"),
        # 200 regs × 32 = 6400 per warp; 16 warps need 102400 > 65536 registers.
        (A100, 200, 0, 16, "registers", "102400 registers per CTA"),
        # 130 regs → 4160 → 4352 per warp; 16 warps need 69632 > 65536.
        (H200, 130, 0, 16, "registers", "69632 registers per CTA"),
        # 64 warps = 2048 threads > 1024.
        (H100, 32, 0, 64, "warps", "2048 threads"),
    ],
)
def test_illegal_launches(device, regs, smem, warps, limiter, words):
    ctas, named, reason = occupancy(device, regs, smem, warps)
    assert (ctas, named) == (0, limiter)
    assert reason is not None and words in reason


def test_register_per_cta_check_rounds_warps_to_sub_partitions():
    # 255 regs → 8192 per warp. 2 warps are checked as 4 (one per sub-partition):
    # 4 × 8192 = 32768 ≤ 65536, legal; registers: 16384 // 8192 = 2 per sub-partition
    # → 8 warps → 8 // 2 = 4 CTAs.
    assert occupancy(A100, 255, 0, 2) == (4, "registers", None)
    # 16 warps × 128 regs: 16 × 4096 = 65536, legal, and 1 CTA fills the register file.
    assert occupancy(A100, 128, 0, 16) == (1, "registers", None)
