"""What the "will it fit" commands (cli/fit.py, cli/plan.py) share: reading the checkpoint a command names, its
memory model, and the option groups, each flag typed so that argparse names it when its value is wrong."""

from __future__ import annotations

import argparse
from typing import Any

from offload_lab.cli.common import finite_float, int_at_least, nonneg_int, positive_int
from offload_lab.cli.common import action_group  # noqa: F401  (the fit parsers import it from here)
from offload_lab.core import inputs
from offload_lab.core.errors import InputError

share = finite_float(0, 1)  # a share of the routed experts, 0 to 1
# Memory in GiB up to a pebibyte (no GPU or host holds more; 1e308 GiB would overflow the byte counts), bandwidths up
# to a petabyte a second, GPUs up to 4,096 in one tensor-parallel group.
MAX_GIB = float(2**20)
memory_gib = finite_float(0, MAX_GIB, low_open=True)
nonneg_gib = finite_float(0, MAX_GIB)
bandwidth_gbps = finite_float(0, 1e6, low_open=True)
gpu_count = int_at_least(1, 4096)
layer_share = finite_float(0, 1, low_open=True)


def gib(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} GiB"


# ----------------------------------------------------------------------------------------------------------------
# Shared pieces


def read(args: argparse.Namespace, source: str | None = None) -> tuple[Any, Any]:
    """The checkpoint a command names and its classification: from the safetensors headers, or, for a config.json
    (or ``--from-config``), from transformers' model built on the meta device (fit/hfmodel.py)."""
    from offload_lab.fit import checkpoint, hfcheckpoint, hfmodel

    opts = checkpoint.RemoteOptions(concurrency=args.concurrency, retries=args.retries)
    src = source or args.source
    formats = _formats(args)
    if hfmodel.config_source(src, getattr(args, "from_config", False)):
        ckpt, cls, lay = hfmodel.read_model(src, opts, hf_endpoint=args.hf_endpoint, formats=formats)
        args._layout = lay
        return ckpt, cls
    if formats:
        raise InputError(f"--weights/--format-for size a model from its config.json; {src} is read from its "
                         "safetensors headers, whose bytes are what it stores (add --from-config to size it anew)")
    ckpt = checkpoint.read_checkpoint(src, opts, hf_endpoint=args.hf_endpoint)
    if not any(shard.tensors for shard in ckpt.shards):
        # An empty header "fits" anything: say that there is nothing to fit instead.
        raise InputError(f"checkpoint {source or args.source}: its safetensors header(s) hold no tensor, so there is "
                         "nothing to fit; give a model's checkpoint")
    by_hf = None if args.architecture else hfcheckpoint.classify_by_transformers(ckpt)
    if by_hf is not None:
        cls, args._layout = by_hf
        return ckpt, cls
    cls = checkpoint.classify(ckpt, args.architecture, args.engram_pattern)
    return ckpt, cls


def _formats(args: argparse.Namespace) -> dict[str, Any]:
    from offload_lab.fit import formats

    return formats.parse_assignments(getattr(args, "format_for", None), getattr(args, "weights", None))


def check_heads(config: dict[str, Any] | None, tp: int) -> None:
    """vLLM splits the attention heads over the tensor-parallel GPUs: --tp must divide their number."""
    heads = (config or {}).get("num_attention_heads")
    if isinstance(heads, int) and heads > 0 and heads % tp:
        fits = [n for n in range(1, heads + 1) if heads % n == 0]
        raise InputError(f"--tp {tp}: the model has {heads} attention heads, which {tp} GPUs cannot share evenly "
                         f"(vLLM refuses it); give one of {fits}")


def model_for(args: argparse.Namespace, ckpt: Any, cls: Any) -> Any:
    from offload_lab.fit import memory

    check_heads(ckpt.config, args.tp)
    par = memory.Parallelism(tp=args.tp, ep=args.ep, placement=args.placement,
                             tp_modes=memory.parse_tp_modes(args.tp_mode or []))
    _add_kv_to_reserve(args, ckpt)
    return memory.MemoryModel(cls, par, ckpt.config)


