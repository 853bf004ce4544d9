"""No stray files (issue 38, item 5): commands that name no database keep their compile
cache in the user's cache directory, never ``./results.db``; an unwritable one keeps the
run's compiles in memory, with one warning; and a command reading a table without
``--storage`` finds the one the last ``tuner tune`` in its directory wrote."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from tuner.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], env: dict[str, str]):
    return CliRunner().invoke(main, args, env=env)


def test_simulate_and_profile_write_the_user_cache_not_the_working_directory(tmp_path, monkeypatch) -> None:
    here, cache = tmp_path / "here", tmp_path / "cache"
    here.mkdir()
    monkeypatch.chdir(here)
    env = {"TUNER_CACHE_DIR": str(cache), "TUNER_STORAGE": ""}
    done = _run(["simulate", "llm_decode", "--regime", "light", "--horizon", "3"], env)
    assert done.exit_code == 0, done.output
    profiled = _run(["profile", "--family", "rmsnorm", "--shape", "M=16,N=4096", "-q"], env)
    assert profiled.exit_code == 0, profiled.output
    assert list(here.iterdir()) == [] and (cache / "compiled.db").is_file()


def test_an_unwritable_cache_keeps_compiles_in_memory_and_says_so_once(tmp_path, monkeypatch) -> None:
    here, blocker = tmp_path / "here", tmp_path / "not_a_directory"
    here.mkdir()
    blocker.write_text("a file where the cache directory would be")
    monkeypatch.chdir(here)
    env = {"TUNER_CACHE_DIR": str(blocker / "tuner"), "TUNER_STORAGE": ""}
    done = _run(["simulate", "llm_decode", "--regime", "light", "--horizon", "3"], env)
    assert done.exit_code == 0, done.output
    assert done.stderr.count("no compile cache") <= 1 and list(here.iterdir()) == []
    profiled = _run(["profile", "--family", "rmsnorm", "--shape", "M=16,N=4096", "-q"], env)
    assert profiled.exit_code == 2 and profiled.stderr.count("\n") == 1
    assert "no compile cache to write" in profiled.stderr and "TUNER_CACHE_DIR" in profiled.stderr


def test_reading_without_storage_finds_the_last_tune_here(tmp_path, monkeypatch) -> None:
    here, cache = tmp_path / "here", tmp_path / "cache"
    here.mkdir()
    monkeypatch.chdir(here)
    env = {"TUNER_CACHE_DIR": str(cache), "TUNER_STORAGE": ""}
    none_yet = _run(["table", "show"], env)
    assert none_yet.exit_code == 2 and "no such database file results.db" in none_yet.stderr
    tuned = _run(["tune", str(ROOT / "search_spaces" / "seed_example.yaml"), "--storage", "sqlite:///elsewhere.db",
                  "--horizon", "2", "--trials", "2", "-q"], env)
    assert tuned.exit_code == 0, tuned.output
    shown = _run(["table", "show"], env)
    assert shown.exit_code == 0, shown.output
    assert f"reading sqlite:///{here / 'elsewhere.db'}, which the last tuner tune in this directory wrote" \
        in shown.stderr and "seed_example" in shown.stdout
    named = _run(["table", "show", "--storage", "sqlite:///results.db"], env)  # named: that file, or nothing
    assert named.exit_code == 2 and "no such database file" in named.stderr and "reading" not in named.stderr
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # another directory remembers nothing
    assert _run(["table", "show"], env).exit_code == 2
