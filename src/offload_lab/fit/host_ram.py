"""Host RAM a plan needs: the pinned buffers that hold its host experts and tensors, with and without the caching
host allocator's power-of-two rounding, against the host's RAM.

PyTorch's ``CachingHostAllocator`` (aten/src/ATen/core/CachingHostAllocator.h, ``allocate``) rounds every pinned
block up to the next power of two (``c10::llvm::PowerOf2Ceil``) "to improve reuse"; newer PyTorch leaves blocks above
``PYTORCH_ALLOC_CONF=pinned_max_round_threshold_mb:N`` unrounded. vLLM PR #58185 measured the cost: a 4.5 GiB
``w13_weight`` takes 8 GiB, and ``--cpu-offload-gb 305`` used about 504 GiB on a 494 GiB host. A stack that pins with
``torch.empty`` + ``cudaHostRegister`` (the dsv41 host-DMA patch) allocates exact sizes.

The rounding is per allocation, so the result depends on how a stack allocates (``granularity``):

- ``layer-tensor`` (default): one block per MoE layer per stacked parameter, as vLLM's fused MoE and its UVA
  offloader hold them: ``w13`` (gate and up, 2/3 of the layer's host expert bytes) and ``w2`` (down, 1/3);
- ``expert``: one block per host expert;

and every whole host tensor (an embedding, an Engram table) is a block of its own. Blocks are per GPU process (a TP
rank pins its own slice); all ranks of the plan are on one host, so the host total is the sum over ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from offload_lab.core.errors import InputError
from offload_lab.fit.memory import GiB, HostSet, MemoryModel

Granularity = Literal["layer-tensor", "expert"]
GRANULARITIES = ("layer-tensor", "expert")
# vLLM's fused MoE stacks gate and up projections into w13 and the down projection into w2; the three have the same
# shape (hidden x intermediate), so w13 holds 2/3 of an expert's bytes.
W13_SHARE = 2 / 3


def pow2_ceil(n: int) -> int:
    """The next power of two at or above n (``c10::llvm::PowerOf2Ceil``); 0 for 0."""
    return 0 if n <= 0 else 1 << (int(n) - 1).bit_length()


def pinned_size(n: int, rounding: bool = True, max_round_bytes: int | None = None) -> int:
    """Bytes a pinned allocation of n bytes takes: rounded to a power of two unless ``rounding`` is off or n is above
    ``max_round_bytes`` (pinned_max_round_threshold_mb)."""
    if not rounding or (max_round_bytes is not None and n > max_round_bytes):
        return int(n)
    return pow2_ceil(int(n))


def pinned_blocks(model: MemoryModel, host: HostSet, granularity: Granularity = "layer-tensor") -> list[list[int]]:
    """Bytes of each pinned allocation, per rank, for a plan's host set."""
    return [[b for _, b in blocks] for blocks in labelled_blocks(model, host, granularity)]


def labelled_blocks(model: MemoryModel, host: HostSet, granularity: Granularity = "layer-tensor"
                    ) -> list[list[tuple[str, int]]]:
    """(category, bytes) of each pinned allocation, per rank: routed experts, and each whole host tensor under its
    category (engram, embedding, ...)."""
    if granularity not in GRANULARITIES:
        raise InputError(f"--pinned-granularity {granularity!r}: known: {', '.join(GRANULARITIES)}")
    mask = model.host_mask(host)
    rb = model.experts.rank_bytes  # [n, tp]
    layers = np.array([layer for layer, _ in model.experts.keys])
    ranks: list[list[tuple[str, int]]] = []
    for r in range(model.par.tp):
        blocks: list[tuple[str, int]] = []
        for layer in sorted(set(layers[mask].tolist())):
            sel = mask & (layers == layer) & (rb[:, r] > 0)
            if granularity == "expert":
                blocks += [("routed_expert", int(round(b))) for b in rb[sel, r]]
                continue
            total = float(rb[sel, r].sum())
            if total:
                blocks += [("routed_expert", int(round(total * W13_SHARE))),
                           ("routed_expert", int(round(total * (1 - W13_SHARE))))]
        for name in sorted(host.tensors):
            category, vec = model.tensor_rank_bytes[name]
            if vec[r] > 0:
                blocks.append((category, int(math.ceil(vec[r]))))
        ranks.append(blocks)
    return ranks