def _add_kv_to_reserve(args: argparse.Namespace, ckpt: Any) -> None:
    """What a GPU keeps free beside the weights: the activations/graphs reserve (--reserve-gib) plus the KV cache of
    --streams sequences of --context tokens, from the architecture (fit/kvbudget.py). ``args.reserve_gib`` becomes
    the sum (every verdict reads it); the parts are kept in ``args.budget``."""
    from offload_lab.fit import kvbudget

    if not hasattr(args, "context") or getattr(args, "budget", None) is not None:
        return
    args.activation_reserve_gib = args.reserve_gib
    info: dict[str, Any] = {"activation_reserve_gib": args.reserve_gib,
                            "activation_reserve_source": "--reserve-gib" if isinstance(args.reserve_gib, _GivenGiB) else
                            "the default: the dsv41 anchor's activations, graphs and staging; vLLM profiles yours at "
                            "start-up"}
    context = args.context if args.context is not None else kvbudget.default_context(ckpt.config)
    if ckpt.config and context:
        try:
            kv = kvbudget.kv_budget(ckpt.config, args.tp, context, args.streams, getattr(args, "_layout", None))
        except InputError as e:
            info["kv"] = {"error": str(e)}
        else:
            info["kv"] = kv.to_dict()
            args.reserve_gib = args.reserve_gib + kv.bytes_per_gpu / 2**30
    else:
        info["kv"] = {"context": context, "streams": args.streams, "bytes_per_gpu": 0,
                      "note": "no config.json: KV cache not sized" if context else "--context 0: weights only"}
    info["reserve_gib_total"] = args.reserve_gib
    args.budget = info


def bandwidth(args: argparse.Namespace) -> Any:
    from offload_lab.fit.predict import Bandwidth

    return Bandwidth(args.hbm_gbps, args.link_gbps) if args.hbm_gbps and args.link_gbps else None


def fit_errors(plan_path: str, problems: list[Any], what: str) -> None:
    errors = [p.message for p in problems if p.level == "error"]
    if errors:
        raise InputError(f"plan file {plan_path} does not fit {what}:\n  " + "\n  ".join(inputs.summarize(errors)))


def add_source_options(p: argparse.ArgumentParser) -> None:
    from offload_lab.fit.checkpoint import DEFAULT_ENGRAM_PATTERN, RULESETS

    g = p.add_argument_group("reading the checkpoint")
    g.add_argument("--architecture", choices=sorted(RULESETS), default=None,
                   help="tensor naming rules to classify with (default: from config.json, else from the names)")
    g.add_argument("--from-config", action="store_true",
                   help="read only the source's config.json (a directory with weights, a URL or "
                        "hf://owner/name@revision) and take the tensors from transformers' model built on the meta "
                        "device; a .json file or a directory without weights is read this way anyway")
    from offload_lab.fit.formats import FORMAT_HELP

    g.add_argument("--weights", default=None, metavar="FORMAT",
                   help=f"from a config.json: the format its linear weights are served in ({FORMAT_HELP}; default: "
                        "the config's dtype); norms, biases and the router stay at the dtype")
    g.add_argument("--format-for", action="append", metavar="CATEGORY=FORMAT",
                   help="from a config.json: one category's format over --weights, e.g. routed_expert=gguf:Q4_K or "
                        "routed_expert=exl3:3.0; repeatable")
    g.add_argument("--engram-pattern", default=DEFAULT_ENGRAM_PATTERN,
                   help=f"regular expression naming Engram lookup tables (default: {DEFAULT_ENGRAM_PATTERN})")
    g.add_argument("--concurrency", type=positive_int, default=16, help="shards read at once over HTTP (default: 16)")
    g.add_argument("--retries", type=nonneg_int, default=4,
                   help="retries per remote file on connection errors, 429 and 5xx (default: 4)")
    g.add_argument("--hf-endpoint", default=None,
                   help="Hugging Face endpoint for hf:// sources (default: $HF_ENDPOINT or https://huggingface.co); "
                        "a token is read from $HF_TOKEN only and sent to this host only")


def add_parallel_options(p: argparse.ArgumentParser, tp_required: bool = False) -> None:
    from offload_lab.fit.checkpoint import CATEGORIES

    g = p.add_argument_group("parallelism")
    g.add_argument("--tp", type=gpu_count, required=tp_required, default=None if tp_required else 1,
                   help="tensor-parallel GPUs" + ("" if tp_required else " (default: 1)"))
    g.add_argument("--ep", action="store_true",
                   help="expert parallelism over the --tp GPUs (vLLM --enable-expert-parallel): whole experts per GPU")
    g.add_argument("--placement", choices=("linear", "round_robin"), default="linear",
                   help="expert placement under --ep (vLLM --expert-placement-strategy; default: linear)")
    g.add_argument("--tp-mode", action="append", metavar="CATEGORY=shard|replicate",
                   help=f"override how a category splits under TP (categories: {', '.join(CATEGORIES)}); repeatable")


