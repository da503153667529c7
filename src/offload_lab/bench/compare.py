"""Side by side with the other load generators (``vllm bench serve``, AIPerf, GuideLLM) on one server, drift removed.

Every tool runs the same closed loop on prompts of the same shape (exact token length, fixed output length under
``ignore_eos``), each tool and round with fresh prompts of its own. What makes the figures comparable:

- **rounds in mirrored order** (ABCD, DCBA, ...; at least four): a drift of the machine over a round falls on every
  tool at every position alike;
- **each window divided by the server's own histograms**: ``/metrics`` is scraped just before and just after each
  tool's window (outside it), and the tool's mean TTFT and TPOT are divided by the server's mean
  ``vllm:time_to_first_token_seconds`` and ``vllm:request_time_per_output_token_seconds`` over the same window.
  The server's own TPOT moved between 3.8 and 5.7 ms from one window to the next on this machine (issue 25); a
  ratio to the server cancels that, a raw median does not. The TTFT the client adds (its mean minus the server's)
  is reported beside it;
- **the server checks the window**: requests finished and tokens generated (from the same scrapes) must match what
  the tool sent, and the prompt tokens served from cache must be what the cache mode promises: none in ``cold``
  (no two prompts of the whole comparison share a first KV block, checked on the server's token ids before any
  request), or exactly the primed prefix on every request in ``shared``;
- **a verdict per figure**: each peer's ratio against ours, ``agree`` within :data:`AGREE_WITHIN`, else
  ``differ``; ``refused`` with the reason when a check failed. Figures that the tools name alike but do not measure
  alike are listed in :data:`NOT_COMPARABLE` with why, and never compared.

No tool warms up or sends a ready-check request (either would send a measured prompt early). The peers run from
environments of their own (``make peers-env``; ``vllm bench serve`` from the server's), on the CPUs that the server
does not use, as our own client does here.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

from offload_lab.bench import peers
from offload_lab.bench.compare_spec import AGREE_WITHIN, NOT_COMPARABLE, CompareParams, check_tools
from offload_lab.core import runs
from offload_lab.core.errors import InputError, ProducerError
from offload_lab.load import client as load
from offload_lab.load import closed_loop, prompts
from offload_lab.load import metrics as server_metrics
from offload_lab.load.endpoint import Endpoint
from offload_lab.load.workloads import PreparedWorkload, RequestSpec, WorkloadSpec
from offload_lab.core.runs import EVENTS

EXPERIMENT = "compare"
WINDOWS = "windows.csv"
SUMMARY = "comparison.json"
TOOLS = ("ours", *peers.PEERS)


def round_order(tools: list[str], r: int) -> list[str]:
    """Mirrored rounds: ABCD, DCBA, ABCD, ... so that every tool meets every position's drift alike."""
    return list(tools) if r % 2 == 0 else list(reversed(tools))


def check_params(p: CompareParams, block: int) -> None:
    check_tools(p.tools)
    if p.cache == "shared" and p.prompt_tokens <= p.shared_blocks * block:
        raise InputError(f"--prompt-tokens {p.prompt_tokens} is not longer than the shared prefix of "
                         f"{p.shared_blocks} block(s) of {block} tokens; ask for more than {p.shared_blocks * block} tokens")


# --- prompts -----------------------------------------------------------------------------------------------------

def shared_prompt(tok: prompts.Tokenizer, prefix_ids: list[int], prefix_text: str, n_tokens: int,
                  salt: str) -> str:
    """``prefix_text`` plus a salted tail, exactly ``n_tokens`` tokens, whose first tokens are ``prefix_ids``."""
    tail = f" [{prompts.salt_tag(salt)}] " + prompts.filler_text(max(16, 2 * n_tokens), seed=salt)
    ids = tok.tokenize(prefix_text + tail)
    if ids[:len(prefix_ids)] != prefix_ids:
        raise ProducerError("the shared prefix did not keep its tokens once a tail was added; not run")
    cut = n_tokens
    for _ in range(prompts.MAX_ADJUST):
        text = tok.detokenize(ids[:cut])
        got = tok.tokenize(text)
        if len(got) == n_tokens and got[:len(prefix_ids)] == prefix_ids:
            return text
        cut += n_tokens - len(got)
        if cut <= len(prefix_ids) or cut > len(ids):
            break
    raise ProducerError(f"could not build a prompt of exactly {n_tokens} tokens on a shared prefix")


