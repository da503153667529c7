"""Claims of the load-generator comparison: read from the copies of the committed ``offload-lab compare`` runs."""

from __future__ import annotations

import functools
from typing import Any

from offload_lab.experiments.load_generator.runner import EXPERIMENT, LEVELS, SOURCES, comparison_file
from offload_lab.paper.claims import ClaimDef, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import fmt_int, fmt_list_words, fmt_pct, table_value

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)

LOW, HIGH = (comparison_file(level) for level in LEVELS)
BOTH = [LOW, HIGH]
# How the comparison names the peers' tools in the table.
TOOL_WORDS = {"ours": "offload-lab", "vllm": "vllm bench serve", "aiperf": "AIPerf", "guidellm": "GuideLLM"}


def _verdicts(src: Sources, name: str) -> dict[tuple[str, str], str]:
    return {(v["peer"], v["figure"]): v["verdict"] for v in src.json(name)["verdicts"]}


@claim("load_generator.table", experiment=EXPERIMENT, files=BOTH, kind="table")
def _table(src: Sources) -> dict[str, Any]:
    """Per stream level and tool: client TTFT and TPOT over the server's (medians over rounds), the TTFT the client
    adds, and each peer's verdict against offload-lab's figure."""
    rows = []
    for name in BOTH:
        c = src.json(name)
        verdicts = _verdicts(src, name)
        for tool, t in c["tools"].items():
            def verdict(fig: str, _tool: str = tool) -> str:
                return "(reference)" if _tool == "ours" else verdicts.get((_tool, fig), "-")
            rows.append([str(c["concurrency"]), TOOL_WORDS.get(tool, tool), f"{t['ttft_ratio']:.3f}",
                         f"{t['ttft_added_ms']:.1f}", verdict("ttft_ratio"), f"{t['tpot_ratio']:.4f}",
                         verdict("tpot_ratio")])
    return table_value(["Streams", "Tool", "TTFT/server", "TTFT added ms", "TTFT verdict", "TPOT/server",
                        "TPOT verdict"], rows, "rlrrlrl")


@claim("load_generator.not_comparable.table", experiment=EXPERIMENT, files=BOTH, kind="table")
def _not_comparable(src: Sources) -> dict[str, Any]:
    """The figures the comparison leaves out and why, as the run at the most streams recorded them."""
    nc = src.json(HIGH)["not_comparable"]
    return table_value(["Figure", "Why it is not compared"], [[k, v] for k, v in nc.items()], "ll")


for _level, _name in zip(LEVELS, BOTH):
    claim(f"load_generator.streams.{_level}", experiment=EXPERIMENT, files=[_name], fmt=fmt_int, unit="streams",
          description=f"Streams of the {_level} level's comparison")(
        lambda src, _n=_name: int(src.json(_n)["concurrency"]))
    claim(f"load_generator.ours.ttft_added_ms.{_level}", experiment=EXPERIMENT, files=[_name], fmt="{:.1f}",
          unit="ms", description=f"TTFT offload-lab's client adds to the server's, {_level} level (median of rounds)")(
        lambda src, _n=_name: float(src.json(_n)["tools"]["ours"]["ttft_added_ms"]))
    claim(f"load_generator.peer_ttft_added_ms.min.{_level}", experiment=EXPERIMENT, files=[_name], fmt="{:.1f}",
          unit="ms", description=f"The least TTFT a peer tool adds, {_level} level")(
        lambda src, _n=_name: min(float(t["ttft_added_ms"]) for k, t in src.json(_n)["tools"].items() if k != "ours"))


def _count(src: Sources, figure: str | None, verdict: str | None) -> int:
    return sum(1 for name in BOTH for v in src.json(name)["verdicts"]
               if (figure is None or v["figure"] == figure) and (verdict is None or v["verdict"] == verdict))


for _fig, _what in ((None, "every figure"), ("ttft_ratio", "TTFT"), ("tpot_ratio", "TPOT")):
    _key = "all" if _fig is None else _fig.split("_")[0]
    claim(f"load_generator.verdicts.{_key}", experiment=EXPERIMENT, files=BOTH, fmt=fmt_int, unit="",
          description=f"Peer verdicts on {_what}, both levels together")(
        lambda src, _f=_fig: _count(src, _f, None))
    claim(f"load_generator.agree.{_key}", experiment=EXPERIMENT, files=BOTH, fmt=fmt_int, unit="",
          description=f"Peer verdicts on {_what} that agree with offload-lab within the threshold, both levels")(
        lambda src, _f=_fig: _count(src, _f, "agree"))


@claim("load_generator.agree_within", experiment=EXPERIMENT, files=BOTH, fmt=fmt_pct(0), unit="")
def _within(src: Sources) -> float:
    """How far a peer's ratio may lie from offload-lab's and still agree (the same at both levels)."""
    values = {float(src.json(n)["agree_within"]) for n in BOTH}
    if len(values) != 1:
        raise ValueError(f"the two comparisons used different thresholds: {sorted(values)}")
    return values.pop()


def _same(src: Sources, key: str) -> Any:
    values = {repr(src.json(n)[key]) for n in BOTH}
    if len(values) != 1:
        raise ValueError(f"the two comparisons differ in {key}: {sorted(values)}")
    return src.json(LOW)[key]


for _key, _what in (("rounds", "Rounds of each comparison (each tool once a round)"),
                    ("num_prompts", "Requests each tool sends a round"),
                    ("input_len", "Prompt tokens of each request"), ("output_len", "Output tokens of each request")):
    claim(f"load_generator.{_key}", experiment=EXPERIMENT, files=BOTH, fmt=fmt_int, unit="",
          description=_what)(lambda src, _k=_key: int(_same(src, _k)))


@claim("load_generator.peers", experiment=EXPERIMENT, files=BOTH, fmt="{}", unit="")
def _peers(src: Sources) -> str:
    """The peer tools and the versions the comparison ran."""
    versions = _same(src, "peer_versions")
    return fmt_list_words(f"{TOOL_WORDS.get(k, k)} {v}" for k, v in versions.items())


@claim("load_generator.sources", experiment=EXPERIMENT, files=[SOURCES], fmt="{}", unit="")
def _sources(src: Sources) -> str:
    """The committed comparison runs copied, by run id."""
    return fmt_list_words(s["run_id"] for s in src.json(SOURCES))


@claim("load_generator.cache", experiment=EXPERIMENT, files=BOTH, fmt="{}", unit="")
def _cache(src: Sources) -> str:
    """The prefix-cache mode of both comparisons (cold: no two prompts share a first KV block)."""
    return str(_same(src, "cache"))


@claim("load_generator.ours_adds", experiment=EXPERIMENT, files=BOTH, fmt="{}", unit="")
def _ours_adds(src: Sources) -> str:
    """Whether offload-lab's client adds less TTFT than every peer at both levels, in words."""
    least = all(c["tools"]["ours"]["ttft_added_ms"] < min(t["ttft_added_ms"] for k, t in c["tools"].items()
                                                          if k != "ours") for c in (src.json(n) for n in BOTH))
    return "less than every peer at both levels" if least else "not always less than every peer"
