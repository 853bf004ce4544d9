"""The dashboard: ``tuner report --html``, bad storage URLs, and the served pages in a real
headless Chromium (Debian's /usr/bin/chromium, driven by playwright-python).

The database is tuned once per session (``tuner tune`` on small problems, schema 2: one
row per regime, operator and shape bucket) and copied for each test."""

from __future__ import annotations

import re
import shutil
import signal
import sqlite3
import threading
from pathlib import Path
from urllib.error import HTTPError
from urllib.request import urlopen

import pytest
from click.testing import CliRunner

from tuner.cli import main
from tuner.dashboard.render import study_body

ROOT = Path(__file__).resolve().parents[1]
#: (problem, extra ``tuner tune`` arguments) tuned into the session's database: the seed
#: example (one bucket; lean wins bursty and heavy, fast light), toy_embedder (operators
#: with 15 M buckets: its studies search 45 cells) and embedding_instances' light regime
#: (built-in kernel families: compiled resources in the database's compile cache).
TUNED = (("seed_example", ["--trials", "4", "--horizon", "2"]),
         ("toy_embedder", ["--trials", "4", "--horizon", "1"]),
         ("embedding_instances", ["--trials", "2", "--horizon", "0.5", "--regimes", "light"]))
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def _regimes(db: Path) -> set[tuple[str, str]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return set(conn.execute("SELECT DISTINCT problem, regime FROM tuner_configs"))


@pytest.fixture(scope="session")
def tuned(tmp_path_factory) -> Path:
    """A tuner database written by ``tuner tune`` (never changed: tests view copies)."""
    import os

    path = tmp_path_factory.mktemp("tuned") / "results.db"
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for problem, args in TUNED:
            result = CliRunner().invoke(main, ["tune", f"search_spaces/{problem}.yaml", "--storage",
                                               f"sqlite:///{path}", *args])
            assert result.exit_code == 0, result.output
    finally:
        os.chdir(cwd)
    return path


@pytest.fixture
def db(tuned: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "results.db"
    shutil.copy(tuned, copy)
    return copy


def test_report_html_is_self_contained_and_lists_every_regime(db: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    before = db.read_bytes()
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", "--html", str(out), "--storage", f"sqlite:///{db}",
                                       "--problem", "seed_example"])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    for problem, regime in _regimes(db):
        assert f'data-problem="{problem}" data-regime="{regime}"' in text
    assert "Plotly" in text and "<script src=" not in text  # plotly.js inline, nothing fetched
    assert "plotly-graph-div" in text and "goodput (req\\u002fs)" in text
    assert "per-bucket isolated-fastest" in text  # THE baseline, named as such everywhere
    assert "capacity at 90% SLO attainment" in text and "<div class=realised>realised " in text
    assert not re.search(r"(?<!per-bucket )isolated-fastest (assignment|goodput|<)", text)
    assert db.read_bytes() == before  # opened read-only


@pytest.mark.parametrize("quiet", [False, True])
def test_report_logs_progress_lines_on_a_non_terminal_and_none_with_quiet(db: Path, tmp_path: Path, monkeypatch,
                                                                          quiet: bool) -> None:
    """A report simulates for minutes: in a log (stderr no terminal) a line every few
    seconds (here every part) counts the parts done and names the next; -q silences it."""
    from tuner.cli.progress import TerminalProgress

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(TerminalProgress, "INTERVAL_S", 0.0)
    result = CliRunner().invoke(main, ["report", "--html", str(tmp_path / "r.html"), "--storage", f"sqlite:///{db}",
                                       "--problem", "seed_example", *(["-q"] if quiet else [])])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    if quiet:
        assert not lines
        return
    assert lines[0] == f"tuner report: html: 0/{len(lines)} parts, config table", lines
    assert all(line.startswith(f"tuner report: html: {done}/{len(lines)} parts, seed_example")
               for done, line in enumerate(lines[1:], 1)), lines
    assert ", ETA " in lines[-1]


@pytest.mark.parametrize("url", ["sqlite:///{tmp}/README.md", "not a url", "sqlite:///{tmp}/empty.db",
                                 "sqlite:///{tmp}/missing.db"])
def test_bad_storage_is_one_line_exit_2(tmp_path: Path, url: str) -> None:
    (tmp_path / "README.md").write_text("# not a database\n")
    sqlite3.connect(tmp_path / "empty.db").execute("CREATE TABLE other (x)").connection.close()
    url = url.format(tmp=tmp_path)
    for args in (["report", "--html", str(tmp_path / "r.html")], ["dashboard", "--port", "0"]):
        result = CliRunner().invoke(main, [*args, "--storage", url])
        assert result.exit_code == 2, result.output
        assert result.output.startswith("tuner: error: ") and result.output.count("\n") == 1, result.output
    assert not (tmp_path / "missing.db").exists()


def test_a_schema_1_database_is_refused_in_one_line(db: Path, tmp_path: Path) -> None:
    """A table from before shape buckets (one config per operator) is never read silently."""
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE tuner_schema SET version = 1")
    conn.close()
    before = db.read_bytes()
    for args in (["report", "--html", str(tmp_path / "r.html")], ["dashboard", "--port", "0"]):
        result = CliRunner().invoke(main, [*args, "--storage", f"sqlite:///{db}"])
        assert result.exit_code == 2, result.output
        assert result.output.startswith("tuner: error: ") and result.output.count("\n") == 1, result.output
        assert "schema version 1 found" in result.output and "tune again" in result.output
    assert db.read_bytes() == before


@pytest.fixture
def served(db: Path, monkeypatch):
    monkeypatch.chdir(ROOT)
    from tuner.dashboard import Dashboard
    from tuner.dashboard.server import make_server

    server = make_server(Dashboard(f"sqlite:///{db}", ROOT / "search_spaces"), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server
    finally:
        server.shutdown()
        server.server_close()


def test_server_error_page_is_not_a_stack_trace(served, db: Path) -> None:
    base, _ = served
    with pytest.raises(HTTPError) as info:
        urlopen(f"{base}/regime/nope/nothing", timeout=10)
    body = info.value.read().decode()
    assert info.value.code == 404 and "no rows for nope/nothing" in body and "Traceback" not in body
    db.write_bytes(b"garbage, no longer a database" * 10)  # the DB breaks under a running server
    with pytest.raises(HTTPError) as info:
        urlopen(f"{base}/", timeout=10)
    body = info.value.read().decode()
    assert info.value.code == 500 and 'class="error"' in body and "Traceback" not in body


def test_dashboard_in_headless_chromium(served, db: Path, tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/setup-env.sh --tests as root (it apt-installs chromium)")
    from playwright.sync_api import sync_playwright

    base, _ = served
    regimes = _regimes(db)
    errors: list[str] = []
    with sqlite3.connect(db) as conn:  # 4 trials leave every bucket as the baseline's: make one differ
        rows = conn.execute("SELECT bucket, config FROM tuner_configs WHERE problem = 'toy_embedder' "
                            "AND regime = 'heavy' AND op = 'qkv' ORDER BY bucket").fetchall()
        assert rows[3][1] == "persistent" and {c for _, c in rows} == {"persistent"}, rows
        conn.execute("""UPDATE tuner_configs SET config = 'grid', params = '{"schedule": "grid"}'
                        WHERE problem = 'toy_embedder' AND regime = 'heavy' AND op = 'qkv' AND bucket = 3""")
    conn.close()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(base + "/", timeout=20_000)
            lines = page.locator("table.regimes tbody tr").all()
            shown = [(r.get_attribute("data-problem"), r.get_attribute("data-regime")) for r in lines]
            assert sorted(shown) == sorted(regimes)  # one line per regime, whatever its buckets
            assert page.locator("section.problem table.matrix").count() == len({p for p, _ in regimes})
            assert "simulated" in page.inner_text("h1")
            heads = page.locator("table.regimes thead th").all_inner_texts()
            assert all(h.strip() for h in heads) and "per-bucket isolated-fastest" in heads
            assert "capacity at 90% SLO attainment (simulated, req/s)" in heads and "tuned ± 95% CI" in heads
            heavy = page.locator('tr[data-problem="seed_example"][data-regime="heavy"]')
            assert "tuned − baseline +" in heavy.locator("td.ratio").get_attribute("title")
            seed = page.locator('table.matrix[data-problem="seed_example"]')
            assert seed.locator('tr[data-regime="heavy"] td[data-op="stage"]').inner_text() == "variant fast→lean"
            assert seed.locator('tr[data-regime="light"] td[data-op="stage"]').inner_text() == "= baseline"
            toy = page.locator('table.matrix[data-problem="toy_embedder"]')
            assert toy.locator('th[data-op="qkv"]').inner_text() == "qkv\n(15 buckets)"
            qkv = toy.locator('tr[data-regime="heavy"] td[data-op="qkv"]')  # bucket 3 made grid above
            assert qkv.locator("summary").inner_text() == "M5..8: schedule persistent→grid"
            assert not qkv.locator("ul.buckets").is_visible()
            qkv.locator("summary").click()  # the per-bucket configs open on demand
            assert qkv.locator("ul.buckets li").all_inner_texts() == [
                "M..4 = baseline", "M5..8 schedule persistent→grid", "M9..16384 = baseline"]
            assert page.evaluate("document.documentElement.scrollWidth") <= 1400  # no sideways scrolling
            # the first screen: the problem with the largest significant effect, its verdicts in words
            sections = page.locator("section.problem").evaluate_all("s => s.map(e => e.dataset.problem)")
            assert sections[0] == "seed_example", sections
            verdict = page.locator('section[data-problem="seed_example"] ul.verdicts li[data-regime="heavy"]')
            assert re.match(r"heavy: \+\d+% capacity \(\d+ vs \d+ req/s\)", verdict.inner_text()), verdict.inner_text()
            assert "memory: lean admits 2× more requests at once (8 vs 4" in verdict.inner_text()
            assert verdict.bounding_box()["y"] < 1000  # on the first screen
            assert "e+" not in page.inner_text("table.regimes")  # no exponents in the intervals
            page.screenshot(path=str(tmp_path / "index.png"), full_page=True)

            page.click('tr[data-problem="seed_example"][data-regime="heavy"] td.regime a')
            page.wait_for_selector(".main-svg", timeout=20_000)
            page.wait_for_selector("g.scatterlayer g.trace path.js-line", state="attached", timeout=20_000)
            assert page.locator("g.scatterlayer g.trace").count() >= 4  # M and R, tuned and baseline
            path = page.locator("g.scatterlayer g.trace path.js-line").first.get_attribute("d")
            assert path and len(path) > 20
            page.screenshot(path=str(tmp_path / "regime.png"), full_page=True)
            for row in page.locator("table.assignment tbody tr").all():  # tuned and baseline side by side
                tops = [cell.bounding_box()["y"] for cell in row.locator("td.configs").all()]
                assert len(tops) == 2 and tops[0] == tops[1], tops

            assert page.locator("g.scatterlayer g.trace").count() >= 6  # M, R and queue; tuned and baseline
            assert "∫M dt (GiB·s)" in page.inner_text("table.integrals")
            # why: the stage's tuned config (lean) alone adds most of the heavy regime's goodput
            page.wait_for_selector("g.waterfalllayer g.trace", state="attached", timeout=20_000)
            stage = page.locator("table.attribution tbody tr").first.inner_text().split("\t")
            assert stage[:4] == ["stage", "all", "fast", "lean"] and float(stage[6].split()[0]) > 300, stage
            assert "per-bucket isolated-fastest" in page.inner_text("table.attribution thead")

            page.goto(base + "/problem/seed_example", timeout=60_000)
            page.wait_for_selector("g.scatterlayer g.trace path.js-line", state="attached", timeout=20_000)
            assert page.locator("text=offered load (req/s)").count() > 0  # the x axis title, drawn in the SVG
            # the seed example's lean variant overtakes fast where fast saturates (c/S = 500 req/s)
            assert ("pulls ahead of the per-bucket isolated-fastest assignment between 414 and 536 req/s"
                    in page.inner_text(".crossovers"))
            assert page.locator("text=per-bucket isolated-fastest").count() > 0  # the baseline curve's legend
            assert page.locator("g.errorbar").count() > 0  # seeds give confidence intervals
            assert re.search(r"at 536 req/s: \+\d+ ± \d+ req/s", page.inner_text(".crossovers"))  # no 1e+02
            _assert_no_overlap(page, "g.annotation")
            page.screenshot(path=str(tmp_path / "problem.png"), full_page=True)

            page.goto(base + "/study/toy_embedder/heavy", timeout=20_000)
            page.wait_for_selector("g.scatterlayer g.trace", state="attached", timeout=20_000)
            summary = page.inner_text(".study-summary")
            assert "4 trials" in summary and "45 parameter(s)" in summary and "qkv (15 buckets)" in summary
            # its 4 trials all scored the same: no importance chart (it drew 20 identical full bars)
            assert page.locator(".plotly-graph-div").count() == 1  # the history only
            assert page.inner_text("p.no-importance") == (
                "All 4 complete trials scored the same (406): no importance to show.")
            page.screenshot(path=str(tmp_path / "study.png"), full_page=True)

            page.set_viewport_size({"width": 1000, "height": 900})  # a narrower window: the page still fits
            for path, ready in (("/", "section.problem"), ("/problem/seed_example", "g.annotation"),
                                ("/regime/seed_example/heavy", "g.waterfalllayer g.trace")):
                page.goto(base + path, timeout=60_000)
                page.wait_for_selector(ready, state="attached", timeout=20_000)
                assert page.evaluate("document.documentElement.scrollWidth") <= 1000, path
                _assert_no_overlap(page, "g.annotation")
                page.screenshot(path=str(tmp_path / f"{path.strip('/').replace('/', '-') or 'index'}-1000.png"),
                                full_page=True)
        finally:
            browser.close()
    assert not errors, errors
    assert (tmp_path / "regime.png").stat().st_size > 10_000


def _assert_no_overlap(page, selector: str) -> None:
    """No two of the elements (plot labels) cover one another."""
    boxes = [(b, el.text_content()) for el in page.locator(selector).all() if (b := el.bounding_box())]
    for i, (a, text_a) in enumerate(boxes):
        for b, text_b in boxes[i + 1:]:
            apart = (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                     or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])
            assert apart, f"{text_a!r} overlaps {text_b!r}"


def _get(url: str) -> int:
    with urlopen(url, timeout=120) as response:
        response.read()
        return response.status


def test_pages_never_write_the_database(served, db: Path) -> None:
    import json

    from tuner.dashboard.server import make_optuna_dashboard_server, serve_in_background

    base, _ = served
    before = db.read_bytes()
    extra = make_optuna_dashboard_server(f"sqlite:///{db}", "127.0.0.1", 0)
    serve_in_background(extra)
    try:
        for path in ("/", "/study/toy_embedder/heavy", "/study/seed_example/light", "/regime/seed_example/bursty"):
            assert _get(base + path) == 200
        optuna_base = f"http://127.0.0.1:{extra.server_address[1]}"
        with urlopen(optuna_base + "/api/studies", timeout=30) as response:
            studies = json.load(response)["study_summaries"]
        assert {s["study_name"] for s in studies} >= {"tuner:toy_embedder:heavy", "tuner:seed_example:heavy"}
        assert _get(f"{optuna_base}/api/studies/{studies[0]['study_id']}") == 200
    finally:
        extra.shutdown()
        extra.server_close()
    assert db.read_bytes() == before
    assert not Path(f"{db}-journal").exists()


def test_into_studies_saves_figures_and_a_note_for_optuna_dashboard(db: Path, monkeypatch) -> None:
    import optuna
    from optuna_dashboard import get_note
    from optuna_dashboard._custom_plot_data import get_plotly_graph_objects

    monkeypatch.chdir(ROOT)
    url = f"sqlite:///{db}"
    result = CliRunner().invoke(main, ["report", "--into-studies", "--storage", url, "--problem", "seed_example",
                                       "--seeds", "2", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert "saved into 3 studies" in result.output
    study = optuna.load_study(study_name="tuner:seed_example:heavy", storage=url)
    note = get_note(study)
    assert note.startswith("## tuner: seed_example / heavy") and "pulls ahead" in note and "∫M dt" in note
    assert "| stage | lean\\* | fast | declared |" in note  # tuned, marked, beside the per-bucket baseline
    assert "per-bucket isolated-fastest: " in note and "one config per operator" in note
    assert "- capacity at 90% SLO attainment (req/s): tuned " in note and "depends on the window" in note
    saved = get_plotly_graph_objects(study._storage.get_study_system_attrs(study._study_id))
    assert set(saved) == {"tuner-goodput-vs-load", "tuner-timelines", "tuner-attribution"}
    untouched = optuna.load_study(study_name="tuner:toy_embedder:heavy", storage=url)
    assert get_note(untouched) == ""


def test_a_busy_port_or_a_bad_host_is_one_line_naming_the_option() -> None:
    import socket

    example = f"sqlite:///{ROOT / 'results.db.example'}"
    args = ["dashboard", "--storage", example, "--no-optuna-dashboard", "--no-warm"]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(main, [*args, "--port", str(port)])
    assert result.exit_code == 2
    assert result.output == (f"tuner: error: --port {port}: address already in use; pick another or use --port 0 "
                             "(any free port)\n")
    for host in ("192.0.2.1", "no-such-host.invalid"):  # TEST-NET-1: no address of this machine; no such name
        result = CliRunner().invoke(main, [*args, "--host", host, "--port", "0"])
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert result.output.startswith(f"tuner: error: --host {host}: not an address of this machine ("), result.output


def test_report_needs_something_to_write(db: Path) -> None:
    result = CliRunner().invoke(main, ["report", "--storage", f"sqlite:///{db}"])
    assert result.exit_code == 2 and "--html OUT and/or --into-studies" in result.output


def test_dashboard_keeps_serving_while_tune_writes_the_same_file(served, db: Path) -> None:
    """A reader with mode=ro waits out the writer's locks; no page may fail meanwhile."""
    import subprocess
    import sys
    import time

    base, _ = served
    log = db.with_suffix(".tune.log")
    with log.open("w") as out:
        tune = subprocess.Popen(
            [sys.executable, "-m", "tuner", "tune", "search_spaces/toy_embedder.yaml", "--storage", f"sqlite:///{db}",
             "--fresh", "--trials", "12", "--horizon", "2"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    statuses: list[int] = []
    deadline = time.monotonic() + 300
    try:
        while tune.poll() is None and time.monotonic() < deadline:
            for path in ("/", "/study/toy_embedder/heavy", "/study/seed_example/heavy"):
                try:
                    statuses.append(_get(base + path))
                except HTTPError as exc:  # an error page: record it, keep going
                    statuses.append(exc.code)
                    print(path, exc.code, exc.read().decode()[-300:])  # shown when the test fails
            time.sleep(0.05)
    finally:
        tune.kill()
        tune.wait()
    assert tune.returncode == 0, log.read_text()
    assert len(statuses) >= 9 and set(statuses) == {200}, statuses
    assert "12 trials" in urlopen(base + "/study/toy_embedder/heavy", timeout=30).read().decode()


def test_a_regime_tuned_like_the_baseline_shows_both_labelled(db: Path, monkeypatch) -> None:
    from tuner.dashboard import Dashboard

    monkeypatch.chdir(ROOT)
    board = Dashboard(f"sqlite:///{db}", ROOT / "search_spaces")
    rows = [r for r in board.rows() if r.problem == "seed_example" and r.regime == "light"]
    assert [r.config for r in rows] == ["fast"]  # the isolated-fastest variant is the tuned one here
    tuned, baseline = board.timelines("seed_example", "light", rows)
    assert (tuned.label, baseline.label) == ("tuned", "per-bucket isolated-fastest")
    assert tuned.metrics == baseline.metrics  # same assignment, same seed: same simulation


@pytest.mark.parametrize(("args", "message"), [
    (["dashboard", "--port", "70000"], "--port: '70000' is above the maximum 65535"),
    (["report", "--into-studies"], "--into-studies writes to the database: name it with --storage URL"),
    (["report", "--html", "r.html", "--problem", "nope", "--storage", "{db}"], "--problem nope: not in the table"),
])
def test_bad_dashboard_options_exit_2(db: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, [a.format(db=f"sqlite:///{db}") for a in args], env={"TUNER_STORAGE": None})
    assert result.exit_code == 2 and message in result.output, result.output


def test_a_database_path_with_url_characters_opens_read_only(tuned: Path, tmp_path: Path, monkeypatch) -> None:
    from tuner.dashboard import Dashboard

    monkeypatch.chdir(ROOT)
    odd = tmp_path / "run #3 &x"
    odd.mkdir()
    shutil.copy(tuned, odd / "results.db")
    board = Dashboard(f"sqlite:///{odd / 'results.db'}", ROOT / "search_spaces")
    assert {r.problem for r in board.rows()} >= {"seed_example", "toy_embedder"}
    assert "4 trials" in study_body(board, "toy_embedder", "heavy", board.rows())
    storage = board.study_storage()
    with pytest.raises(Exception) as info:  # optuna wraps SQLite's refusal
        storage.set_study_user_attr(storage.get_study_id_from_name("tuner:toy_embedder:heavy"), "x", 1)
    assert _refused(info.value, "readonly database")
    board.close()
    assert (odd / "results.db").read_bytes() == tuned.read_bytes()


def _refused(exc: BaseException | None, reason: str) -> bool:
    """Whether the database's own refusal ``reason`` is in the chain of ``exc``."""
    chain = []
    while exc is not None:
        chain.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return any(reason in text for text in chain)


def test_postgresql_is_viewed_through_read_only_sessions(postgres_admin, tmp_path: Path, monkeypatch) -> None:
    """Tune the seed example into a throw-away PostgreSQL database; the dashboard reads it,
    and a write through its connections is refused by the server itself."""
    import uuid

    from sqlalchemy import text

    from tuner.dashboard import Dashboard

    monkeypatch.chdir(ROOT)
    name = f"tuner_test_{uuid.uuid4().hex[:12]}"
    with postgres_admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = postgres_admin.url.set(database=name).render_as_string(hide_password=False)
    try:
        result = CliRunner().invoke(main, ["tune", "search_spaces/seed_example.yaml", "--storage", url,
                                           "--trials", "2", "--horizon", "1"])
        assert result.exit_code == 0, result.output
        board = Dashboard(url, ROOT / "search_spaces")
        rows = board.rows()
        assert {(r.problem, r.regime) for r in rows} == {("seed_example", r) for r in ("light", "bursty", "heavy")}
        assert "trials: 2 complete" in study_body(board, "seed_example", "heavy", rows)
        storage = board.study_storage()
        with pytest.raises(Exception) as info:  # optuna wraps the server's refusal
            storage.set_study_user_attr(storage.get_study_id_from_name("tuner:seed_example:heavy"), "x", 1)
        assert _refused(info.value, "read-only transaction")
        board.close()
    finally:
        with postgres_admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_viewing_creates_no_compile_cache_file(db: Path, tmp_path: Path, monkeypatch) -> None:
    """Problems with built-in kernel families read compiled resources from the viewed
    database and results.db.example; loading them as tune does would create results.db
    in the working directory, which the next `tuner dashboard` would then open."""
    from tuner.dashboard import Dashboard

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("TUNER_STORAGE", raising=False)
    board = Dashboard(f"sqlite:///{db}", ROOT / "search_spaces", jobs=1)
    rows = [r for r in board.rows() if r.problem == "embedding_instances" and r.regime == "light"]
    tuned, baseline = board.timelines("embedding_instances", "light", rows)
    assert tuned.metrics.completed > 0 and baseline.metrics.completed > 0
    board.close()
    assert list(work.iterdir()) == []


def test_an_edited_problem_file_is_simulated_afresh(db: Path, tmp_path: Path) -> None:
    import os

    from tuner.dashboard import Dashboard

    problems = tmp_path / "problems"
    problems.mkdir()
    source = (ROOT / "search_spaces" / "seed_example.yaml").read_text()
    (problems / "seed_example.yaml").write_text(source)
    board = Dashboard(f"sqlite:///{db}", problems, sweep_points=3, sweep_seeds=1, sweep_max_horizon_s=1.0)
    rows = board.rows()
    before = board.sweep("seed_example", rows).baseline.means
    edited = problems / "seed_example.yaml"
    edited.write_text(source.replace("profile: {latency: 8 ms, workspace: 2 GiB", "profile: {latency: 9 ms, workspace: 2 GiB"))
    stat = edited.stat()
    os.utime(edited, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a later mtime even on coarse clocks
    after = board.sweep("seed_example", rows).baseline.means  # still fast, now 9 ms: 444 instead of 500 req/s
    assert after != before
    board.close()


def test_a_table_tuned_from_another_version_of_the_file_is_flagged_on_its_pages(db: Path, tmp_path: Path) -> None:
    """The rows store the hash of the file they were tuned from; the pages simulate the
    file as it is now, so a changed file (here one comment: a changed device.factors
    would reprice every kernel) gets one warning on the problem's and each regime's page."""
    from tuner.dashboard import Dashboard
    from tuner.dashboard.render import problem_body, regime_body

    problems = tmp_path / "problems"
    problems.mkdir()
    source = (ROOT / "search_spaces" / "seed_example.yaml").read_text()
    (problems / "seed_example.yaml").write_text(source)
    (problems / "traces").symlink_to(ROOT / "search_spaces" / "traces")
    board = Dashboard(f"sqlite:///{db}", problems, sweep_points=3, sweep_seeds=1, sweep_max_horizon_s=1.0)
    rows = board.rows()
    warning = "the table was tuned from another version of"
    assert warning not in problem_body(board, "seed_example", rows)
    assert warning not in regime_body(board, "seed_example", "heavy", rows)
    board.close()

    (problems / "seed_example.yaml").write_text(source + "# edited after tuning\n")
    board = Dashboard(f"sqlite:///{db}", problems, sweep_points=3, sweep_seeds=1, sweep_max_horizon_s=1.0)
    rows = board.rows()
    assert problem_body(board, "seed_example", rows).count(warning) == 1
    assert regime_body(board, "seed_example", "heavy", rows).count(warning) == 1
    board.close()


def test_a_problem_file_not_named_after_its_name_is_found_by_the_path_its_studies_recorded(tmp_path) -> None:
    """A user's qwen25_7b_mykernel.yaml says `name: ...` otherwise: the dashboard used to
    say "No problem file <dir>/<name>.yaml here" and draw no plots; the studies record
    the file they were tuned from, and that is where it looks next."""
    from tuner.dashboard import Dashboard

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "traces").symlink_to(ROOT / "search_spaces" / "traces")
    (mine / "my_seed_variant.yaml").write_text((ROOT / "search_spaces" / "seed_example.yaml").read_text())
    db = tmp_path / "r.db"
    result = CliRunner().invoke(main, ["tune", str(mine / "my_seed_variant.yaml"), "--storage", f"sqlite:///{db}",
                                       "--trials", "2", "--horizon", "1", "--regimes", "light", "-q"])
    assert result.exit_code == 0, result.output
    empty = tmp_path / "problems"
    empty.mkdir()
    board = Dashboard(f"sqlite:///{db}", empty)
    assert board.recorded_path("seed_example") == (mine / "my_seed_variant.yaml").resolve()
    assert board.problem("seed_example") is not None and board.problem("no_such_problem") is None
    board.close()


def test_rows_become_assignments_through_the_table_codec(db: Path, tmp_path: Path, monkeypatch) -> None:
    """A regime's rows are one Assignment (Assignment.from_rows); the baseline drawn beside
    it is THE baseline, the per-bucket isolated-fastest one. A problem file whose buckets
    no longer match the rows gets the table line but no simulated plots."""
    from tuner.dashboard import Dashboard
    from tuner.dashboard.index import index_body
    from tuner.dashboard.render import regime_body
    from tuner.problem import load_problem
    from tuner.problem.assignment import Assignment
    from tuner.search import PER_BUCKET, JointSpace

    monkeypatch.chdir(ROOT)
    board = Dashboard(f"sqlite:///{db}", ROOT / "search_spaces")
    rows = [r for r in board.rows() if r.problem == "toy_embedder" and r.regime == "bursty"]
    assert len(rows) == 46 and {r.bucket_bounds is None for r in rows} == {True, False}  # attn has one bucket
    problem = board.problem("toy_embedder")
    assert board.assignment(problem, rows) == Assignment.from_rows(problem, rows, "test")
    assert board.baseline(problem) == PER_BUCKET.assignment(JointSpace.of(load_problem(problem.path)))
    assert [r.baseline_config for r in rows] == [c.name for _, c in board.baseline(problem).cells()]
    board.close()

    problems = tmp_path / "problems"
    problems.mkdir()
    source = (ROOT / "search_spaces" / "toy_embedder.yaml").read_text()
    (problems / "toy_embedder.yaml").write_text(source.replace(
        "- {name: qkv,  family: gemm, shape: {M: batch * tokens, N: 3 * d, K: d}, repeat: 24}",
        "- {name: qkv,  family: gemm, shape: {M: batch * tokens, N: 3 * d, K: d}, repeat: 24, buckets: {M: [64, 16384]}}"))
    board = Dashboard(f"sqlite:///{db}", problems)
    assert board.problem("toy_embedder") is not None and board.assignment(board.problem("toy_embedder"), rows) is None
    all_rows = board.rows()
    assert 'data-regime="bursty"' in index_body(board, all_rows)
    assert "no longer matches the table" in regime_body(board, "toy_embedder", "bursty", all_rows)
    board.close()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_no_worker_process_outlives_the_dashboard(stop) -> None:
    """``kill PID`` (SIGTERM), a closed terminal (SIGHUP) or the dashboard's own death
    (SIGKILL: its workers watch their parent) ends every process it started."""
    import subprocess
    import sys
    import threading
    import time

    server = subprocess.Popen(
        [sys.executable, "-m", "tuner", "dashboard", "--storage", f"sqlite:///{ROOT / 'results.db.example'}",
         "--port", "0", "--no-optuna-dashboard", "--no-warm", "--jobs", "2"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().split(" on ", 1)[1].split(" ", 1)[0]
        # a page that runs simulations in the worker pool; it need not finish
        threading.Thread(target=lambda: _get_quietly(url + "problem/seed_example"), daemon=True).start()
        children: list[int] = []
        deadline = time.monotonic() + 60
        while len(children) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            children = [int(pid) for pid in subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True,
                                                           text=True).stdout.split()]
        assert len(children) >= 2, children  # the pool's workers (and multiprocessing's resource tracker)
        server.send_signal(stop)
        server.wait(timeout=60)
        if stop != signal.SIGKILL:  # stopped as Ctrl-C stops it: its pool shut down, one line, exit status 130
            assert (server.returncode, server.stderr.read()) == (130, "tuner: interrupted\n")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(pid) for pid in children):
            time.sleep(0.2)
        assert not [pid for pid in children if _alive(pid)]
    finally:
        server.kill()
        server.wait()


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie waiting for its (dead) parent's reaping."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _get_quietly(url: str) -> None:
    try:
        urlopen(url, timeout=120).read()
    except Exception:  # noqa: BLE001 - the server is stopped under the request on purpose
        pass


def zero_table_page(path: Path, table: str = "tuner_configs") -> None:
    """Overwrite the root page of ``table`` with zeros (a damaged file, as a torn write leaves)."""
    with sqlite3.connect(path) as connection:
        root = connection.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
        size = connection.execute("PRAGMA page_size").fetchone()[0]
    connection.close()
    with path.open("r+b") as file:
        file.seek((root - 1) * size)
        file.write(bytes(size))


def test_a_database_whose_table_is_damaged_is_refused_at_start(tmp_path: Path) -> None:
    """The problems' index survives a zeroed table page, so the dashboard once started and
    answered every page with 500; it now reads the rows first, as `table show` does."""
    import subprocess
    import sys

    from tuner.bundled import EXAMPLE_DATABASE
    from tuner.dashboard import Dashboard
    from tuner.errors import StorageError

    damaged = tmp_path / "damaged.db"
    shutil.copy(EXAMPLE_DATABASE, damaged)
    zero_table_page(damaged)
    url = f"sqlite:///{damaged}"
    with pytest.raises(StorageError, match="cannot read the config table: database disk image is malformed"):
        Dashboard(url, ROOT / "search_spaces")
    for command in (["dashboard", "--storage", url, "--port", "0"], ["table", "show", "--storage", url]):
        result = subprocess.run([sys.executable, "-m", "tuner", *command], capture_output=True, text=True,
                                timeout=120, cwd=tmp_path)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert result.stderr.count("\n") == 1 and "malformed" in result.stderr, result.stderr


def test_into_studies_on_a_read_only_database_is_one_storage_error(db: Path, monkeypatch) -> None:
    import os

    from tuner.dashboard import Dashboard, save_into_studies
    from tuner.errors import StorageError
    from tuner.store import store as store_module

    before = db.read_bytes()
    board = Dashboard(f"sqlite:///file:{db}?mode=ro&uri=true", ROOT / "search_spaces")
    with pytest.raises(StorageError, match=r"read-only database \(opened with mode=ro\): report --into-studies"):
        save_into_studies(board)
    board.close()
    real = os.access
    monkeypatch.setattr(store_module.os, "access", lambda p, mode: Path(p) != db and real(p, mode))
    board = Dashboard(f"sqlite:///{db}", ROOT / "search_spaces")
    with pytest.raises(StorageError, match=rf"^{re.escape(str(db))}: read-only database \(the file is not writable\)"):
        save_into_studies(board)
    board.close()
    monkeypatch.undo()
    monkeypatch.setattr(store_module, "check_writable", lambda *args: None)  # SQLite's own refusal, wrapped by Optuna
    board = Dashboard(f"sqlite:///file:{db}?mode=ro&uri=true", ROOT / "search_spaces")
    with pytest.raises(StorageError, match=r"attempt to write a readonly database\): report --into-studies"):
        save_into_studies(board)
    board.close()
    assert db.read_bytes() == before
