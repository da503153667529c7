"""The load-generator comparison's parameters: the notebook's parameters cell is generated from this model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bench_dir: str = Field("data/bench/compare",
                           description="the committed `offload-lab compare` runs, relative to the repository")
    streams_low: int = Field(1, ge=1, description="the stream level of the first comparison copied")
    streams_high: int = Field(4, ge=1, description="the stream level of the second comparison copied")

    @model_validator(mode="after")
    def _two_levels(self) -> "Params":
        if self.streams_high <= self.streams_low:
            raise ValueError("streams_high must be above streams_low")
        return self
