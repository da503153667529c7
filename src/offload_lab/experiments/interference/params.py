"""The interference experiment's parameters: the notebook's parameters cell is generated from this model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prefill_tokens: list[int] = Field(description="background prompt lengths; 0 is the baseline without background")
    background_streams: int = Field(1, ge=1, description="closed-loop streams sending fresh prompts at once")
    probe_prompt_tokens: int = Field(64, ge=4)
    probe_output_tokens: int = Field(128, ge=8)
    probes: int = Field(5, ge=1, description="probe requests per level and pass")
    repeats: int = Field(1, ge=1, description="passes over the levels")

    @field_validator("prefill_tokens")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        if not v or any(x != 0 and x < 4 for x in v) or len(set(v)) != len(v):
            raise ValueError("prefill_tokens: distinct lengths, each 0 (baseline) or at least 4 tokens")
        return v
