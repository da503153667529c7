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
    from offload_lab.fit import checkpoint

    opts = checkpoint.RemoteOptions(concurrency=args.concurrency, retries=args.retries)
    ckpt = checkpoint.read_checkpoint(source or args.source, opts, hf_endpoint=args.hf_endpoint)
    if not any(shard.tensors for shard in ckpt.shards):
        # An empty header "fits" anything: say that there is nothing to fit instead.
        raise InputError(f"checkpoint {source or args.source}: its safetensors header(s) hold no tensor, so there is "
                         "nothing to fit; give a model's checkpoint")
    cls = checkpoint.classify(ckpt, args.architecture, args.engram_pattern)
    return ckpt, cls


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
    return memory.MemoryModel(cls, par, ckpt.config)


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
    p.add_argument("--reserve-gib", type=nonneg_gib, default=0.0,
                   help="headroom a GPU must keep free for KV cache, activations and graphs (default: 0)")


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