def by_category(model: MemoryModel, host: HostSet, granularity: Granularity = "layer-tensor",
                max_round_mib: float | None = None) -> dict[str, dict[str, float]]:
    """Per host category, over every rank: blocks, exact GiB and GiB with power-of-two rounding, so that a plan's
    host RAM is counted for everything it moves (experts, Engram tables, embedding), not its experts alone."""
    threshold = None if max_round_mib is None else int(max_round_mib * 2**20)
    out: dict[str, dict[str, float]] = {}
    for blocks in labelled_blocks(model, host, granularity):
        for category, b in blocks:
            row = out.setdefault(category, {"blocks": 0, "exact_gib": 0.0, "rounded_gib": 0.0})
            row["blocks"] += 1
            row["exact_gib"] += b / GiB
            row["rounded_gib"] += pinned_size(b, True, threshold) / GiB
    return out


@dataclass(frozen=True)
class HostRam:
    exact_bytes: int  # sum of the blocks, all ranks
    rounded_bytes: int  # the same with power-of-two rounding
    blocks: int
    granularity: str
    rounding: bool  # which of the two the verdict uses (True: the caching allocator's default)
    max_round_bytes: int | None
    host_ram_bytes: int | None
    reserve_bytes: int

    @property
    def needed_bytes(self) -> int:
        return self.rounded_bytes if self.rounding else self.exact_bytes

    def fits_with(self, needed: int) -> bool | None:
        return None if self.host_ram_bytes is None else needed + self.reserve_bytes <= self.host_ram_bytes

    @property
    def fits(self) -> bool | None:
        return self.fits_with(self.needed_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {"exact_gib": self.exact_bytes / GiB, "rounded_gib": self.rounded_bytes / GiB,
                "rounding_factor": self.rounded_bytes / self.exact_bytes if self.exact_bytes else 1.0,
                "blocks": self.blocks, "granularity": self.granularity,
                "allocation": "pow2" if self.rounding else "exact",
                "max_round_mib": None if self.max_round_bytes is None else self.max_round_bytes / 2**20,
                "host_ram_gib": None if self.host_ram_bytes is None else self.host_ram_bytes / GiB,
                "reserve_gib": self.reserve_bytes / GiB, "needed_gib": self.needed_bytes / GiB,
                "fits_exact": self.fits_with(self.exact_bytes), "fits_rounded": self.fits_with(self.rounded_bytes),
                "fits": self.fits}


def host_ram(model: MemoryModel, host: HostSet, host_ram_gib: float | None = None, reserve_gib: float = 0.0,
             granularity: Granularity = "layer-tensor", rounding: bool = True,
             max_round_mib: float | None = None) -> HostRam:
    """Pinned host bytes of a plan, exact and rounded, and whether they fit ``host_ram_gib`` less ``reserve_gib``."""
    for flag, v, low in (("--host-ram-gib", host_ram_gib, 0.0), ("--host-reserve-gib", reserve_gib, 0.0),
                         ("--pinned-max-round-mib", max_round_mib, 0.0)):
        if v is not None and not (math.isfinite(v) and v >= low and (flag != "--host-ram-gib" or v > 0)):
            raise InputError(f"{flag} {v}: give a finite number of {'MiB' if 'mib' in flag else 'GiB'}"
                             f"{' above 0' if flag == '--host-ram-gib' else ', 0 or more'}")
    threshold = None if max_round_mib is None else int(max_round_mib * 2**20)
    ranks = pinned_blocks(model, host, granularity)
    flat = [b for blocks in ranks for b in blocks]
    return HostRam(exact_bytes=sum(flat), rounded_bytes=sum(pinned_size(b, True, threshold) for b in flat),
                   blocks=len(flat), granularity=granularity, rounding=rounding, max_round_bytes=threshold,
                   host_ram_bytes=None if host_ram_gib is None else int(round(host_ram_gib * GiB)),
                   reserve_bytes=int(round(reserve_gib * GiB)))


def this_host_ram_gib() -> float | None:
    """This machine's RAM (MemTotal of /proc/meminfo), GiB; None where there is no /proc."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024 / GiB
    except (OSError, ValueError, IndexError):
        return None
    return None
