"""Compiling launches for a GPU architecture without a GPU, and the compile cache.

Compiles cost 0.3–1 s each, so the tests share a handful of tiny kernels. The cache tests
run on SQLite and on PostgreSQL (``TUNER_TEST_POSTGRES``, default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``; each test gets a fresh database;
skipped only when the server cannot be reached).
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import warnings

import pytest
import triton.language as tl
from sqlalchemy import create_engine, select
from triton.runtime.jit import JITFunction

from tuner.errors import StorageError, TunerError
from tuner.kernels.family import KernelLaunch
from tuner.profile import compiled
from tuner.bundled import EXAMPLE_DATABASE
from tuner.profile.cache import (CompileCache, CompiledRecord, CompileKey, compile_key, example_fallback,
                                 kernel_source_hash)
from tuner.profile.compiled import ArchUsage, compile_launch, compile_options, compile_usage, on_device, parse_res_usage
from tuner.profile.devices import A100, H100, H200
from tuner.profile.occupancy import occupancy



def compilable(fn):
    """A ``JITFunction`` even under ``TRITON_INTERPRET=1``, where ``triton.jit`` would
    return an interpreted function that ``ASTSource`` cannot take."""
    return JITFunction(fn)


@compilable
def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


@compilable
def dot_tile(a_ptr, b_ptr, c_ptr, K_TILES, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # A is stored as K_TILES consecutive BM×BK tiles, B as K_TILES consecutive BK×BN tiles.
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * BK + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * BN + rn[None, :]
    acc = tl.zeros((BM, BN), tl.float32)
    for _ in range(K_TILES):
        acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs))
        a_ptrs += BM * BK
        b_ptrs += BK * BN
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def make_launch(fn, signature, constexprs, *, num_warps=4, num_stages=3) -> KernelLaunch:
    """A launch whose pointers are 16-byte aligned, as torch allocations are."""
    return KernelLaunch(name=fn.__name__, fn=fn, signature=tuple(signature.items()),
                        constexprs=tuple(sorted(constexprs.items())), num_warps=num_warps,
                        num_stages=num_stages, grid=1, persistent=False, flops=0.0, dram_bytes=0.0,
                        divisible_by_16=tuple(name for name, kind in signature.items() if kind.startswith("*")))


def double_launch(block: int = 1024, **options) -> KernelLaunch:
    return make_launch(double, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                       {"BLOCK": block}, **options)


def dot_launch(num_stages: int, dtype: str = "fp16") -> KernelLaunch:
    signature = {"a_ptr": f"*{dtype}", "b_ptr": f"*{dtype}", "c_ptr": "*fp32", "K_TILES": "i32",
                 "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
    return make_launch(dot_tile, signature, {"BM": 64, "BN": 64, "BK": 32}, num_stages=num_stages)


# ---------------------------------------------------------------- compiling


def test_parse_res_usage_picks_the_named_function():
    output = (
        "\nResource usage:\n Common:\n  GLOBAL:0\n"
        " Function helper:\n  REG:12 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:360 TEXTURE:0\n"
        " Function mm:\n  REG:254 STACK:96 SHARED:1024 LOCAL:8 CONSTANT[0]:576 TEXTURE:0 SURFACE:0\n"
    )
    usage = parse_res_usage(output, "mm")
    assert (usage.regs, usage.stack, usage.shared, usage.local) == (254, 96, 1024, 8)
    with pytest.raises(ValueError, match="no function 'other'"):
        parse_res_usage(output, "other")


def test_elementwise_kernel_uses_no_shared_memory():
    # No tl.dot, no reduction: nothing goes through shared memory. A few dozen registers
    # at most: ≤ 32 × 32 = 1024 per warp → ≥ 16 warps per sub-partition → ≥ 16 CTAs of 4
    # warps by registers; the 64-warp limit allows 64 // 4 = 16, and names itself.
    resources = compile_launch(double_launch(), H100)
    assert resources.smem_bytes == 0
    assert 0 < resources.regs_per_thread <= 32
    assert resources.spill_bytes == 0
    assert (resources.arch, resources.num_warps) == ("sm_90", 4)
    assert (resources.ctas_per_sm, resources.limiter, resources.reason) == (16, "warps", None)


def test_more_pipeline_stages_take_more_shared_memory():
    # One stage buffers an A tile of 64×32 and a B tile of 32×64 fp16: (2048 + 2048) × 2 B
    # = 8192 B. On sm_90 Triton keeps num_stages of them: 2 → 16384 B, 3 → 24576 B; on
    # sm_80 its cp.async ring keeps num_stages − 1: 2 → 8192 B, 3 → 16384 B.
    two, three = compile_usage(dot_launch(2), 90), compile_usage(dot_launch(3), 90)
    assert (two.smem_bytes, three.smem_bytes) == (16384, 24576)
    assert two.error is None and three.error is None
    resources = on_device(three, H100, 4)
    assert resources.ctas_per_sm == occupancy(H100, three.regs_per_thread, 24576, 4)[0] > 0
    assert (compile_usage(dot_launch(2), 80).smem_bytes, compile_usage(dot_launch(3), 80).smem_bytes) == (8192, 16384)


def test_a_config_that_does_not_compile_is_illegal_not_an_error():
    resources = compile_launch(double_launch(block=1000), H100)  # tl.arange needs a power of 2
    assert (resources.ctas_per_sm, resources.limiter, resources.legal) == (0, "compile", False)
    assert "does not compile for sm_90" in resources.reason
    assert "power of 2" in resources.reason
    assert "\n" not in resources.reason


def test_ptxas_failure_reason_quotes_ptxas():
    from triton.runtime.errors import PTXASError

    error = PTXASError("`ptxas` failed with error code 255\n`ptxas` stderr:\nptxas error   : Entry function 'k' "
                       "uses too much shared data (0x40000 bytes, 0xc000 max)\n\nRepro command: ptxas k.ptx\n")
    reason = compiled.describe_error(error)
    assert reason.startswith("PTXASError: ") and "uses too much shared data" in reason
    assert "\n" not in reason and "Repro" not in reason


def test_fp_fusion_is_explicit_so_triton_does_not_warn():
    assert "enable_fp_fusion" in compile_options(double_launch())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compile_usage(double_launch(block=256), 90)
    assert not [w for w in caught if "FP_FUSION" in str(w.message)]


def test_on_device_refuses_another_architecture():
    with pytest.raises(ValueError, match="sm_90"):
        on_device(ArchUsage("sm_90", 0, 32), A100, 4)


# ---------------------------------------------------------------- cache keys


def test_key_changes_with_everything_the_binary_depends_on():
    base = compile_key(dot_launch(3), "sm_90")
    assert compile_key(dot_launch(3), "sm_90") == base
    changed = [
        compile_key(dot_launch(2), "sm_90"),                      # num_stages
        compile_key(dot_launch(3, dtype="bf16"), "sm_90"),        # argument types
        compile_key(dot_launch(3), "sm_80"),                      # architecture
    ]
    assert len({base, *changed}) == 4
    assert compile_key(double_launch(512), "sm_90") != compile_key(double_launch(1024), "sm_90")  # constexprs
    assert compile_key(double_launch(num_warps=8), "sm_90") != compile_key(double_launch(), "sm_90")
    assert base.source_hash != compile_key(double_launch(), "sm_90").source_hash


KERNEL_MODULE = '''
import triton
import triton.language as tl

@triton.jit
def helper(x):
    return x * {factor}

@triton.jit
def kernel(x_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, helper(tl.load(x_ptr + offsets)))
'''


def test_source_hash_covers_the_jit_functions_a_kernel_calls(tmp_path, monkeypatch):
    # Three modules whose `kernel` text is identical; one calls a different `helper`.
    for name, factor in (("kernel_a", 2), ("kernel_b", 2), ("kernel_c", 3)):
        (tmp_path / f"{name}.py").write_text(KERNEL_MODULE.format(factor=factor))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    try:
        a, b, c = (importlib.import_module(name).kernel for name in ("kernel_a", "kernel_b", "kernel_c"))
        assert kernel_source_hash(a) == kernel_source_hash(b) != kernel_source_hash(c)
    finally:
        for name in ("kernel_a", "kernel_b", "kernel_c"):
            sys.modules.pop(name, None)


# ---------------------------------------------------------------- the cache


@pytest.fixture
def compiles(monkeypatch):
    """The launches compile_usage is called with from now on, in this process (including
    through compile_launch)."""
    calls: list[tuple[str, int]] = []
    original = compiled.compile_usage

    def counting(launch, cc):
        calls.append((launch.name, cc))
        return original(launch, cc)

    monkeypatch.setattr(compiled, "compile_usage", counting)
    return calls


def rows(url: str) -> list[CompiledRecord]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(select(CompiledRecord)).all())
    finally:
        engine.dispose()


def test_second_lookup_does_not_compile_and_sm90_devices_share_a_compile(storage_url, compiles):
    launch = double_launch()
    expected = compile_launch(launch, H100)
    compiles.clear()
    with CompileCache(storage_url) as cache:
        on_h100 = cache.get_or_compile(launch, H100)
        assert cache.get_or_compile(launch, H100) == on_h100
        on_h200 = cache.get_or_compile(launch, H200)
        assert len(compiles) == 1
        assert on_h200 == on_h100 == expected
        cache.get_or_compile(launch, A100)  # another architecture compiles again
        assert compiles == [("double", 90), ("double", 80)]
    with CompileCache(storage_url) as reopened:  # from the database, not memory
        assert reopened.get_or_compile(launch, H200) == on_h200
    assert len(compiles) == 2
    assert sorted(row.arch for row in rows(storage_url)) == ["sm_80", "sm_90"]


def test_changed_stages_or_constexprs_compile_again(storage_url, compiles):
    with CompileCache(storage_url) as cache:
        two = cache.get_or_compile(dot_launch(2), H100)
        three = cache.get_or_compile(dot_launch(3), H100)
        cache.get_or_compile(double_launch(512), H100)
        cache.get_or_compile(double_launch(1024), H100)
        assert len(compiles) == 4
        assert (two.smem_bytes, three.smem_bytes) == (16384, 24576)
        cache.get_or_compile(dot_launch(3), H200)
        assert len(compiles) == 4


def test_failed_compile_is_cached_as_illegal_with_its_reason(storage_url, compiles):
    bad = double_launch(block=1000)
    with CompileCache(storage_url) as cache:
        first = cache.get_or_compile(bad, H100)
    with CompileCache(storage_url) as cache:
        again = cache.get_or_compile(bad, H200)
    assert len(compiles) == 1
    assert first == again
    assert (again.ctas_per_sm, again.limiter) == (0, "compile")
    assert "power of 2" in again.reason
    (row,) = rows(storage_url)
    assert "power of 2" in row.error and row.smem_bytes == 0


def test_warm_dedupes_keys_and_reports_progress(storage_url, compiles):
    launches = [double_launch(), dot_launch(2), double_launch(), double_launch(block=1000)]
    expected = compile_launch(double_launch(), H100)
    compiles.clear()
    seen: list[tuple[int, int]] = []
    with CompileCache(storage_url) as cache:
        cache.get_or_compile(dot_launch(2), H100)  # already cached: not compiled again
        results = cache.warm(launches, H100, progress=lambda done, total: seen.append((done, total)))
        assert len(compiles) == 3
        assert seen == [(1, 3), (2, 3), (3, 3)]
        assert results[0] == results[2] == expected
        assert results[1].smem_bytes == 16384 and results[3].limiter == "compile"
    with CompileCache(storage_url) as cache:
        seen.clear()
        assert cache.warm(launches, H200, progress=lambda done, total: seen.append((done, total))) == results
        assert seen == [(3, 3)] and len(compiles) == 3


def test_warm_compiles_in_worker_processes(tmp_path, compiles):
    url = f"sqlite:///{tmp_path / 'cache.db'}"
    launches = [double_launch(block=128), double_launch(block=64), double_launch(block=128)]
    with CompileCache(url) as cache:
        results = cache.warm(launches, A100, workers=2)
    assert compiles == []  # the workers compiled, not this process
    assert results == [compile_launch(launch, A100) for launch in launches]
    assert results[0].arch == "sm_80" and results[0].legal
    assert len(rows(url)) == 2
    with pytest.raises(ValueError, match="workers must be at least 1 but got 0"):
        CompileCache(url).warm(launches, A100, workers=0)


def example_rows() -> list[CompiledRecord]:
    return rows(f"sqlite:///{EXAMPLE_DATABASE}")


def key_of(row) -> CompileKey:
    return CompileKey(row.source_hash, row.launch_name, row.config_json, row.arch, row.triton_version)


def lookup_by_source_hash(table: list[CompiledRecord], key: CompileKey) -> ArchUsage | None:
    """The lookup before exact keys: every row of the key's kernel, matched here."""
    for row in table:
        if (row.source_hash, row.arch, row.triton_version) == (key.source_hash, key.arch, key.triton_version) \
                and (row.launch_name, row.config_hash) == (key.launch_name, key.config_hash):
            return ArchUsage(row.arch, row.smem_bytes, row.regs_per_thread, row.spill_bytes, row.error,
                             row.compile_seconds)
    return None


