"""Figures of the agent-turns experiment."""

from __future__ import annotations

import functools

from typing import Any

from offload_lab.paper.claims import Sources
from offload_lab.paper.figures import FigureDef
from offload_lab.paper.figures import figure as _figure
from offload_lab.experiments.concurrency.figures import _streams_axis

SECTION: dict[str, FigureDef] = {}
figure = functools.partial(_figure, registry=SECTION)


@figure("agent_turns_tok_s", experiment="agent_turns", files=["regimes.csv", "manifest.json"])
def agent_turns_tok_s(src: Sources, ax: Any) -> None:
    """Agent turns: output tokens per second per stream against streams, with the bar."""
    _streams_axis(src, ax)


