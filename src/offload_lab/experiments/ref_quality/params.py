"""The ref_quality experiment's parameters: the notebook's parameters cell is generated from this model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    published_experiment: str = Field("published", description="experiment of the campaign holding the published figures")
    about_window: int = Field(10, ge=0, le=100, description='items either side of a count printed "about"')
    resamples: int = Field(10_000, ge=100, description="paired bootstrap resamples")
