"""Shared fixtures: small problems built in code, so each test states the numbers it relies on."""

from __future__ import annotations

import copy
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import create_engine, text

from tuner.problem import Problem, load_problem

ROOT = Path(__file__).resolve().parent.parent

#: Commands without --storage keep their compile cache and last-tune notes in the user's
#: cache directory (tuner.profile.user_cache): the suite's own, so no test writes outside
#: a temporary directory (subprocesses inherit it).
os.environ["TUNER_CACHE_DIR"] = tempfile.mkdtemp(prefix="tuner-test-cache-")

try:  # the fuzz suite's profiles (tests/test_fuzz.py); hypothesis comes with the `test` extra
    from hypothesis import HealthCheck, Phase, settings
except ImportError:  # pragma: no cover - only tests/test_fuzz.py needs it
    pass
else:
    _SLOW_IS_FINE = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
    #: The default: the same cases every run (a fixed seed), few of them and no shrinking, so the
    #: whole fuzz suite stays under a minute on the 2-core machine even when a case fails.
    settings.register_profile("ci", max_examples=20, derandomize=True, database=None, deadline=60_000,
                              phases=(Phase.explicit, Phase.generate), suppress_health_check=_SLOW_IS_FINE,
                              print_blob=False)
    #: By hand, `HYPOTHESIS_PROFILE=long pytest tests/test_fuzz.py`: random cases, many of them,
    #: failures shrunk to a minimal input.
    settings.register_profile("long", max_examples=400, derandomize=False, database=None, deadline=None,
                              suppress_health_check=_SLOW_IS_FINE, print_blob=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
SEED_EXAMPLE = ROOT / "search_spaces" / "seed_example.yaml"


def single_stage(
    latency: str = "10 ms",
    *,
    slots: int = 1,
    executors: int | None = None,
    rate: float = 50.0,
    jitter: dict[str, Any] | None = None,
    deadline: str = "1 s",
    horizon: str = "100 s",
    sm: float = 0.1,
) -> dict[str, Any]:
    """One operator, one request per batch, ``slots`` requests admitted by memory:
    the M/G/c queue of the closed-form tests (kernels small enough not to interfere)."""
    return {
        "name": "single_stage",
        "service": {
            "batching": "dynamic",
            "max_batch": 1,
            "executors": executors or slots,
            "memory": {"budget": f"{slots} GiB", "fixed": 0, "per_request": "1 GiB"},
            "operators": [{"name": "stage", "family": "stage"}],
            "slo": {"deadline": deadline},
            "jitter": jitter or {"kind": "deterministic"},
        },
        "families": {
            "stage": {
                "space": {"variant": ["only"]},
                "configs": [{"name": "only", "params": {"variant": "only"},
                             "profile": {"latency": latency, "sm": sm, "dram": sm / 2}}],
            }
        },
        "regimes": {"steady": {"arrivals": {"process": "poisson", "rate": rate}, "horizon": horizon}},
    }


def schema_3_fields(**changes: Any) -> dict[str, Any]:
    """The provenance fields schema version 3 added to a :class:`~tuner.store.TableRow`,
    as a three-seed goodput study of a ~4 req/s regime writes them: the rates each seed's
    judged window realised, a 6 s warm-up, no overloaded seed, a 90% attainment target and
    capacities at the SLO (tuned above THE baseline, and above one config per operator).
    A fresh dict (and list) each call; ``changes`` override fields."""
    fields: dict[str, Any] = dict(
        realized_rates_rps=[3.9, 4.2, 4.1], warmup_s=6.0, overloaded_seeds=0, baseline_overloaded_seeds=0,
        objective="goodput", attainment_target=0.9, capacity_rps=4.6, capacity_ci_rps=0.3,
        baseline_capacity_rps=2.8, capacity_delta_ci_rps=0.2, one_config_capacity_rps=2.1,
    )
    fields.update(changes)
    return fields


@pytest.fixture
def write_problem(tmp_path: Path):
    """Write a problem dict as YAML under tmp_path and load it."""

    def write(document: dict[str, Any], name: str = "problem.yaml") -> Problem:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(copy.deepcopy(document), sort_keys=False))
        return load_problem(path)

    return write


@pytest.fixture(scope="session")
def seed_example() -> Problem:
    return load_problem(SEED_EXAMPLE)


POSTGRES = os.environ.get("TUNER_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
#: Set by .ci/run (which starts the server): an unreachable server then fails the tests.
REQUIRE_POSTGRES = os.environ.get("TUNER_REQUIRE_POSTGRES") == "1"


@pytest.fixture(scope="session")
def postgres_admin():
    """An AUTOCOMMIT engine on the local PostgreSQL server; skips when it is unreachable
    (fails instead under ``TUNER_REQUIRE_POSTGRES=1``)."""
    engine = create_engine(POSTGRES, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 2})
    try:
        with engine.connect():
            pass
    except Exception as e:  # noqa: BLE001 - any failure to reach the server skips
        engine.dispose()
        reason = f"PostgreSQL at {POSTGRES} unreachable: {str(e).splitlines()[0]}"
        if REQUIRE_POSTGRES:
            pytest.fail(reason)
        pytest.skip(reason)
    yield engine
    engine.dispose()


@pytest.fixture
def postgres_url(postgres_admin):
    """A fresh PostgreSQL database, dropped after the test."""
    name = f"tuner_test_{uuid.uuid4().hex[:12]}"
    with postgres_admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    yield postgres_admin.url.set(database=name).render_as_string(hide_password=False)
    with postgres_admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request, tmp_path):
    """A fresh, empty database: a SQLite file, or a throw-away PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tuner.db'}"
    return request.getfixturevalue("postgres_url")


def pytest_report_header() -> str:
    """Which build of the simulator core this run tests (tests/test_native.py reruns the
    simulator's tests on the other)."""
    from tuner.sim import BUILD

    return f"tuner simulator core: {BUILD}"
