"""Tensor classification: each tensor name to a category by ordered regular-expression rules per architecture.

First match wins: routed expert (with its layer and expert), shared expert, dense MLP, attention, router, embedding,
lm_head, Engram table, norm, MTP, and "other" for anything unmatched -- reported with its bytes, never dropped.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

from offload_lab.core.errors import InputError
from offload_lab.fit.headers import Checkpoint, Tensor

CATEGORIES = (
    "routed_expert", "shared_expert", "dense_mlp", "attention", "router", "embedding", "lm_head", "engram", "norm",
    "mtp", "other",
)
EXL3_COMPONENTS = frozenset({"trellis", "suh", "svh", "mcg", "mul1"})
DEFAULT_ENGRAM_PATTERN = r"(?i)(^|\.)engram"


@dataclass(frozen=True)
class Rule:
    category: str
    pattern: str
    stacked: bool = False  # one tensor holds every expert of the layer along dim 0 (vLLM / vllm-exl3 layout)

    def compiled(self) -> re.Pattern[str]:
        return _compile(self.pattern)


_compile_cache: dict[str, re.Pattern[str]] = {}


def _compile(pattern: str) -> re.Pattern[str]:
    if pattern not in _compile_cache:
        _compile_cache[pattern] = re.compile(pattern)
    return _compile_cache[pattern]


_L = r"(?P<layer>\d+)"
_E = r"(?P<expert>\d+)"
_STACKED = r"(?:w13|w2|w1|w3|gate_up_proj|down_proj|gate_proj|up_proj)(?:_[a-z0-9]+)?(?:\.[a-z0-9_]+)?$"


def _moe_rules(block: str, router: str, dense: str | None, shared: str | None = None,
               stacked: bool = True) -> list[Rule]:
    """The rules every MoE naming shares, in their order: routed experts (one tensor per expert, then the stacked
    layout), the shared expert, the router, the dense MLP of the layers without experts. ``block`` is the layer's
    MoE prefix as a pattern (for ``model.layers.N.mlp.``); the other arguments are what follows it."""
    rules = [Rule("routed_expert", rf"{block}experts\.{_E}\.")]
    if stacked:
        rules.append(Rule("routed_expert", rf"{block}experts\.{_STACKED}", stacked=True))
    if shared:
        rules.append(Rule("shared_expert", rf"{block}{shared}"))
    rules.append(Rule("router", rf"{block}{router}"))
    if dense:
        rules.append(Rule("dense_mlp", rf"{block}{dense}"))
    return rules


# Hugging Face names (DeepSeek-V3 in transformers, Qwen2-MoE, Qwen3-MoE, Mixtral): ``model.layers.N.mlp...``.
_HF_MLP = rf"^model\.layers\.{_L}\.mlp\."
_HF_DENSE = r"(?:gate_proj|up_proj|down_proj)\."
_HF_COMMON_TAIL = [
    Rule("attention", rf"^model\.layers\.{_L}\.self_attn\."),
    Rule("norm", rf"^model\.layers\.{_L}\.(?:input_layernorm|post_attention_layernorm)\."),
    Rule("embedding", r"^model\.embed_tokens\."),
    Rule("norm", r"^model\.norm\."),
    Rule("lm_head", r"^lm_head\."),
]

RULESETS: dict[str, list[Rule]] = {
    # deepseek-ai/DeepSeek-V3 (and R1, V3.1, V3.2) as published on the Hub, FP8 with weight_scale_inv; V3.2's
    # indexer lives under self_attn and is attention. Layers >= num_hidden_layers are the MTP module (see classify).
    "deepseek_v3": [
        *_moe_rules(_HF_MLP, r"gate\.(?:weight|bias|e_score_correction_bias)$", _HF_DENSE, r"shared_experts\."),
        Rule("mtp", rf"^model\.layers\.{_L}\.(?:eh_proj|enorm|hnorm|shared_head)\."),
        *_HF_COMMON_TAIL,
    ],
    # DeepSeek's own reference names (V3 inference code, V4 native): ``layers.N.ffn.experts.E.w1``, ``embed``,
    # ``head``, ``mtp.*``. V4's hash-routed layers keep a ``gate.tid2eid`` table: router.
    "deepseek_v4": [
        Rule("mtp", r"^mtp\."),
        *_moe_rules(rf"^layers\.{_L}\.ffn\.", r"gate\.(?:weight|bias|tid2eid|e_score_correction_bias)$",
                    r"(?:w1|w2|w3)\.", r"shared_experts\."),
        Rule("attention", rf"^layers\.{_L}\.attn\."),
        Rule("norm", rf"^layers\.{_L}\.(?:attn_norm|ffn_norm)\."),
        Rule("embedding", r"^embed\."),
        Rule("norm", r"^norm\."),
        Rule("lm_head", r"^head\."),
    ],
    # Qwen2-MoE's shared expert is singular, with its own sigmoid gate; both run for every token.
    "qwen2_moe": [*_moe_rules(_HF_MLP, r"gate\.weight$", _HF_DENSE, r"shared_expert(?:_gate)?\."), *_HF_COMMON_TAIL],
    # mlp_only_layers / decoder_sparse_step leave some Qwen3-MoE layers dense.
    "qwen3_moe": [*_moe_rules(_HF_MLP, r"gate\.weight$", _HF_DENSE), *_HF_COMMON_TAIL],
    "mixtral": [*_moe_rules(rf"^model\.layers\.{_L}\.block_sparse_moe\.", r"gate\.weight$", None, stacked=False),
                *_HF_COMMON_TAIL],
}

# config.json model_type / architectures -> rule set.
ARCH_ALIASES = {
    "deepseek_v3": "deepseek_v3", "deepseek_v32": "deepseek_v3", "deepseek_v2": "deepseek_v3",
    "deepseekv3forcausallm": "deepseek_v3", "deepseekv2forcausallm": "deepseek_v3",
    "deepseek_v4": "deepseek_v4", "deepseekv4forcausallm": "deepseek_v4",
    "qwen2_moe": "qwen2_moe", "qwen2moeforcausallm": "qwen2_moe",
    "qwen3_moe": "qwen3_moe", "qwen3moeforcausallm": "qwen3_moe",
    "mixtral": "mixtral", "mixtralforcausallm": "mixtral",
}


def detect_architecture(config: Mapping[str, Any] | None, names: Iterable[str]) -> str:
    """The rule set for a checkpoint: from config.json when it names a known one, else from the tensor names."""
    names = list(names)
    if config:
        for key in [config.get("model_type"), *(config.get("architectures") or [])]:
            if isinstance(key, str) and key.lower() in ARCH_ALIASES:
                arch = ARCH_ALIASES[key.lower()]
                # DeepSeek-V4 on the Hub may keep the native names under a V3-style config.
                if arch == "deepseek_v3" and any(n.startswith("layers.") for n in names[:1000]):
                    return "deepseek_v4"
                return arch
    best, best_hits = "qwen3_moe", -1
    for arch, rules in RULESETS.items():
        pats = [r.compiled() for r in rules if r.category == "routed_expert"]
        hits = sum(1 for n in names if any(p.match(n) for p in pats))
        # Prefer the set that also knows the shared expert spelling, so Qwen2-MoE is not read as Qwen3-MoE.
        hits += sum(1 for n in names if ".mlp.shared_expert." in n) if arch == "qwen2_moe" else 0
        hits += sum(1 for n in names if ".mlp.shared_experts." in n) if arch == "deepseek_v3" else 0
        if hits > best_hits:
            best, best_hits = arch, hits
    return best


@dataclass(frozen=True)
class Classified:
    name: str
    category: str
    nbytes: int
    layer: int | None
    expert: int | None  # None for a stacked tensor (all experts of the layer) or a non-expert
    stacked_experts: int | None
    quant: str | None  # "exl3" for EXL3 components, "fp8-block" for weight_scale_inv, else None
    rule: str | None  # the pattern that matched ("" for the engram rule, None for other)


@dataclass
class Classification:
    architecture: str
    engram_pattern: str
    items: list[Classified]
    num_hidden_layers: int | None

    def by_category(self) -> dict[str, dict[str, int]]:
        out = {c: {"tensors": 0, "bytes": 0} for c in CATEGORIES}
        for it in self.items:
            out[it.category]["tensors"] += 1
            out[it.category]["bytes"] += it.nbytes
        return out

    def other(self) -> list[Classified]:
        return sorted((it for it in self.items if it.category == "other"), key=lambda it: -it.nbytes)

    def expert_bytes(self) -> dict[tuple[int, int], int]:
        """Bytes of each routed (layer, expert); a stacked tensor is split evenly over its first dimension."""
        out: dict[tuple[int, int], int] = {}
        for it in self.items:
            if it.category != "routed_expert" or it.layer is None:
                continue
            if it.expert is not None:
                key = (it.layer, it.expert)
                out[key] = out.get(key, 0) + it.nbytes
            elif it.stacked_experts:
                share, rest = divmod(it.nbytes, it.stacked_experts)
                for e in range(it.stacked_experts):
                    key = (it.layer, e)
                    out[key] = out.get(key, 0) + share + (1 if e < rest else 0)
        return out

    def moe_layers(self) -> list[int]:
        return sorted({layer for layer, _ in self.expert_bytes()})


def classify(ckpt: Checkpoint, architecture: str | None = None, engram_pattern: str = DEFAULT_ENGRAM_PATTERN,
             ) -> Classification:
    """Classify every tensor; see the module docstring. ``architecture`` overrides detection."""
    names = list(ckpt.tensors)
    arch = architecture or detect_architecture(ckpt.config, names)
    if arch not in RULESETS:
        raise InputError(f"unknown architecture {arch!r}; known: {', '.join(sorted(RULESETS))}")
    try:
        engram = re.compile(engram_pattern)
    except re.error as e:
        raise InputError(f"Engram pattern {engram_pattern!r} is not a regular expression: {e}") from e
    rules = [(r, r.compiled()) for r in RULESETS[arch]]
    n_layers = config_int(ckpt.config, "num_hidden_layers", "n_layers")
    items = [_classify_one(ckpt.tensors[n], rules, engram, n_layers) for n in names]
    if architecture and not any(it.category == "routed_expert" for it in items):
        raise InputError(f"--architecture {architecture}: its rules match no routed expert of {ckpt.source} (detected: "
                         f"{detect_architecture(ckpt.config, names)}); leave --architecture out or choose another")
    return Classification(architecture=arch, engram_pattern=engram_pattern, items=items, num_hidden_layers=n_layers)


def _classify_one(t: Tensor, rules: list[tuple[Rule, re.Pattern[str]]], engram: re.Pattern[str],
                  n_layers: int | None) -> Classified:
    last = t.name.rsplit(".", 1)[-1]
    quant = "exl3" if last in EXL3_COMPONENTS or last.split("_")[-1] in EXL3_COMPONENTS else (
        "fp8-block" if last == "weight_scale_inv" else None)
    if engram.search(t.name):
        return Classified(t.name, "engram", t.nbytes, None, None, None, quant, "")
    for rule, pat in rules:
        m = pat.match(t.name)
        if not m:
            continue
        groups = m.groupdict()
        layer = int(groups["layer"]) if groups.get("layer") is not None else None
        expert = int(groups["expert"]) if groups.get("expert") is not None else None
        category = rule.category
        # DeepSeek-V3 on the Hub stores its MTP module as extra layers after the last decoder layer.
        if layer is not None and n_layers is not None and layer >= n_layers:
            category = "mtp"
        stacked = t.shape[0] if rule.stacked and t.shape else None
        return Classified(t.name, category, t.nbytes, layer, expert, stacked if category == "routed_expert" else None,
                          quant, rule.pattern)
    return Classified(t.name, "other", t.nbytes, None, None, None, quant, None)


def config_int(config: Mapping[str, Any] | None, *keys: str) -> int | None:
    for cfg in config_levels(config):
        for k in keys:
            v = cfg.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
    return None


def config_levels(config: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    # Multimodal and some newer configs nest the language model under text_config.
    if not config:
        return []
    nested = config.get("text_config")
    return [config, nested] if isinstance(nested, Mapping) else [config]


def summary(ckpt: Checkpoint, cls: Classification, other_limit: int = 20) -> dict[str, Any]:
    """A JSON-ready audit of what the checkpoint holds, by category, with the unmatched tensors named."""
    eb = cls.expert_bytes()
    sizes = sorted(eb.values())
    layers = cls.moe_layers()
    other = cls.other()
    return {
        "checkpoint": ckpt.record(),
        "architecture": cls.architecture,
        "engram_pattern": cls.engram_pattern,
        "categories": cls.by_category(),
        "routed_experts": {
            "layers": len(layers),
            "first_layer": layers[0] if layers else None,
            "last_layer": layers[-1] if layers else None,
            "experts": len(eb),
            "experts_per_layer_max": max((sum(1 for (layer, _) in eb if layer == x) for x in layers), default=0),
            "bytes_per_expert_min": sizes[0] if sizes else None,
            "bytes_per_expert_median": sizes[len(sizes) // 2] if sizes else None,
            "bytes_per_expert_max": sizes[-1] if sizes else None,
        },
        "other": {
            "tensors": len(other),
            "bytes": sum(o.nbytes for o in other),
            "largest": [{"name": o.name, "bytes": o.nbytes} for o in other[:other_limit]],
        },
    }


def tensor_table(cls: Classification) -> list[dict[str, Any]]:
    """One row per tensor (name, category, layer, expert, bytes): the audit's raw record."""
    return [asdict(it) for it in cls.items]
