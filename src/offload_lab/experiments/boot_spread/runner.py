"""Experiment ``boot_spread``: the spread between boots beside the spread within a boot.

The study ran every experiment on a single boot, so it could not say whether a figure would come out the same after a
restart. A campaign with ``repeat_boots: k`` boots the server k times and runs the same experiment after each; this
module reads those runs (one experiment, e.g. ``context_repeat``, of one campaign session, or of every session of one
pod plan: ``offload-lab pod plan --pods N`` spreads the k boots over N machines, each machine a session of its own
whose ledger line names the plan and its part, and after ``pod merge`` they are pooled here, the boots numbered over
the pods; the newest session or plan with two or more boots unless ``session`` or ``plan`` names one) and reports,
per metric and per group (the context length), two kinds of spread:

- **within a boot**: each boot's per-request SD, p5 and p95; pooled SD = sqrt(mean of the per-boot variances);
- **between boots**: the SD and the range (max - min) of the k per-boot medians.

Comparing the two needs care: a median of n requests varies from sample to sample even without any boot effect. So
the between-boot SD of medians is set against its **permutation null**: the boot labels of the requests are shuffled
(keeping each boot's count) and the SD of medians recomputed; ``null_between_sd`` is the median of that distribution
and ``permutation_p`` the share of shuffles at least as large as observed (with the +1 correction). A one-way
random-effects decomposition gives the boot variance component beyond the within-boot noise and the intraclass
correlation ``icc`` (0: boots indistinguishable; 1: all variation is between boots).

Tables written into the analysis run:

``per_boot.csv``: metric, group, boot, pod (the plan's part, e.g. 2/3, or the session), boot_run, run_id, n, median,
mean, sd, p5, p95, load_1m_max, vllm_servers_max
(how busy the machine was while the run measured: the highest 1-minute load average and the most vLLM API servers
seen, ours included, sampled every 5 s by the campaign runner; empty for runs recorded before it kept them)

``boot_spread.csv`` (one row per metric and group): metric, group_by, group, boots, n_total, n_min, median_of_medians,
between_sd, between_range, between_range_rel (range / median of medians), within_sd_pooled, within_p5_mean,
within_p95_mean, within_p5_p95_width_mean, between_over_within_sd, null_between_sd, permutation_p,
boot_component_sd, icc, pods, between_pod_sd (SD of the pods' medians: the pod-to-pod part, a machine per pod;
empty with one pod), between_boot_within_pod_sd (pooled SD of boot medians within the pods that booted more than
once; empty when none did: then pod and boot effects cannot be told apart), boots_with_other_servers (boots measured
while another vLLM server ran on the machine; empty when not recorded), unit
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from offload_lab.core import runs
from offload_lab.core.errors import InputError

EXPERIMENT = "boot_spread"
LEDGER = "ledger.jsonl"  # the campaign's ledger (campaigns.ledger.LEDGER_NAME, a layer above this one)
PER_BOOT = "per_boot.csv"
SPREAD = "boot_spread.csv"
UNITS = {"tpot_ms": "ms", "ttft_s": "s", "tok_s": "tok/s", "itl_ms": "ms"}


class SpreadParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    experiment: str = Field("context_repeat", description="the repeated experiment whose runs are read")
    session: str | None = Field(None, description="campaign session; None: the newest session or pod plan with at "
                                                  "least two boots")
    plan: str | None = Field(None, description="pod plan id: every pod's boots of that plan together (after `pod "
                                               "merge`); None: as session says")
    metrics: list[str] = Field(default_factory=lambda: ["tpot_ms", "ttft_s"])
    group_by: str = Field("context_tokens", description="event field that groups requests (one row per value)")
    permutations: int = Field(10_000, ge=100)
    seed: int = 20261129


def _pods(data_root: Path | str, campaign: str) -> dict[str, dict[str, Any]]:
    """Session id -> the pod its ledger start line names (``pod.plan`` and ``pod.part`` when a plan's task ran it)."""
    path = Path(data_root) / campaign / LEDGER
    if not path.is_file():
        return {}
    return {str(e.get("session")): e.get("pod") if isinstance(e.get("pod"), dict) else {}
            for e in runs.read_events(path) if e.get("event") == "start"}


def _units(data_root: Path | str, campaign: str, experiment: str) -> dict[str, list[tuple[Path, dict[str, Any]]]]:
    """The ok runs after a boot, pooled by unit: every session of one pod plan together (``plan ID``: its pods' boots,
    after `pod merge`), any other session alone (``session ID``)."""
    pods = _pods(data_root, campaign)
    units: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for run_dir in runs.iter_runs(data_root, campaign, experiment):
        m = runs.load_manifest(run_dir)
        if m.get("outcome") != "ok" or not m.get("session") or (m.get("boot") or {}).get("index") is None:
            continue
        plan = (pods.get(m["session"]) or {}).get("plan")
        units.setdefault(f"plan {plan}" if plan else f"session {m['session']}", []).append((run_dir, m))
    return units


def _pod_label(pod: dict[str, Any], session: str) -> str:
    return str(pod.get("part") or pod.get("name") or session)


def collect(data_root: Path | str, campaign: str, experiment: str, session: str | None = None,
            metrics: Iterable[str] = ("tpot_ms",), group_by: str = "context_tokens",
            plan: str | None = None) -> tuple[pd.DataFrame, dict]:
    """Successful requests of the repeated runs of one session, or of every session of one pod plan (each pod booted
    its share), one row each, with the boot they ran after (numbered over the pods) and the pod."""
    units = _units(data_root, campaign, experiment)
    pods = _pods(data_root, campaign)
    if session is not None:
        chosen = [(d, m) for rs in units.values() for d, m in rs if m["session"] == session]
        if not chosen:
            raise InputError(f"session {session} has no ok runs of {experiment} in campaign {campaign}")
        unit = f"session {session}"
    elif plan is not None:
        unit = f"plan {plan}"
        if unit not in units:
            raise InputError(f"pod plan {plan} has no ok runs of {experiment} in campaign {campaign} (merge its pods' "
                             "data first: `offload-lab pod merge`)")
        chosen = units[unit]
    else:
        multi = {u: rs for u, rs in units.items() if len({m["boot"]["run"] for _, m in rs}) >= 2}
        if not multi:
            raise InputError(f"no session or pod plan of campaign {campaign} has runs of {experiment} after two or "
                             "more boots; run a campaign with repeat_boots: 2 or more first")
        unit = max(multi, key=lambda u: max(m["started_at"] for _, m in multi[u]))
        chosen = multi[unit]

    def order(item: tuple[Path, dict[str, Any]]) -> tuple[str, int, str]:
        m = item[1]
        return (_pod_label(pods.get(m["session"]) or {}, m["session"]), m["boot"]["index"], m["started_at"])

    chosen = sorted(chosen, key=order)
    boot_ids: dict[str, int] = {}
    rows = []
    sources = []
    for run_dir, m in chosen:
        boot = boot_ids.setdefault(str(m["boot"]["run"]), len(boot_ids))
        pod = _pod_label(pods.get(m["session"]) or {}, m["session"])
        load = m.get("host_load") or {}
        sources.append({"run": str(run_dir), "run_id": m["run_id"], "boot": boot, "boot_run": m["boot"]["run"],
                        "session": m["session"], "pod": pod, "host_load": load})
        # What else ran on the machine while the run measured (the runner samples it): a boot that differs while
        # another vLLM server shared the CPUs is not evidence of a boot effect.
        starts, ends, during = load.get("start") or {}, load.get("end") or {}, load.get("during") or {}
        servers = [x for x in (starts.get("vllm_servers"), ends.get("vllm_servers"), during.get("vllm_servers_max"))
                   if x is not None]
        loads = [x for x in ((starts.get("loadavg") or [None])[0], (ends.get("loadavg") or [None])[0],
                             during.get("load_1m_max")) if x is not None]
        busy = {"load_1m_max": max(loads, default=None), "vllm_servers_max": max(servers, default=None)}
        for e in runs.read_events(run_dir / runs.EVENTS):
            if e.get("kind") != "request" or not e.get("ok") or e.get("prompt_length_mismatch"):
                continue
            row = {"boot": boot, "boot_run": Path(m["boot"]["run"] or "").name, "run_id": m["run_id"], "pod": pod,
                   "group": e.get(group_by), **busy}
            for metric in metrics:
                row[metric] = e.get(metric)
            rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        raise InputError(f"{unit}: the runs of {experiment} hold no successful requests")
    sessions = sorted({m["session"] for _, m in chosen})
    return frame, {"session": sessions[0] if len(sessions) == 1 else None, "sessions": sessions,
                   "plan": unit.split(" ", 1)[1] if unit.startswith("plan ") else None,
                   "pods": sorted({r["pod"] for r in sources}), "runs": sources, "group_by": group_by}


def per_boot(requests: pd.DataFrame, metric: str) -> pd.DataFrame:
    rows = []
    for (group, boot), sub in requests.groupby(["group", "boot"], sort=True):
        x = sub[metric].dropna().to_numpy(dtype=float)
        if x.size == 0:
            continue
        p5, p50, p95 = np.percentile(x, [5, 50, 95])
        first = sub.iloc[0]
        rows.append({"metric": metric, "group": group, "boot": int(boot), "pod": first.get("pod"),
                     "boot_run": first["boot_run"],
                     "run_id": first["run_id"], "n": int(x.size), "median": float(p50),
                     "mean": float(x.mean()), "sd": float(x.std(ddof=1)) if x.size > 1 else None,
                     "p5": float(p5), "p95": float(p95),
                     **{k: first.get(k) for k in ("load_1m_max", "vllm_servers_max")}})
    return pd.DataFrame(rows)


def _sd_of_medians(values: np.ndarray, labels: np.ndarray, boots: np.ndarray) -> float:
    return float(np.std([np.median(values[labels == b]) for b in boots], ddof=1))


def permutation_null(values: np.ndarray, labels: np.ndarray, permutations: int,
                     rng: np.random.Generator) -> np.ndarray:
    """SD of per-boot medians with the boot labels shuffled (each boot keeps its request count)."""
    boots = np.unique(labels)
    out = np.empty(permutations)
    for i in range(permutations):
        out[i] = _sd_of_medians(values, rng.permutation(labels), boots)
    return out


def variance_components(values: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """One-way random effects (unequal group sizes): the boot SD component and the intraclass correlation."""
    boots = np.unique(labels)
    k, n_total = len(boots), values.size
    groups = [values[labels == b] for b in boots]
    sizes = np.array([g.size for g in groups], dtype=float)
    grand = values.mean()
    msb = float(sum(g.size * (g.mean() - grand) ** 2 for g in groups) / (k - 1))
    msw = float(sum(((g - g.mean()) ** 2).sum() for g in groups) / (n_total - k))
    n0 = (n_total - (sizes ** 2).sum() / n_total) / (k - 1)
    between = max(0.0, (msb - msw) / n0)
    icc = between / (between + msw) if between + msw > 0 else 0.0
    return float(np.sqrt(between)), float(icc)


def spread(requests: pd.DataFrame, metric: str, group_by: str = "context_tokens", permutations: int = 10_000,
           seed: int = 20261129) -> pd.DataFrame:
    """One row per group: between-boot spread of medians beside within-boot spread (see the module docstring)."""
    rng = np.random.default_rng(seed)
    pb = per_boot(requests, metric)
    rows = []
    for group, sub in requests.groupby("group", sort=True):
        sub = sub.dropna(subset=[metric])
        values = sub[metric].to_numpy(dtype=float)
        labels = sub["boot"].to_numpy()
        boots = np.unique(labels)
        if boots.size < 2:
            continue
        b = pb[pb["group"] == group]
        medians = b["median"].to_numpy(dtype=float)
        mom = float(np.median(medians))
        between_sd = float(np.std(medians, ddof=1))
        within_sd = float(np.sqrt(np.nanmean(b["sd"].to_numpy(dtype=float) ** 2)))
        null = permutation_null(values, labels, permutations, rng)
        component, icc = variance_components(values, labels)
        rows.append({
            "metric": metric, "group_by": group_by, "group": group, "boots": int(boots.size),
            "n_total": int(values.size), "n_min": int(b["n"].min()),
            "median_of_medians": mom,
            "between_sd": between_sd,
            "between_range": float(medians.max() - medians.min()),
            "between_range_rel": float((medians.max() - medians.min()) / mom) if mom else None,
            "within_sd_pooled": within_sd,
            "within_p5_mean": float(b["p5"].mean()),
            "within_p95_mean": float(b["p95"].mean()),
            "within_p5_p95_width_mean": float((b["p95"] - b["p5"]).mean()),
            "between_over_within_sd": between_sd / within_sd if within_sd else None,
            "null_between_sd": float(np.median(null)),
            "permutation_p": float((1 + np.sum(null >= between_sd - 1e-12)) / (1 + permutations)),
            "boot_component_sd": component,
            "icc": icc,
            **_pod_part(sub, b, metric),
            "boots_with_other_servers": _busy_boots(b),
            "unit": UNITS.get(metric, ""),
        })
    return pd.DataFrame(rows)


def analyze(data_root: Path | str, campaign: str, params: SpreadParams) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    requests, meta = collect(data_root, campaign, params.experiment, params.session, params.metrics,
                             params.group_by, params.plan)
    per = pd.concat([per_boot(requests, m) for m in params.metrics], ignore_index=True)
    sp = pd.concat([spread(requests, m, params.group_by, params.permutations, params.seed) for m in params.metrics],
                   ignore_index=True)
    return per, sp, meta


def _pod_part(requests: pd.DataFrame, boots: pd.DataFrame, metric: str) -> dict[str, Any]:
    """The pod-to-pod part of the spread: the SD of the pods' medians (each pod a machine of its own, booted its share
    of the boots), and the SD of boot medians within a pod where a pod booted more than once (None where none did)."""
    pod_medians = requests.groupby("pod")[metric].median() if "pod" in requests else pd.Series(dtype=float)
    within = [float(np.var(g["median"].to_numpy(dtype=float), ddof=1)) for _, g in boots.groupby("pod") if len(g) > 1] \
        if "pod" in boots else []
    return {"pods": int(pod_medians.size),
            "between_pod_sd": (float(np.std(pod_medians.to_numpy(dtype=float), ddof=1)) if pod_medians.size > 1
                               else None),
            "between_boot_within_pod_sd": float(np.sqrt(np.mean(within))) if within else None}


def _busy_boots(per_boot_rows: pd.DataFrame) -> int | None:
    """Boots during whose run more than one vLLM API server was seen (ours and another); None when not recorded."""
    if "vllm_servers_max" not in per_boot_rows or per_boot_rows["vllm_servers_max"].isna().all():
        return None
    return int((per_boot_rows["vllm_servers_max"].fillna(0) > 1).sum())


def run_analysis(run: runs.Run, data_root: Path | str, campaign: str, params: SpreadParams) -> pd.DataFrame:
    """Write per_boot.csv and boot_spread.csv into the run; record the session and the runs read."""
    per, sp, meta = analyze(data_root, campaign, params)
    run.write_table(PER_BOOT, per)
    run.write_table(SPREAD, sp)
    sources = [{**r, "events_sha256": runs.sha256_file(Path(r["run"]) / runs.EVENTS)} for r in meta["runs"]]
    run.update(analysed={"experiment": params.experiment, "session": meta["session"], "sessions": meta["sessions"],
                         "plan": meta["plan"], "pods": meta["pods"], "runs": sources})
    return sp


def plot(run_dir: Path | str, metric: str = "tpot_ms") -> Path:
    """Per-boot medians with each boot's p5-p95 bar, per group: the picture of between against within."""
    from matplotlib.figure import Figure

    run_dir = Path(run_dir)
    per = pd.read_csv(run_dir / PER_BOOT)
    per = per[per["metric"] == metric]
    groups = sorted(per["group"].unique())
    boots = sorted(per["boot"].unique())
    fig = Figure(figsize=(6.4, 3.6))  # outside pyplot: no backend chosen for the notebook that calls this
    ax = fig.subplots()
    width = 0.8 / max(len(boots), 1)
    for j, b in enumerate(boots):
        sub = per[per["boot"] == b].set_index("group").reindex(groups)
        x = np.arange(len(groups)) + (j - (len(boots) - 1) / 2) * width
        ax.errorbar(x, sub["median"], yerr=[sub["median"] - sub["p5"], sub["p95"] - sub["median"]], fmt="o",
                    capsize=3, label=f"boot {b + 1}")
    ax.set_xticks(np.arange(len(groups)), [str(g) for g in groups])
    ax.set_xlabel("context tokens")
    ax.set_ylabel(f"{metric} (median, p5-p95)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    out = run_dir / "figures"
    out.mkdir(exist_ok=True)
    path = out / f"boot_spread_{metric}.png"
    runs.atomic_savefig(fig, path, dpi=120)
    return path
