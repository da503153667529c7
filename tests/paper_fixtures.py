"""Fixture data for the claims and paper tests: run directories written the way the experiments write them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from offload_lab import runs

REPO_ROOT = Path(__file__).resolve().parents[1]

TINY_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "num_hidden_layers": 4,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "hidden_size": 64,
    "moe_intermediate_size": 32,
    "vocab_size": 1024,
}

CONTEXT_LENGTHS = [128, 512, 2048, 8192]
REPEATS = 3
OUTPUT_TOKENS = 32


def write_boots(data_root: Path, campaign: str = "embedded", run_id: str = "20260101T000000Z-b00001",
                startup_s: float = 12.5, outcome: str = "ok") -> Path:
    run = runs.new_run(data_root, campaign, "boots", {"stack": "configs/stacks/embedded.yaml"}, run_id=run_id)
    run.write_text("server.log", "INFO starting server\nINFO ready\n")
    run.write_json(
        "boot.json",
        {
            "outcome": "ready",
            "startup_s": startup_s,
            "command": ["vllm", "serve", "models/tiny-moe"],
            "model": {"path": "models/tiny-moe", "config": TINY_CONFIG},
        },
    )
    run.finish(outcome)
    return run.path


def context_events() -> list[dict]:
    events = []
    for ctx in CONTEXT_LENGTHS:
        for r in range(REPEATS):
            wiggle = (r - 1) * 0.01  # deterministic spread so p5 < median < p95
            events.append(
                {
                    "context_tokens": ctx,
                    "repeat": r,
                    "ttft_s": round(0.04 + ctx * 2.0e-5 * (1 + wiggle), 6),
                    "tpot_ms": round(20.0 + ctx * 0.0025 * (1 + wiggle) + r * 0.1, 4),
                    "output_tokens": OUTPUT_TOKENS,
                }
            )
    return events


def context_summary(events: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(events)
    rows = []
    for ctx, g in frame.groupby("context_tokens"):
        tok_s = 1000.0 / g["tpot_ms"]
        rows.append(
            {
                "context_tokens": int(ctx),
                "n": len(g),
                "ttft_median_s": g["ttft_s"].median(),
                "ttft_p5_s": g["ttft_s"].quantile(0.05),
                "ttft_p95_s": g["ttft_s"].quantile(0.95),
                "tpot_median_ms": g["tpot_ms"].median(),
                "tpot_p5_ms": g["tpot_ms"].quantile(0.05),
                "tpot_p95_ms": g["tpot_ms"].quantile(0.95),
                "tok_s_median": tok_s.median(),
            }
        )
    return pd.DataFrame(rows).sort_values("context_tokens")


def write_context(data_root: Path, campaign: str = "embedded", run_id: str = "20260101T001000Z-c00001",
                  outcome: str = "ok") -> Path:
    params = {"context_lengths": CONTEXT_LENGTHS, "output_tokens": OUTPUT_TOKENS, "repeats": REPEATS}
    run = runs.new_run(data_root, campaign, "context", params, run_id=run_id, notebook="notebooks/context.ipynb")
    events = context_events()
    with run.events("events.jsonl") as log:
        for e in events:
            log.append(e)
    run.write_table("summary.csv", context_summary(events))
    run.finish(outcome)
    return run.path


def make_campaign(data_root: Path, campaign: str = "embedded", experiments: tuple[str, ...] = ("boots", "context")
                  ) -> Path:
    """A campaign with one ok run per experiment named (plus a failed context run, which must be ignored)."""
    if "boots" in experiments:
        write_boots(data_root, campaign)
    if "context" in experiments:
        write_context(data_root, campaign)
        # A later run that failed: newest by id, but not ok, so the paper must not read it.
        write_context(data_root, campaign, run_id="20260101T002000Z-c00002", outcome="failed")
    return Path(data_root)


def copy_paper_sources(dst_root: Path) -> Path:
    """A private copy of the paper's sources, so a test can edit paper.qmd without touching the checkout."""
    for rel in ("paper", "_extensions"):
        src = REPO_ROOT / rel
        shutil.copytree(src, dst_root / rel, ignore=shutil.ignore_patterns("_generated", ".gitignore"))
    shutil.copy2(REPO_ROOT / "_quarto.yml", dst_root / "_quarto.yml")
    return dst_root
