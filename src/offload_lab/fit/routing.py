"""Routing counts: how often each router sends a token to each (layer, expert) -- the statistics activation-aware
plans and the host-traffic prediction are computed from.

Two sources:

- here, :func:`collect_hf` runs a Hugging Face model (the tiny model) in transformers over a list of texts, in a
  subprocess with the server environment's Python (torch and transformers live there, not in the lab environment),
  and counts the top-k experts of every token at every MoE layer from the router logits;
- on a pod, :func:`from_routed_experts` counts vLLM's routed-experts capture (``--enable-return-routed-experts``:
  int16 arrays ``[tokens, moe_layers, top_k]`` per request).

Counts are stored as JSON (:meth:`RoutingCounts.save`), so a plan can record the sha256 of the statistics it used.
``probabilities()`` is the per-token probability that a layer's router picks an expert: each row sums to top_k.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from offload_lab.core import inputs
from offload_lab.core.errors import InputError, ProducerError

FORMAT = "offload-lab-routing-counts"
VERSION = 1
TORCH_PYTHON_ENV = "OFFLOAD_LAB_TORCH_PYTHON"


@dataclass
class RoutingCounts:
    model: str
    layers: list[int]  # checkpoint layer numbers of the MoE layers, in order
    num_experts: int
    top_k: int
    tokens: int  # tokens counted at every layer
    counts: np.ndarray  # [len(layers), num_experts] int64
    source: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.counts = np.asarray(self.counts, dtype=np.int64)
        if self.counts.shape != (len(self.layers), self.num_experts):
            raise InputError(f"routing counts: shape {self.counts.shape} does not match {len(self.layers)} layers "
                             f"x {self.num_experts} experts")
        if self.tokens <= 0:
            raise InputError("routing counts: no tokens counted")
        if (self.counts < 0).any():
            raise InputError("routing counts: negative count")
        sums = self.counts.sum(axis=1)
        # Each token picks exactly top_k experts per layer; anything else means counts were pooled or misread
        # (the "too clean" bugs the anchor note warns about).
        if not np.all(sums == self.tokens * self.top_k):
            bad = int(np.argmax(sums != self.tokens * self.top_k))
            raise InputError(f"routing counts: layer {self.layers[bad]} has {int(sums[bad])} routings, expected "
                             f"tokens x top_k = {self.tokens * self.top_k}")

    def probabilities(self) -> np.ndarray:
        return self.counts / float(self.tokens)

    def layer_row(self, layer: int) -> int:
        try:
            return self.layers.index(layer)
        except ValueError:
            raise InputError(f"routing counts have no layer {layer} (they cover {self.layers})") from None

    def __add__(self, other: RoutingCounts) -> RoutingCounts:
        if (self.layers, self.num_experts, self.top_k) != (other.layers, other.num_experts, other.top_k):
            raise InputError("cannot add routing counts of different layouts")
        return RoutingCounts(self.model, self.layers, self.num_experts, self.top_k, self.tokens + other.tokens,
                             self.counts + other.counts, {"sum_of": [self.source, other.source]})

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "model": self.model, "layers": self.layers,
                "num_experts": self.num_experts, "top_k": self.top_k, "tokens": self.tokens,
                "source": self.source, "counts": self.counts.tolist()}

    def save(self, path: Path | str) -> Path:
        from offload_lab.core.runs import atomic_write_text

        atomic_write_text(Path(path), json.dumps(self.to_dict(), separators=(",", ":")) + "\n")
        return Path(path)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "routing counts") -> RoutingCounts:
        if d.get("format") != FORMAT:
            raise InputError(f"{where}: not an offload-lab routing counts file (format {d.get('format')!r})")
        try:
            return cls(str(d["model"]), [int(x) for x in d["layers"]], int(d["num_experts"]), int(d["top_k"]),
                       int(d["tokens"]), np.array(d["counts"], dtype=np.int64), dict(d.get("source") or {}))
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{where}: malformed ({e})") from e

    @classmethod
    def load(cls, path: Path | str) -> RoutingCounts:
        p = Path(path)
        return cls.from_dict(inputs.read_json(p, "routing counts", expect=dict), f"routing counts {p}")


def from_routed_experts(captures: Iterable[np.ndarray], layers: Sequence[int], num_experts: int,
                        model: str = "", source: dict[str, Any] | None = None) -> RoutingCounts:
    """Count vLLM's routed-experts capture: arrays ``[tokens, moe_layers, top_k]`` (dense layers, if present as
    empty rows, are dropped by ``layers`` naming only the MoE layers' columns)."""
    counts = np.zeros((len(layers), num_experts), dtype=np.int64)
    tokens = 0
    top_k = None
    for arr in captures:
        a = np.asarray(arr)
        if a.ndim != 3 or a.shape[1] != len(layers):
            raise InputError(f"routed-experts capture of shape {a.shape}: expected [tokens, {len(layers)}, top_k]")
        if top_k is None:
            top_k = a.shape[2]
        elif a.shape[2] != top_k:
            raise InputError("routed-experts captures disagree on top_k")
        if a.size and (a.min() < 0 or a.max() >= num_experts):
            raise InputError(f"routed-experts capture holds expert ids outside 0..{num_experts - 1}")
        tokens += a.shape[0]
        for j in range(len(layers)):
            counts[j] += np.bincount(a[:, j, :].reshape(-1).astype(np.int64), minlength=num_experts)
    if top_k is None:
        raise InputError("no routed-experts captures given")
    return RoutingCounts(model, list(layers), num_experts, int(top_k), tokens, counts,
                         source or {"kind": "vllm-routed-experts"})


