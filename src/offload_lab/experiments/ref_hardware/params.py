"""The ref_hardware experiment's parameters: the notebook's parameters cell is generated from this model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    within_factor: float = Field(1.5, gt=1, description="a prediction counts as close within this factor")
    hardware: str | None = Field(None, description="a YAML file of more GPUs, links and host memory (catalog shape)")