def test_exact_key_lookups_return_what_the_source_hash_lookup_did_for_every_example_row():
    example = example_rows()
    keys = [key_of(row) for row in example]
    assert len(keys) > 300 and all(key.config_hash == row.config_hash for key, row in zip(keys, example))
    old = {key: lookup_by_source_hash(example, key) for key in keys}
    queried = CompileCache.read_only(EXAMPLE_DATABASE)
    everything = queried._lookup(keys)  # several queries: more keys than one holds
    assert everything == old
    assert [everything[key].compile_seconds for key in keys] == [old[key].compile_seconds for key in keys]
    for key in keys:
        assert queried._lookup([key]) == example_fallback()._lookup([key]) == {key: old[key]}
    unknown = dataclasses.replace(keys[0], launch_name="no such launch")
    assert queried._lookup([unknown]) == example_fallback()._lookup([unknown]) == {}
    assert example_fallback() is example_fallback()  # read once per process


def test_copies_from_the_fallback_are_written_in_batches_and_only_once(storage_url, monkeypatch):
    """A fresh database takes the example's records in one transaction per batch (the
    rest when the cache closes), and a cache that finds them stored writes nothing."""
    from tuner.profile import cache as cache_module

    monkeypatch.setattr(cache_module, "COPY_BATCH", 100)
    keys = [key_of(row) for row in example_rows()][:250]
    usages = example_fallback()._lookup(keys)
    with CompileCache(storage_url) as cache:
        for key in keys:
            assert cache._copied(key, usages[key]) == usages[key]
        assert len(rows(storage_url)) == 200  # two batches written, 50 pending
    assert {key_of(row) for row in rows(storage_url)} == set(keys)
    with CompileCache(storage_url) as again:
        for key in keys:
            again._copied(key, usages[key])
        assert again._copies == {}  # all already stored: nothing to write
        assert again._lookup(keys) == usages


