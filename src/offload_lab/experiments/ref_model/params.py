"""The ref_model experiment's parameters: the notebook's parameters cell is generated from this model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    published_experiment: str = Field("published", description="experiment of the campaign holding the published figures")