def uniform_counts(layers: Sequence[int], num_experts: int, top_k: int) -> RoutingCounts:
    """Every expert equally likely, p = top_k / num_experts: the routing assumed where none is published (the study
    publishes no routing counts). Exact: num_experts tokens, each expert chosen top_k times."""
    counts = np.full((len(layers), num_experts), top_k, dtype=np.int64)
    return RoutingCounts("uniform", list(layers), num_experts, top_k, num_experts, counts, {"kind": "uniform"})


def synthetic_counts(layers: Sequence[int], num_experts: int, top_k: int, tokens: int, skew: float = 1.0,
                     seed: int = 0) -> RoutingCounts:
    """Zipf-like counts (popularity ~ rank^-skew, a random expert order per layer): for scale tests only, never
    presented as any model's routing."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((len(layers), num_experts), dtype=np.int64)
    weights = 1.0 / np.arange(1, num_experts + 1) ** skew
    for j in range(len(layers)):
        p = rng.permutation(weights / weights.sum())
        # Each token picks top_k distinct experts: sample without replacement by Gumbel top-k over log p.
        keys = np.log(p)[None, :] + rng.gumbel(size=(tokens, num_experts))
        chosen = np.argpartition(-keys, top_k - 1, axis=1)[:, :top_k]
        counts[j] = np.bincount(chosen.reshape(-1), minlength=num_experts)
    return RoutingCounts("synthetic", list(layers), num_experts, top_k, tokens, counts,
                         {"kind": "synthetic-zipf", "skew": skew, "seed": seed})


# ----------------------------------------------------------------------------------------------------------------
# Collecting from a Hugging Face model in a torch environment


def torch_python(repo_root: Path | None = None) -> str:
    """A Python with torch and transformers: $OFFLOAD_LAB_TORCH_PYTHON, else the server environment's."""
    env = os.environ.get(TORCH_PYTHON_ENV)
    if env:
        return env
    from offload_lab.core.paths import find_root

    root = repo_root or find_root(Path(__file__).resolve().parent)
    candidate = root / ".venvs" / "server" / "bin" / "python"
    if candidate.exists():
        return str(candidate)
    raise InputError(f"no Python with torch and transformers found: build the server environment (make server-env) "
                     f"or set {TORCH_PYTHON_ENV} to one")


def collect_hf(model_dir: Path | str, texts: Sequence[str], python: str | None = None, max_tokens: int = 512,
               timeout_s: float = 1800) -> dict[str, Any]:
    """Run the router of a Hugging Face model over ``texts``; returns the script's JSON (per-text counts)."""
    if not texts:
        raise InputError("no texts to route")
    py = python or torch_python()
    script = Path(__file__).with_name("hf_routing_script.py")
    req = json.dumps({"model": str(Path(model_dir).resolve()), "texts": list(texts), "max_tokens": max_tokens})
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["HF_HUB_OFFLINE"] = "1"  # a local directory only: never reach for the network
    try:
        proc = subprocess.run([py, str(script)], input=req, capture_output=True, text=True, timeout=timeout_s,
                              env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ProducerError(f"routing counts: could not run {py} {script.name}: {e}") from e
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise ProducerError(f"routing counts: {script.name} failed with exit code {proc.returncode}:\n{tail}")
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise ProducerError(f"routing counts: {script.name} printed no JSON ({e})") from e


def counts_from_collected(result: dict[str, Any], indices: Iterable[int] | None = None, model: str = "",
                          source: dict[str, Any] | None = None) -> RoutingCounts:
    """Sum the per-text counts of :func:`collect_hf` over ``indices`` (all texts by default)."""
    texts = result["texts"]
    idx = list(range(len(texts))) if indices is None else list(indices)
    if not idx:
        raise InputError("no texts selected")
    counts = np.sum([np.array(texts[i]["counts"], dtype=np.int64) for i in idx], axis=0)
    tokens = sum(int(texts[i]["tokens"]) for i in idx)
    src = {"kind": "transformers-router-logits", "texts": len(idx), "torch": result.get("torch"),
           "transformers": result.get("transformers")}
    src.update(source or {})
    return RoutingCounts(model, [int(x) for x in result["layers"]], int(result["num_experts"]), int(result["top_k"]),
                         tokens, counts, src)


def corpus_paragraphs(min_chars: int = 200) -> list[str]:
    """The package's own English corpus (the tiny tokenizer's training text), as paragraphs of at least
    ``min_chars`` characters (short ones, like headings, are joined to the next)."""
    from offload_lab.server.tinymodel import read_corpus

    out: list[str] = []
    buf = ""
    for para in read_corpus().split("\n\n"):
        buf = f"{buf}\n\n{para}".strip() if buf else para.strip()
        if len(buf) >= min_chars:
            out.append(buf)
            buf = ""
    if buf:
        out.append(buf)
    return out


def shifted_texts(n: int, words: int = 120, seed: str = "routing-shift") -> list[str]:
    """Texts unlike the corpus (a fixed word list in random order): a distribution shift for held-out checks."""
    from offload_lab.load.prompts import filler_text

    return [filler_text(words, f"{seed}/{i}") for i in range(n)]


__all__ = [
    "RoutingCounts", "from_routed_experts", "synthetic_counts", "collect_hf", "counts_from_collected",
    "corpus_paragraphs", "shifted_texts", "torch_python",
]
