"""Claims of the audit experiment: the model at the study's scale, why it does not fit, and the plan."""

from __future__ import annotations

import functools

from typing import Any


from offload_lab.fit.memory import GiB
from offload_lab.paper.claims import ClaimDef, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import (fmt_billions, fmt_gib, fmt_int, fmt_list_words, fmt_pct,
                                       fmt_sig)

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)


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
