"""Figures of the concurrency experiment: tokens per second per stream against streams, every regime."""

from __future__ import annotations

import functools

from typing import Any

from offload_lab.load.bar import bar_of
from offload_lab.load.sweep import draw_streams
from offload_lab.paper.claims import Sources
from offload_lab.paper.figures import FigureDef
from offload_lab.paper.figures import figure as _figure
from offload_lab.core.runs import MANIFEST

SECTION: dict[str, FigureDef] = {}
figure = functools.partial(_figure, registry=SECTION)


@figure("concurrency_tok_s", experiment="concurrency", files=["regimes.csv", MANIFEST], size_in=(6.0, 3.0))
def concurrency_tok_s(src: Sources, ax: Any) -> None:
    """Output tokens per second per stream against streams, for every regime, with the bar."""
    draw_streams(ax, src.csv("regimes.csv"), bar_of(src.parameters))