def test_a_miss_then_a_write_then_a_read_returns_the_written_row(storage_url):
    key = key_of(example_rows()[0])
    usage = ArchUsage("sm_90", 1024, 40, 0, None, 0.5)
    with CompileCache(storage_url) as cache:
        assert cache._lookup([key]) == {}
        assert cache._store(key, usage) == usage
        assert cache._lookup([key]) == {key: usage}
        theirs = ArchUsage("sm_90", 2048, 80)
        assert cache._store(key, theirs) == usage  # the first row stored wins
    assert len(rows(storage_url)) == 1


def test_batched_writes_survive_closing_and_keep_rows_stored_first(storage_url):
    example = example_rows()
    usages = {key_of(row): ArchUsage(row.arch, row.smem_bytes, row.regs_per_thread, row.spill_bytes, row.error,
                                     row.compile_seconds) for row in example}
    first = next(iter(usages))
    with CompileCache(storage_url) as cache:
        cache._store(first, ArchUsage(first.arch, 1, 2, 3))  # another writer's, before the batch
        stored = cache._store_many(usages)
    assert stored[first] == ArchUsage(first.arch, 1, 2, 3)
    assert {key: stored[key] for key in usages if key != first} == {key: usages[key] for key in usages if key != first}
    with CompileCache(storage_url) as reopened:
        assert reopened._lookup(list(usages)) == stored
    assert len(rows(storage_url)) == len(example)


@pytest.mark.parametrize("url", [
    "not a database url",
    "nosuchdialect://somewhere/db",
    "postgresql+psycopg://postgres@127.0.0.1:1/nothing",
    "sqlite:////nonexistent-directory/for/tuner/cache.db",
])
def test_unusable_urls_raise_storage_error(url):
    with pytest.raises(StorageError, match="cannot open the compile cache") as raised:
        CompileCache(url)
    assert isinstance(raised.value, TunerError)


def test_storage_error_hides_the_password():
    with pytest.raises(StorageError) as raised:
        CompileCache("postgresql+psycopg://postgres:s3cret@127.0.0.1:1/nothing")
    assert "s3cret" not in str(raised.value)