def add_memory_options(p: argparse.ArgumentParser, usable_required: bool = False, what: str = "") -> None:
    p.add_argument("--usable-gib", type=memory_gib, required=usable_required, default=None,
                   help="usable memory per GPU in GiB (what the driver reports, times gpu_memory_utilization)" + what)
    from offload_lab.fit.kvbudget import DEFAULT_RESERVE_GIB, DEFAULT_CONTEXT, DEFAULT_STREAMS

    p.add_argument("--reserve-gib", type=_reserve_gib, default=DEFAULT_RESERVE_GIB,
                   help="memory a GPU keeps free for activations, CUDA graphs and staging buffers, beside the KV cache "
                        f"(default: {DEFAULT_RESERVE_GIB:g}, the dsv41 anchor's ~5 GiB; vLLM profiles yours at "
                        "start-up)")
    p.add_argument("--context", type=nonneg_int, default=None,
                   help=f"tokens of KV cache per stream that must fit beside the weights (default: {DEFAULT_CONTEXT}, "
                        "or the model's max_position_embeddings when smaller; 0: weights only). Sized per layer from "
                        "the architecture: MLA, GQA, sliding windows, Mamba/linear-attention state")
    p.add_argument("--streams", type=positive_int, default=DEFAULT_STREAMS,
                   help=f"concurrent sequences, each with --context tokens of KV (default: {DEFAULT_STREAMS})")
    p.set_defaults(budget=None)


class _GivenGiB(float):
    """A --reserve-gib value the user typed (the default is a plain float): the audit says which it used."""


def _reserve_gib(text: str) -> float:
    return _GivenGiB(nonneg_gib(text))


def add_bandwidth_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hbm-gbps", type=bandwidth_gbps, default=None,
                   help="with --counts: GPU memory bandwidth, GB/s, for the TPOT bound")
    p.add_argument("--link-gbps", type=bandwidth_gbps, default=None,
                   help="with --counts: host-to-GPU read bandwidth (zero-copy over PCIe), GB/s, for the TPOT bound")


def add_host_ram_options(p: argparse.ArgumentParser) -> None:
    from offload_lab.fit.host_ram import GRANULARITIES

    g = p.add_argument_group("host RAM (pinned buffers of the host experts and tensors)")
    g.add_argument("--host-ram-gib", type=memory_gib, default=None,
                   help="the host's RAM in GiB: the fit fails when the plan's pinned buffers do not fit in it")
    g.add_argument("--host-reserve-gib", type=nonneg_gib, default=0.0,
                   help="host RAM to keep free for everything else (default: 0)")
    g.add_argument("--pinned", choices=("pow2", "exact"), default="pow2",
                   help="how the stack pins host memory: pow2, PyTorch's caching host allocator (pin_memory(), every "
                        "block rounded up to a power of two; the default); exact, torch.empty + cudaHostRegister")
    g.add_argument("--pinned-granularity", choices=GRANULARITIES, default="layer-tensor",
                   help="one pinned block per layer per stacked tensor (w13, w2; vLLM) or per expert")
    g.add_argument("--pinned-max-round-mib", type=finite_float(0, MAX_GIB * 1024), default=None,
                   help="blocks above this many MiB are not rounded (PYTORCH_ALLOC_CONF=pinned_max_round_threshold_mb)")


def add_out_options(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--out", required=True, help=f"{what} to write (refused if it exists, unless --force)")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")


def emit(args: argparse.Namespace, out: Any, *lines: str) -> int:
    """Print ``out`` as JSON with --json, else the lines; the command succeeded (0)."""
    from offload_lab.cli.common import print_json

    if args.json:
        print_json(out)
    else:
        print("\n".join(lines))
    return 0


def check_new_out(path: str, force: bool) -> None:
    """An ``--out`` file to write: refused if it exists (unless ``force``) or if its folder does not (a typo in the
    path would otherwise create folders nobody asked for). Checked before any work."""
    from pathlib import Path

    inputs.check_out(path, force)
    parent = Path(path).parent
    if not parent.is_dir():
        raise InputError(f"--out {path}: the folder {parent} does not exist; create it first or fix the path")
