"""The published experiment's parameters: the notebook's parameters cell is generated from this model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    transcription: str = Field("configs/published/study.yaml",
                               description="the transcription of the published summary, relative to the repository")
