"""What vLLM's batch knobs alone give on the default problem, against its defaults (issue 40).

``llm_decode`` (Llama-2-7B on one H100 under vLLM's engine model) with the knobs block
``tuner init`` writes for it, scaled to its limits: ``max_num_seqs`` 128 (the file's),
64, 256 and ``max_num_batched_tokens`` 8192 (the file's), 2048, 4096. The file is copied
next to its traces with that block added, and ``tuner knobs`` runs every combination
with the per-bucket isolated-fastest configs on seeds 0..K-1, paired against the
defaults: answers (a) and (b) of issue 40, simulated.

With ``--tune`` it runs ``tuner knobs --tune`` instead (the configs tuned under every
combination too: the four answers (a)-(d)) and records ``bench_knobs_tuned``.

Usage::

    python benchmarks/bench_knobs.py --record     # 3 seeds, every regime (minutes)
    python benchmarks/bench_knobs.py --seeds 2 --regime bursty_code --json
    python benchmarks/bench_knobs.py --tune --regime light --regime bursty_code --record
    python benchmarks/bench_knobs.py --problem llm_tp_overlap --tune --trials 12 --seeds 2 --record

``--problem NAME`` runs a shipped problem that lists its own knobs instead (recorded as
``bench_knobs[_tuned]_NAME``): with ``--tune``, each setting's configs tuned in a study of
their own, against which the joint study of ``tuner tune`` can be read.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import yaml

from recorded import add_options, load_average, record

ROOT = Path(__file__).resolve().parents[1]
SPACES = ROOT / "search_spaces"
KNOBS = {"max_num_seqs": [128, 64, 256], "max_num_batched_tokens": [8192, 2048, 4096]}


def with_knobs(directory: Path) -> Path:
    """``llm_decode.yaml`` with :data:`KNOBS`, written beside a link to its traces."""
    document = yaml.safe_load((SPACES / "llm_decode.yaml").read_text())
    document["service"]["knobs"] = KNOBS
    (directory / "traces").symlink_to(SPACES / "traces")
    path = directory / "llm_decode.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--regime", action="append", default=None, help="a regime (repeatable; default: all)")
    parser.add_argument("--tune", action="store_true", help="the four answers (tuner knobs --tune)")
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--problem", default=None,
                        help="a shipped problem that lists its own service.knobs (default: llm_decode with KNOBS)")
    parser.add_argument("--json", action="store_true")
    add_options(parser)
    args = parser.parse_args(argv)
    from click.testing import CliRunner

    from tuner.cli import main as tuner

    before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        path = with_knobs(Path(tmp)) if args.problem is None else SPACES / f"{args.problem}.yaml"
        regimes = [option for name in args.regime or () for option in ("--regime", name)]
        tune = ["--tune", "--trials", str(args.trials)] if args.tune else []
        result = CliRunner().invoke(tuner, ["knobs", str(path), "--seeds", str(args.seeds), "--json", "-q",
                                            *regimes, *tune])
    if result.exit_code != 0:
        print(result.stderr or result.output, file=sys.stderr)
        return 1
    own = args.problem is None
    report = {"problem": "llm_decode" if own else args.problem, "knobs": KNOBS if own else "the problem's own",
              **json.loads(result.stdout)}
    if args.record:
        name = ("bench_knobs_tuned" if args.tune else "bench_knobs") + ("" if own else f"_{args.problem}")
        record(name, report, args.note, before)
    if args.json or args.tune:
        print(json.dumps(report, indent=2))
        return 0
    for regime, answers in report["regimes"].items():
        print(regime)
        for answer in answers:
            delta = ("(defaults)" if answer["default"] else
                     f"capacity {answer['capacity_delta_rps']:+.3g} ± {answer['capacity_delta_ci_rps'] or 0:.2g}")
            print(f"  {answer['knobs']}: capacity {answer['capacity_rps']:.3g} req/s {delta}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
