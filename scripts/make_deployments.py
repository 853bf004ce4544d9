"""Write the four measured H100 deployments as shipped problem files (issue 40).

Each is the deployment of one measured vLLM run of ``../shared/data/serving_real`` (the
calibration set: Llama-2-7B TP1, CodeLlama-34B TP2, Mixtral-8x7B TP2, Llama-2-70B TP4 on
H100 80GB SXM, vLLM V1), written as ``tuner init`` writes it — the model's shapes from its
config, the run's recorded engine arguments (``max_num_seqs`` 128,
``max_num_batched_tokens`` 2048, ``max_model_len`` 4096, block size 16) and the KV blocks
vLLM allocated — with engine knobs (the run's own limits first, then vLLM V1's H100 chunk size and twice
the sequences: :data:`KNOBS`) and four regimes: the run's two measured stages as Poisson traffic at the run's mean lengths
(5 and 10 req/s, ~590 tokens in, 247 out, one of its 100 distinct prompts each, so
prefix caching sees what it saw), the same at 20 req/s (heavier than anything measured),
and the bundled Azure code trace's arrival times (CC-BY-4.0, burstier: inter-arrival CV
13) at 10 req/s carrying the same requests.

Only figures are taken from the runs (mean lengths, rates, prompt count, engine
arguments, KV blocks): their traces carry no licence and stay outside the project.

    .venv/bin/python scripts/make_deployments.py [../shared/data/serving_real]
"""

from __future__ import annotations

import sys
from pathlib import Path

from tuner.engine.init_problem import deployment_of, poisson_regimes, problem_text
from tuner.engine.measured_run import read_run

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT.parent / "shared" / "data" / "serving_real"

#: problem name -> the run it is built from (the file name's model part).
DEPLOYMENTS = {
    "h100_llama2_7b_tp1": "llama-2-7b-tp1",
    "h100_codellama34b_tp2": "codellama-34b-tp2",
    "h100_mixtral8x7b_tp2": "mixtral-8x7b-v0-1-tp2",
    "h100_llama2_70b_tp4": "llama-2-70b-hf-tp4",
}
HORIZON_S, WARMUP_S = 30.0, 8.0
#: Engine knobs searched: the measured runs' limits first, then vLLM V1's own H100 chunk size
#: (8192) and twice the sequences; four deployments per regime keep the default tune in minutes.
KNOBS = {"max_num_seqs": [128, 256], "max_num_batched_tokens": [2048, 8192]}
BURSTY_RATE = 10.0


def bursty(prompt: int, output: int, prompts: int) -> str:
    """The Azure code trace's arrival times (CC-BY-4.0, bundled; inter-arrival CV 13)
    replayed at the heavier measured rate, carrying the measured requests: the same traffic
    as the measured stage, in bursts."""
    return f"""  bursty_10qps:
    description: the Azure code trace's arrival times (inter-arrival CV 13) replayed at {BURSTY_RATE:g} req/s,
      {prompt} tokens in, {output} out; a 2-minute window, as half a minute of so bursty a trace is often empty
    arrivals: {{process: trace, file: traces/azure_llm_code_2023.csv, rate: {BURSTY_RATE:g}}}
    sizes: {{prompt: {prompt}, output: {output}, prompt_id: {{dist: uniform, low: 1, high: {prompts}}}}}
    horizon: 120 s
    warmup: 15 s"""


def problem_for(name: str, run_path: Path) -> str:
    run = read_run(run_path)
    prompt, output = run.mean_lengths()
    rates = {f"measured_{stage.rate_qps:g}qps": stage.rate_qps for stage in run.stages if stage.rate_qps}
    rates["heavier_20qps"] = 20.0
    regimes = poisson_regimes(rates, prompt, output, HORIZON_S, WARMUP_S, run.distinct_prompts())
    deployment = deployment_of(run, num_gpu_blocks=run.engine.num_gpu_blocks, name=name)
    text = problem_text(deployment, regimes + "\n" + bursty(prompt, output, run.distinct_prompts()))
    text = with_knobs(text)
    source = (f"# Built by scripts/make_deployments.py from the measured run {run.name}\n"
              f"# (shared/data/serving_real: inference-sim/training, measured by others; only its figures are used).\n")
    return source + text


def with_knobs(text: str) -> str:
    """``tuner init``'s knobs block with :data:`KNOBS`' values."""
    lines = text.splitlines()
    for name, values in KNOBS.items():
        at = next(i for i, line in enumerate(lines) if line.lstrip().startswith(f"{name}: ["))
        indent, comment = lines[at][:len(lines[at]) - len(lines[at].lstrip())], lines[at].partition("#")[2]
        lines[at] = f"{indent}{name}: [{', '.join(map(str, values))}]  #{comment}"
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    runs = Path(argv[0]) if argv else RUNS
    for name, model in DEPLOYMENTS.items():
        found = sorted((runs / "runs").glob(f"*-{model}-codegen.json"))
        if len(found) != 1:
            raise SystemExit(f"{runs}/runs: expected one run of {model}, found {len(found)}")
        out = ROOT / "search_spaces" / f"{name}.yaml"
        out.write_text(problem_for(name, found[0]))
        print(f"wrote {out.relative_to(ROOT)} from {found[0].name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