def prompt_sets(tok: prompts.Tokenizer, run_id: str, p: CompareParams, tools: list[str],
                block: int) -> tuple[dict[tuple[int, str], list[str]], dict[tuple[int, str], str]]:
    """Per round and tool: its prompts, and (shared mode) the unmeasured prompt that primes its prefix."""
    sets: dict[tuple[int, str], list[str]] = {}
    primes: dict[tuple[int, str], str] = {}
    for r in range(p.rounds):
        for tool in tools:
            salt = f"{run_id}/{r}/{tool}"
            if p.cache == "cold":
                sets[(r, tool)] = [prompts.exact_prompt(tok, p.prompt_tokens, f"{salt}/{i}") for i in range(p.num_prompts)]
                continue
            prefix_text = prompts.exact_prompt(tok, p.shared_blocks * block, f"{salt}/prefix")
            prefix_ids = tok.tokenize(prefix_text)
            sets[(r, tool)] = [shared_prompt(tok, prefix_ids, prefix_text, p.prompt_tokens, f"{salt}/{i}")
                               for i in range(p.num_prompts)]
            primes[(r, tool)] = shared_prompt(tok, prefix_ids, prefix_text, p.prompt_tokens, f"{salt}/prime")
    return sets, primes


def first_block_collisions(tok: prompts.Tokenizer, sets: dict[tuple[int, str], list[str]], block: int,
                           within_set: bool = True) -> list[tuple[str, str]]:
    """Pairs of prompts (named round/tool/index) whose first ``block`` token ids agree: a prefix-cache hit.
    ``within_set`` False lets the prompts of one set share (the shared mode's prefix) and finds only clashes
    between sets."""
    seen: dict[tuple[int, ...], tuple[str, tuple[int, str]]] = {}
    clashes = []
    for key_set, texts in sets.items():
        for i, text in enumerate(texts):
            key, name = tuple(tok.tokenize(text)[:block]), f"{key_set[0]}/{key_set[1]}/{i}"
            if key in seen and (within_set or seen[key][1] != key_set):
                clashes.append((seen[key][0], name))
            seen.setdefault(key, (name, key_set))
    return clashes


# --- the server's view of a window ---------------------------------------------------------------------------------

def _scrape(endpoint: Endpoint) -> dict[str, float]:
    text = endpoint.metrics_text()
    return server_metrics.parse(text) if text else {}


def _sum_family(samples: dict[str, float], name: str) -> float | None:
    """A counter summed over its label sets (``vllm:request_success_total`` has one per finish reason)."""
    values = [v for k, v in samples.items() if k == name or k.startswith(name + "{")]
    return sum(values) if values else None


