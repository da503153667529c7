"""The study's bar and provisioning margin, once: a median of 40 output tokens/s per stream (25 ms per token), and 10%
over it for provisioning. Sweeps, experiment parameters, claims, figures and the ``bench`` flags all read these.

Light on purpose (pydantic only): the CLI reads the defaults for its ``--help`` without importing the sweep.
"""

from __future__ import annotations

from typing import Annotated, Any, Mapping

from pydantic import Field

BAR_TOK_S = 40.0
MARGIN = 0.10
Bar = Annotated[float, Field(gt=0, description="the bar: median output tokens/s per stream")]
Margin = Annotated[float, Field(ge=0, lt=1, description="provisioning margin over the bar")]


def bar_of(parameters: Mapping[str, Any]) -> float:
    """The bar a run's parameters set (the study's when they name none: a run recorded before it was a parameter)."""
    return float(parameters.get("bar_tok_s", BAR_TOK_S))


def margin_of(parameters: Mapping[str, Any]) -> float:
    """The provisioning margin a run's parameters set (the study's when they name none)."""
    return float(parameters.get("margin", MARGIN))
