"""Claims of the topology section: what the boots' manifests say about the machine."""

from __future__ import annotations

import functools

from typing import Any


from offload_lab.load.context_summary import SUMMARY, context_summary
from offload_lab.paper.claims import ClaimDef, RunSet, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import (fmt_int, fmt_list_words, fmt_ratio, plural, table_value)
from offload_lab.server.boots import BOOTS, boot_records
from offload_lab.core.runs import MANIFEST

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)


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


@claim("topology.machines", experiment=BOOTS, files=["boot.json", MANIFEST], scope="all", fmt=fmt_int,
       unit="machines")
def _machines(src: RunSet) -> int:
    """Distinct machines the campaign's boots ran on (by the manifests' host fingerprint)."""
    return len({b["host"] for b in boot_records(src)})


@claim("topology.gpus", experiment=BOOTS, files=[MANIFEST], fmt="{}", unit="")
def _gpus(src: Sources) -> str:
    """The GPUs of the machine the latest boot ran on, in words."""
    return _gpu_words((src.manifest.get("environment") or {}).get("gpu") or {})


@claim("topology.has_gpu", experiment=BOOTS, files=[MANIFEST], fmt="{}", unit="")
def _has_gpu(src: Sources) -> str:
    """Whether the latest boot's machine has GPUs ("yes"/"no"), for text that depends on it."""
    return "yes" if ((src.manifest.get("environment") or {}).get("gpu") or {}).get("present") else "no"


@claim("topology.link", experiment=BOOTS, files=[MANIFEST], fmt="{}", unit="")
def _link(src: Sources) -> str:
    """How the latest boot's GPUs connect, as `nvidia-smi topo -m` names it (NODE, SYS, NV#...), or none."""
    return _gpu_link((src.manifest.get("environment") or {}).get("gpu") or {}) or "none"


@claim("topology.verdict", experiment=BOOTS, files=[MANIFEST], fmt="{}", unit="")
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


def _compare(src: RunSet, experiment: str) -> str:
    latest: dict[str, Sources] = {}
    for s in src:
        if s.outcome == "ok":
            latest[(s.manifest.get("environment") or {}).get("hostname_hash") or "?"] = s
    if len(latest) < 2:
        return f"not possible here: the {experiment} experiment ran on one machine"
    frames = [context_summary(s).set_index("context_tokens")["tpot_median_ms"] for s in latest.values()]
    common = sorted(set.intersection(*(set(f.index) for f in frames)))
    if not common:
        return "not possible: the machines measured no context length in common"
    ratios = [max(f[n] for f in frames) / min(f[n] for f in frames) for n in common]
    return (f"possible: the slowest machine's median TPOT was {fmt_ratio(min(ratios))} to {fmt_ratio(max(ratios))} the "
            f"fastest's over {len(common)} context lengths on {len(latest)} machines")


# The comparison reads whichever context experiment the campaign ran: `context` (the study's campaign, one pod per
# `--only context` run) or `context_repeat` (a repeat-boot campaign split over pods, a boot per machine). The section
# prints each one present.
@claim("topology.comparison", experiment="context", files=[SUMMARY, MANIFEST], scope="all", fmt="{}",
       unit="")
def _topo_compare(src: RunSet) -> str:
    """Median TPOT on the slowest machine over the fastest, per context length, where the context experiment ran on
    more than one machine; else says so."""
    return _compare(src, "context")


@claim("topology.comparison_repeat", experiment="context_repeat", files=[SUMMARY, MANIFEST], scope="all",
       fmt="{}", unit="")
def _topo_compare_repeat(src: RunSet) -> str:
    """The same over the runs of context_repeat (a repeat-boot campaign, e.g. its boots spread over pods)."""
    return _compare(src, "context_repeat")


# ====================================================================================================================
@claim("topology.machines_words", experiment=BOOTS, files=["boot.json", MANIFEST], scope="all", fmt="{}",
       unit="")
def _machines_words(src: RunSet) -> str:
    """The number of machines the boots ran on, in words."""
    return plural(len({b["host"] for b in boot_records(src)}), "machine")


@claim("topology.matrix", experiment=BOOTS, files=[MANIFEST], kind="table")
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