def server_window(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """What the server saw between two scrapes: its mean TTFT and TPOT, requests, tokens and cache hits."""
    a, b = server_metrics.pick(before), server_metrics.pick(after)

    def delta(key: str) -> float | None:
        return b[key] - a[key] if a.get(key) is not None and b.get(key) is not None else None  # type: ignore[operator]

    def mean_ms(name: str) -> float | None:
        total, count = delta(f"{name}_sum"), delta(f"{name}_count")
        return total / count * 1e3 if total is not None and count else None

    finished = [(_sum_family(after, n), _sum_family(before, n)) for n in ("vllm:request_success_total",)]
    req = finished[0][0] - finished[0][1] if None not in finished[0] else delta("e2e_count")  # type: ignore[operator]
    cached = delta("prompt_tokens_cached")
    return {
        "server_ttft_mean_ms": mean_ms("ttft"),
        # The per-request TPOT histogram where the server has it; else its per-token ITL (the same mean when every
        # request has the same output length, as here).
        "server_tpot_mean_ms": mean_ms("tpot") if mean_ms("tpot") is not None else mean_ms("itl"),
        "server_requests": req,
        "server_generation_tokens": delta("generation_tokens"),
        "server_prompt_tokens": delta("prompt_tokens"),
        "server_cached_tokens": cached if cached is not None else delta("prefix_cache_hits"),
    }


def reset_prefix_cache(endpoint: Endpoint) -> bool:
    """Empty the server's prefix cache between rounds where the server allows it (vLLM's dev mode)."""
    try:
        return endpoint.post_json("/reset_prefix_cache", {}, timeout_s=30).status_code == 200
    except Exception:  # noqa: BLE001 (any failure just means "not available")
        return False


# --- our own side ------------------------------------------------------------------------------------------------

def run_ours(endpoint: Endpoint, model: str, texts: list[str], p: CompareParams, log: runs.EventLog,
             r: int) -> peers.ToolResult:
    """Our closed loop on exactly these prompts, with no /metrics scrape during the window (the peers scrape none:
    a scrape costs the server CPU)."""
    per_stream = -(-len(texts) // p.concurrency)
    work = PreparedWorkload(spec=WorkloadSpec(regime="short", prompt_tokens=p.prompt_tokens, output_tokens=p.output_tokens,
                                              block_size=16),
                            model=model, streams=p.concurrency, requests_per_stream=per_stream)
    work.queues = [[RequestSpec("/v1/completions", load.completion_payload(model, t, p.output_tokens), p.output_tokens,
                                prompt_tokens=p.prompt_tokens) for t in texts[s::p.concurrency]]
                   for s in range(p.concurrency)]
    stop = closed_loop.StopState(closed_loop.StopRule(scope="level"))
    result = load.run_sync(closed_loop.run_level(endpoint, work, stop, log, None, extra={"round": r, "tool": "ours"}))
    ok = [e for e in result.events if e["ok"]]
    return peers.ToolResult.of(sent=len(texts), completed=len(ok), ttft_ms=[e["ttft_s"] * 1e3 for e in ok],
                               tpot_ms=[e["tpot_ms"] for e in ok if e["tpot_ms"]])


def _prime(endpoint: Endpoint, model: str, text: str) -> None:
    """One unmeasured request that puts a window's shared prefix in the cache."""
    r = endpoint.post_json("/v1/completions", {"model": model, "prompt": text, "max_tokens": 1}, timeout_s=120)
    if r.status_code != 200:
        raise ProducerError(f"priming the shared prefix failed: HTTP {r.status_code}")


# --- verdicts ----------------------------------------------------------------------------------------------------

def window_row(tool: str, r: int, position: int, got: peers.ToolResult, server: dict[str, Any],
               p: CompareParams, block: int) -> dict[str, Any]:
    """One tool's window: its figures, the server's, their ratios and the checks."""
    expected_cached = 0 if p.cache == "cold" else p.shared_blocks * block * got.completed
    checks = []
    if server["server_requests"] is not None and server["server_requests"] != got.completed:
        checks.append(f"server finished {server['server_requests']:.0f} request(s), the tool reports {got.completed}")
    want_tokens = got.completed * p.output_tokens
    if server["server_generation_tokens"] is not None and server["server_generation_tokens"] != want_tokens:
        checks.append(f"server generated {server['server_generation_tokens']:.0f} tokens, not {want_tokens}")
    cached = server["server_cached_tokens"]
    if cached is None:
        checks.append("the server reports no cached-token counter")
    elif abs(cached - expected_cached) > block:
        checks.append(f"{cached:.0f} prompt tokens served from cache, not {expected_cached}")
    if got.completed < got.sent:
        checks.append(f"{got.sent - got.completed} of {got.sent} request(s) failed")

    def ratio(client: float | None, srv: float | None) -> float | None:
        return client / srv if client is not None and srv else None

    return {
        "round": r, "tool": tool, "position": position, "sent": got.sent, "completed": got.completed,
        "client_ttft_mean_ms": got.ttft_mean_ms, "client_ttft_median_ms": got.ttft_median_ms,
        "client_tpot_mean_ms": got.tpot_mean_ms, "client_tpot_median_ms": got.tpot_median_ms, **server,
        "expected_cached_tokens": expected_cached,
        "ttft_ratio": ratio(got.ttft_mean_ms, server["server_ttft_mean_ms"]),
        "tpot_ratio": ratio(got.tpot_mean_ms, server["server_tpot_mean_ms"]),
        "ttft_added_ms": (got.ttft_mean_ms - server["server_ttft_mean_ms"])
        if got.ttft_mean_ms is not None and server["server_ttft_mean_ms"] is not None else None,
        "checks": "; ".join(checks),
        **{f"tool_{k}": v for k, v in got.extra.items()},
    }


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def summarize(rows: list[dict[str, Any]], tools: list[str]) -> dict[str, Any]:
    """Per tool the medians over rounds of its ratios to the server; per peer and figure a verdict against ours."""
    per_tool: dict[str, dict[str, Any]] = {}
    for tool in ["ours", *tools]:
        mine = [row for row in rows if row["tool"] == tool]
        failed = [f"round {row['round']}: {row['checks']}" for row in mine if row["checks"]]
        per_tool[tool] = {
            "windows": len(mine),
            "ttft_ratio": _median([row["ttft_ratio"] for row in mine]),
            "tpot_ratio": _median([row["tpot_ratio"] for row in mine]),
            "ttft_added_ms": _median([row["ttft_added_ms"] for row in mine]),
            "client_ttft_mean_ms": _median([row["client_ttft_mean_ms"] for row in mine]),
            "client_tpot_mean_ms": _median([row["client_tpot_mean_ms"] for row in mine]),
            "server_ttft_mean_ms": _median([row["server_ttft_mean_ms"] for row in mine]),
            "server_tpot_mean_ms": _median([row["server_tpot_mean_ms"] for row in mine]),
            "checks_failed": failed,
        }
    verdicts = []
    ours = per_tool["ours"]
    for tool in tools:
        for figure in ("ttft_ratio", "tpot_ratio"):
            verdicts.append(_verdict(tool, figure, ours, per_tool[tool]))
    return {"tools": per_tool, "verdicts": verdicts, "agree_within": AGREE_WITHIN,
            "not_comparable": not_comparable(rows, tools)}


def not_comparable(rows: list[dict[str, Any]], tools: list[str]) -> dict[str, str]:
    """The figures never compared, for the tools that ran, with what this run measured where it shows why."""
    out = {k: v for k, v in NOT_COMPARABLE.items() if k.split()[0] in tools or k.split()[0] not in peers.PEERS}
    gaps = [(row.get("tool_inter_chunk_gaps"), row.get("tool_token_gaps")) for row in rows if row["tool"] == "aiperf"]
    gaps = [(g, t) for g, t in gaps if g is not None and t is not None]
    if gaps and "aiperf inter_chunk_latency" in out:
        chunks, tokens = sum(g for g, _ in gaps), sum(t for _, t in gaps)
        out["aiperf inter_chunk_latency"] += f" (here: {chunks:.0f} chunk gaps against {tokens:.0f} token gaps)"
    return out


def _verdict(tool: str, figure: str, ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"peer": tool, "figure": figure, "ours": ours[figure], "peer_value": theirs[figure]}
    refused = ours["checks_failed"] + theirs["checks_failed"]
    if refused:
        return {**out, "verdict": "refused", "difference": None, "reason": refused[0]}
    if ours[figure] is None or theirs[figure] is None:
        return {**out, "verdict": "refused", "difference": None, "reason": "a side has no figure"}
    diff = ours[figure] / theirs[figure] - 1
    return {**out, "difference": diff, "verdict": "agree" if abs(diff) <= AGREE_WITHIN else "differ", "reason": ""}


# --- the run -----------------------------------------------------------------------------------------------------

def client_cpus(server_cpus: list[int] | None) -> set[int] | None:
    """The CPUs the clients run on: those the server does not use (None: leave the affinity alone)."""
    mine = os.sched_getaffinity(0)
    rest = mine - set(server_cpus or [])
    return rest if server_cpus and rest else None


def compare(run: runs.Run, base_url: str | Endpoint, server_python: Path, model: str, tokenizer: str,
            p: CompareParams, server_cpus: list[int] | None = None, progress: Any = None) -> dict[str, Any]:
    """Mirrored rounds of every tool; writes ``windows.csv`` and ``comparison.json`` and returns the latter."""
    endpoint = Endpoint.of(base_url)
    block = server_metrics.block_size(endpoint.base_url)
    check_params(p, block)
    ctx = peers.PeerContext(base_url=endpoint.base_url, model=model, tokenizer=tokenizer, output_len=p.output_tokens,
                            concurrency=p.concurrency, server_python=server_python, run_dir=run.path,
                            log_path=run.file("peers.log"))
    for tool in p.tools:
        peers.PEERS[tool].check_available(ctx)
    tools = ["ours", *p.tools]
    with endpoint.sync_client() as http:
        tok = prompts.Tokenizer(endpoint.base_url, model, http)
        sets, primes = prompt_sets(tok, run.run_id, p, tools, block)
        clashes = first_block_collisions(tok, sets, block, within_set=p.cache == "cold")
    if clashes:
        raise ProducerError(f"{len(clashes)} pair(s) of prompts share their first KV block of {block} tokens "
                            f"(e.g. {clashes[0]}): the comparison would measure the prefix cache; not run")
    cpus = client_cpus(server_cpus)
    saved = os.sched_getaffinity(0)
    rows: list[dict[str, Any]] = []
    try:
        if cpus:
            os.sched_setaffinity(0, cpus)
        with run.events(EVENTS) as log:
            for r in range(p.rounds):
                reset_prefix_cache(endpoint)
                for position, tool in enumerate(round_order(tools, r)):
                    if p.cache == "shared":
                        _prime(endpoint, model, primes[(r, tool)])
                    before = _scrape(endpoint)
                    if tool == "ours":
                        got = run_ours(endpoint, model, sets[(r, tool)], p, log, r)
                    else:
                        got = peers.PEERS[tool].run(ctx, sets[(r, tool)], r)
                    row = window_row(tool, r, position, got, server_window(before, _scrape(endpoint)), p, block)
                    rows.append(row)
                    log.append({"kind": "window", **row, "extra": got.extra})
                    if progress:
                        progress(f"compare: round {r + 1}/{p.rounds}, {tool} done")
    finally:
        os.sched_setaffinity(0, saved)
    import pandas as pd

    run.write_table(WINDOWS, pd.DataFrame(rows))
    # by_alias: the record keeps its keys (input_len, output_len) whatever the fields are called now
    out = {**p.model_dump(mode="json", by_alias=True), "block_size": block,
           "client_cpus": sorted(cpus) if cpus else None,
           "peer_versions": {t: peers.PEERS[t].version(ctx) for t in p.tools}, **summarize(rows, p.tools)}
    run.write_json(SUMMARY, out)
    by_tool = {t: sum(r["completed"] for r in rows if r["tool"] == t) for t in tools}
    if not any(by_tool.values()) or not by_tool.get("ours"):
        # Nothing (or nothing of ours) completed: there is no figure to compare, and the run is not `ok`.
        raise ProducerError(f"compare: no request completed ({', '.join(f'{t}: {n}' for t, n in by_tool.items())} "
                            f"completed); see {run.file(EVENTS)} for the errors; what was measured is kept in "
                            f"{run.path}")
    return out


def table(out: dict[str, Any]) -> str:
    """The comparison as a person reads it: a row per tool, a verdict per peer and figure, what is not compared."""
    import pandas as pd

    def f(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    tools = pd.DataFrame([{
        "tool": name, "windows": t["windows"], "TTFT ms": f(t["client_ttft_mean_ms"], ".2f"),
        "server TTFT ms": f(t["server_ttft_mean_ms"], ".2f"), "TTFT/server": f(t["ttft_ratio"], ".3f"),
        "TTFT added ms": f(t["ttft_added_ms"], ".2f"), "TPOT ms": f(t["client_tpot_mean_ms"], ".3f"),
        "server TPOT ms": f(t["server_tpot_mean_ms"], ".3f"), "TPOT/server": f(t["tpot_ratio"], ".4f"),
        "checks": "ok" if not t["checks_failed"] else t["checks_failed"][0],
    } for name, t in out["tools"].items()])
    verdicts = pd.DataFrame([{
        "peer": v["peer"], "figure": v["figure"].replace("_ratio", "/server"),
        "ours vs peer": "-" if v["difference"] is None else f"{v['difference']:+.2%}",
        "verdict": v["verdict"] + (f" ({v['reason']})" if v["reason"] else ""),
    } for v in out["verdicts"]])
    lines = [f"{out['concurrency']} stream(s), {out['input_len']}-token prompts, {out['output_len']} tokens out, "
             f"{out['rounds']} rounds, cache {out['cache']}; medians over rounds of each window's mean", "",
             tools.to_string(index=False), ""]
    if not verdicts.empty:
        lines += [f"verdict: agree when within {out['agree_within']:.0%}", verdicts.to_string(index=False), ""]
    lines.append("not compared:")
    lines += [f"  {name}: {why}" for name, why in out["not_comparable"].items()]
    return "\n".join(lines)
