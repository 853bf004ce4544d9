"""Units that cannot be misread (issue 38, item 4): a bare number where a time or a size
is expected is refused with the units to use, ``tuner validate`` echoes what every unit
resolved to, and byte counts in errors read in binary units."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tuner.cli import main
from tuner.units import duration_text, size_text

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "search_spaces" / "seed_example.yaml"


def _seed_with(tmp_path: Path, change) -> Path:
    document = yaml.safe_load(SEED.read_text())
    change(document)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _validate(path: Path):
    return CliRunner().invoke(main, ["validate", str(path)])


@pytest.mark.parametrize("where, value, units", [
    (("service", "slo", "deadline"), 60, "units: s, ms, us, ns, min, h"),
    (("service", "slo", "deadline"), "60", "units: s, ms, us, ns, min, h"),
    (("service", "memory", "budget"), 80, "units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"),
    (("regimes", "light", "horizon"), 10.5, "units: s, ms"),
    # expressions in seconds or bytes: a bare constant is the same trap (the fuzz round of issue 38)
    (("families", "stage", "configs", 0, "profile", "latency"), 10, "units: s, ms, us, ns, min, h"),
    (("families", "stage", "configs", 1, "profile", "workspace"), "2", "units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"),
    (("service", "memory", "per_request"), 4, "units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"),
])
def test_a_bare_number_for_a_time_or_a_size_is_refused_naming_the_units(tmp_path, where, value, units) -> None:
    def change(document):
        node = document
        for part in where[:-1]:
            node = node[part]
        node[where[-1]] = value
    result = _validate(_seed_with(tmp_path, change))
    assert result.exit_code == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    shown = repr(value) if isinstance(value, str) else value
    key = ".".join(f"[{part}]" if isinstance(part, int) else part for part in where).replace(".[", "[")
    assert f"{key}: {shown} has no unit: write it with one, e.g. '{value} " in line and units in line


def test_a_latency_table_point_without_its_unit_is_refused(tmp_path) -> None:
    def change(document):
        document["families"]["stage"]["configs"][0]["profile"]["latency"] = {"batch": {1: "8 ms", 32: 0.02}}
    result = _validate(_seed_with(tmp_path, change))
    assert result.exit_code == 2
    assert "families.stage.configs[0].profile.latency.batch.32: 0.02 has no unit" in result.stderr


def test_zero_needs_no_unit(tmp_path) -> None:
    result = _validate(_seed_with(tmp_path, lambda d: d["service"]["memory"].update(fixed=0)))
    assert result.exit_code == 0, result.output


def test_validate_echoes_what_every_unit_resolved_to() -> None:
    """The seed example as written: deadline 100 ms, budget 72 GiB, fixed 40 GiB, 4 GiB per
    request; 60 s windows with the default 10% warm-up, 6 s."""
    result = _validate(SEED)
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())  # lines wrap at the terminal's width
    assert " SLO: deadline 100 ms; capacity at 90% of requests meeting it " in text
    assert " memory: budget 72 GiB, fixed 40 GiB, 4 GiB per request " in text
    assert " regime heavy: 720 req/s, 1 min windows (the first 6 s served but not judged) " in text


def test_a_budget_error_reads_in_binary_units(tmp_path) -> None:
    result = _validate(_seed_with(tmp_path, lambda d: d["service"]["memory"].update(budget="24 GiB")))
    assert result.exit_code == 2
    assert result.stderr.strip().endswith("service.memory.fixed: 40 GiB exceed the budget of 24 GiB")


@pytest.mark.parametrize("seconds, text", [(0.1, "100 ms"), (60.0, "1 min"), (4e-6, "4 us"), (1.5, "1.5 s"),
                                           (0.0, "0 ns")])
def test_durations_take_the_largest_unit_above_one(seconds, text) -> None:
    assert duration_text(seconds) == text


@pytest.mark.parametrize("nbytes, text", [(4 * 2**30, "4 GiB"), (80e9, "74.51 GiB"), (131072, "128 KiB"),
                                          (12, "12 B")])
def test_sizes_take_the_largest_binary_unit_above_one(nbytes, text) -> None:
    assert size_text(nbytes) == text
