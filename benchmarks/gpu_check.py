"""The prepared GPU check: what a lent GPU's first minutes should measure, in one command
of at most :data:`TOTAL_LIMIT_S` seconds, each step's result saved the moment it ends.

Steps (each a process of its own with its own time limit, so a step that fails, hangs
or crashes the driver leaves the others' data):

- (a) ``family_latency``: the bundled kernel families at the shipped problems' shapes,
  measured (CUDA graphs, cold L2) beside their modeled latency
  (``benchmarks/gpu_family_latency.py``).
- (b) ``gpu_sharing``: waves on free SMs and non-preemption beside a holder kernel
  (``benchmarks/gpu_sharing.py``).
- (c) replays with ``--compare`` (measured beside simulated, the same requests):
  ``seed_example`` under heavy load with ``lean`` and with ``fast`` (the seed's claim),
  and ``llm_decode`` in two regimes with the stored table's configs and with the
  per-bucket isolated-fastest ones, 20 s each.

Everything lands in ``OUT_DIR/gpu_check_<device>_<date>.json``: the device, driver,
versions and date, then per step its status, wall time, result and the tail of its log;
the seed example's replays also write their Perfetto traces beside it
(``..._<step>.trace.json.gz``: kernels timed by CUDA events).

``--dry-run`` runs every step on the CPU through ``benchmarks/cuda_standin.py`` (a
``torch.cuda`` that records each call; each step's record lists the calls it made), with
short windows; the test suite runs it, so the script cannot break unnoticed.

Usage::

    python benchmarks/gpu_check.py [--dry-run] [--out-dir DIR] [--only STEP,...]

(``scripts/gpu-check.sh`` runs it, first installing carried wheels where the GPU
machine lacks tuner's dependencies.)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: The longest the whole check may take on a GPU: the environment's step and every step's
#: limit add up to it, and a deadline holds each step to what is left of it.
TOTAL_LIMIT_S = 480
#: The environment step's limit (it imports torch and Triton, and asks nvidia-smi).
ENVIRONMENT_LIMIT_S = 20
_REPLAY = ("-m", "tuner", "replay", "--device", "cuda", "--compare", "--json")


@dataclass(frozen=True)
class Step:
    """One step: the ``python`` arguments it runs (``{out}``: the file it writes its JSON
    to; a step without one prints its JSON on stdout), its limit, and what a dry run
    changes (``dry``: arguments appended; ``dry_argv``: arguments used instead)."""

    name: str
    what: str
    limit_s: int
    argv: tuple[str, ...]
    dry: tuple[str, ...] = ()
    dry_argv: tuple[str, ...] | None = None

    @property
    def traced(self) -> bool:
        """Whether the step writes a trace (``{trace}`` in its arguments)."""
        return "{trace}" in self.argv

    def command(self, out: Path, dry_run: bool, trace: Path | None = None) -> list[str]:
        argv = (self.dry_argv if dry_run and self.dry_argv is not None
                else self.argv + (self.dry if dry_run else ()))
        return [part.replace("{out}", str(out)).replace("{trace}", str(trace)) for part in argv]


def _llm_decode(regime: str, which: str, limit_s: int) -> Step:
    chosen = ("--table", "--storage", "results.db.example") if which == "table" else ("--isolated-fastest",)
    return Step(f"replay_llm_decode_{regime}_{which}",
                f"(c) llm_decode {regime}, {'the stored table' if which == 'table' else 'isolated-fastest'}, 20 s",
                limit_s, (*_REPLAY, "search_spaces/llm_decode.yaml", "--regime", regime, *chosen, "--duration", "20",
                     "--drain", "5"), dry=("--duration", "0.5", "--drain", "1"))


STEPS: tuple[Step, ...] = (
    Step("family_latency", "(a) kernel families at the shipped problems' shapes, measured vs modeled", 85,
         ("benchmarks/gpu_family_latency.py", "--out", "{out}", "--budget-s", "50"),
         dry=("--problems", "llm_decode,h100_mixtral8x7b_tp2", "--per-problem", "3", "--warmup", "1", "--reps", "2")),
    Step("gpu_sharing", "(b) waves on free SMs and non-preemption beside a holder kernel", 55,
         ("benchmarks/gpu_sharing.py", "--out", "{out}"),
         # its holder is a raw Triton launch the stand-in cannot run: the dry run checks its
         # predictions and arguments (its CUDA path ran on an H200: gpu_sharing_measured.json)
         dry_argv=("benchmarks/gpu_sharing.py", "--predict")),
    *(Step(f"replay_seed_example_heavy_{config}", f"(c) seed_example heavy, {config}, 10 s", 30,
           (*_REPLAY, "search_spaces/seed_example.yaml", "--regime", "heavy", "--assign", f"stage={config}",
            "--duration", "10", "--drain", "5", "--trace", "{trace}"), dry=("--duration", "1", "--drain", "1"))
      for config in ("lean", "fast")),
    # each makes llm_decode's inputs (~15 s of CPU random numbers: attention's KV at 128 x 8192
    # tokens) and runs every config once before its window; the first compiles them too (the
    # stored table's configs for llm_decode are the isolated-fastest ones in every regime, so
    # Triton's cache serves the other three)
    *(_llm_decode(regime, which, 80 if (regime, which) == ("light", "table") else 60)
      for regime in ("light", "heavy") for which in ("table", "isolated_fastest")),
)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def environment() -> dict[str, Any]:
    """The device, driver and versions (printed as JSON by ``--environment``)."""
    sys.path.insert(0, str(HERE))
    from gpu_sharing import environment as measured_environment

    return measured_environment()


class Check:
    """The check's record: the day's record for this device if one exists (a rerun of some
    steps amends it), amended step by step and written atomically after each."""

    def __init__(self, out_dir: Path, dry_run: bool, python: str) -> None:
        self.out_dir, self.dry_run, self.python = out_dir, dry_run, python
        out_dir.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix="gpu-check-"))
        started = datetime.datetime.now(datetime.timezone.utc)
        self.record: dict[str, Any] = {"check": "gpu_check", "dry_run": dry_run,
                                       "date": started.isoformat(timespec="seconds"), "steps": {}}
        env = self.run(Step("environment", "device, driver and versions", ENVIRONMENT_LIMIT_S,
                            ("benchmarks/gpu_check.py", "--environment")))
        self.record["environment"] = env.get("result") or {"error": env.get("log_tail")}
        device = "dry-run" if dry_run else slug(str(self.record["environment"].get("device", "unknown")))
        self.stem = f"gpu_check_{device}_{started.date().isoformat()}"
        self.path = out_dir / f"{self.stem}.json"
        earlier = _json_of(self.path) if self.path.exists() else None
        if isinstance(earlier, dict) and isinstance(earlier.get("steps"), dict):
            self.record["steps"] = earlier["steps"]

    def prefix(self, step: Step) -> list[str]:
        if not self.dry_run:
            return [self.python]
        return [self.python, str(HERE / "cuda_standin.py"), "--calls", str(self.scratch / f"{step.name}.calls"), "--"]

    def run(self, step: Step, limit_s: float | None = None) -> dict[str, Any]:
        """Run one step (for at most ``limit_s``, default its own limit); its entry:
        status, rc, wall seconds, result (its JSON) and log tail."""
        limit = step.limit_s if limit_s is None else limit_s
        out = self.scratch / f"{step.name}.json"
        trace = self.out_dir / f"{self.stem}_{step.name}.trace.json.gz" if step.traced else None
        argv = step.command(out, self.dry_run, trace)
        command = self.prefix(step) + argv
        started = time.perf_counter()
        try:
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=limit,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"}, check=False)
            rc, stdout, log = done.returncode, done.stdout, done.stdout + done.stderr
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired as exc:
            rc, status = None, "timed out"
            stdout, log = (_text(exc.stdout), _text(exc.stdout) + _text(exc.stderr))
        entry: dict[str, Any] = {"what": step.what, "command": " ".join(argv),
                                 "limit_s": round(limit, 1), "status": status, "rc": rc,
                                 "wall_s": round(time.perf_counter() - started, 1), "log_tail": log[-3000:]}
        result = _json_of(out) if out.exists() else _json_in(stdout)
        if result is not None:
            entry["result"] = result
        if trace is not None and trace.exists():
            entry["trace"] = trace.name
        calls = self.scratch / f"{step.name}.calls"
        if calls.exists():
            entry["standin_calls"] = json.loads(calls.read_text())
        return entry

    def save(self) -> None:
        partial = self.path.with_suffix(".json.partial")
        partial.write_text(json.dumps(self.record, indent=1) + "\n")
        partial.replace(self.path)


def _text(part: bytes | str | None) -> str:
    return part.decode(errors="replace") if isinstance(part, bytes) else (part or "")


def _json_of(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _json_in(log: str) -> Any:
    """The JSON document a step printed on its standard output (a replay's ``--json``), or
    None."""
    start = log.find("{")
    try:
        return json.loads(log[start:log.rindex("}") + 1]) if start >= 0 else None
    except ValueError:
        return None


def records(directory: Path = HERE / "data") -> list[dict[str, Any]]:
    """The checks measured on a GPU and committed (dry runs left out), oldest first."""
    found = [_json_of(path) for path in sorted(directory.glob("gpu_check_*.json"))]
    return sorted((r for r in found if isinstance(r, dict) and not r.get("dry_run")), key=lambda r: r.get("date", ""))


def render(found: list[dict[str, Any]]) -> str:
    """The README's summary of every recorded check: per check its device and date, the
    families' measured / modeled latency, and each replay's measured beside simulated."""
    if not found:
        return ("No run of scripts/gpu-check.sh has been recorded yet: no family's kernel latency and\n"
                "no replay of a service has been measured on a GPU.")
    lines: list[str] = []
    for record in found:
        env = record.get("environment", {})
        steps = record.get("steps", {})
        ok = sum(step.get("status") == "ok" for step in steps.values())
        lines += [f"{env.get('device', '?')}, driver {env.get('driver')}, torch {env.get('torch')}, "
                  f"triton {env.get('triton')}, {record.get('date', '?')[:10]}: {ok} of {len(steps)} steps ok", ""]
        family = (steps.get("family_latency") or {}).get("result") or {}
        for name, s in family.get("summary", {}).items():
            lines.append(f"  (a) {name:<18} {s['cases']:>3} cases, measured / modeled median {s['median_ratio']:.2f} "
                         f"(range {s['min_ratio']:.2f} to {s['max_ratio']:.2f})")
        for name, step in steps.items():
            result = step.get("result") or {}
            if name.startswith("replay_") and "simulated" in result:
                measured, simulated = result, result["simulated"]
                lines.append(f"  (c) {name.removeprefix('replay_'):<40} goodput {measured['goodput_rps']:8.2f} /s "
                             f"(simulated {simulated['goodput_rps']:8.2f}), p99 {_ms(measured['latency_p99_s'])} "
                             f"(simulated {_ms(simulated['latency_p99_s'])})")
            elif step.get("status") != "ok":
                lines.append(f"  {name}: {step.get('status')}")
        lines.append("")
    return "\n".join(lines).rstrip()


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.1f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="every step on the CPU through the torch.cuda stand-in")
    parser.add_argument("--out-dir", type=Path, default=HERE / "data")
    parser.add_argument("--only", type=lambda text: set(text.split(",")), default=None, help="these steps only")
    parser.add_argument("--environment", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.environment:
        print(json.dumps(environment()))
        return 0
    if not args.dry_run:
        sys.path.insert(0, str(HERE))
        from gpu_sharing import cuda_unavailable

        why = cuda_unavailable()
        if why is not None:
            print(f"gpu-check: no CUDA GPU ({why}); nothing measured. `--dry-run` runs every step on the CPU.")
            return 0
    unknown = sorted((args.only or set()) - {step.name for step in STEPS})
    if unknown:
        print(f"gpu-check: --only: no step {', '.join(unknown)} (steps: {', '.join(s.name for s in STEPS)})")
        return 2
    deadline = time.perf_counter() + TOTAL_LIMIT_S
    check = Check(args.out_dir, args.dry_run, os.environ.get("TUNER_PYTHON", sys.executable))
    ran = failed = 0
    try:
        for step in STEPS:
            if args.only is not None and step.name not in args.only:
                continue
            left = deadline - time.perf_counter()
            print(f"gpu-check: {step.name}: {step.what} (limit {min(step.limit_s, left):.0f} s)", flush=True)
            entry = check.run(step, min(step.limit_s, max(left, 1.0)))
            check.record["steps"][step.name] = entry
            check.save()
            ran += 1
            failed += entry["status"] != "ok"
            print(f"gpu-check: {step.name}: {entry['status']} in {entry['wall_s']} s -> {check.path}", flush=True)
            if entry["status"] != "ok":
                print(entry["log_tail"][-1500:], flush=True)
    finally:
        shutil.rmtree(check.scratch, ignore_errors=True)
    print(f"gpu-check: {ran - failed} of {ran} steps ok; record: {check.path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
