"""Experiment ``ref_topology``: the published topology comparison (E7) as data.

From the campaign's ``published`` run: how much slower pod 2 (one GPU per socket, SYS) was than pod 1 (both GPUs on
one NUMA node, NODE), as a percentage, and the share of pod 1's rate it kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offload_lab.core import runs
from offload_lab.published import transcription as published
from offload_lab.published.derive import Derivation, Derived, figure_list, run_reference

EXPERIMENT = "ref_topology"


def derive(pub: published.Published, params: dict[str, Any]) -> Derivation:
    lo, hi = (float(x) for x in figure_list(pub, "topology_tpot_ratio"))
    f = [
        Derived("slower_low", lo - 1, "fraction", "pod 2's time per token over pod 1's, less one (low end)",
                ["topology_tpot_ratio"]),
        Derived("slower_high", hi - 1, "fraction", "the same, high end", ["topology_tpot_ratio"]),
        Derived("rate_kept_low", 1 / hi, "fraction", "pod 2's rate as a share of pod 1's (at the high ratio)",
                ["topology_tpot_ratio"]),
        Derived("rate_kept_high", 1 / lo, "fraction", "the same at the low ratio", ["topology_tpot_ratio"]),
        Derived("spread", hi / lo, "ratio", "high end of the ratio over its low end", ["topology_tpot_ratio"]),
    ]
    return Derivation(f)


def run_experiment(run: runs.Run, data_root: Path | str, campaign: str, params: dict[str, Any]) -> dict[str, Any]:
    return run_reference(run, data_root, campaign, derive, params)
