"""The context experiment's parameters: the notebook's parameters cell is generated from this model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from offload_lab.core.bounds import Tokens


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    context_lengths: list[Tokens] = Field(min_length=1, description="prompt lengths in tokens, exact")
    output_tokens: Tokens = Field(64, ge=2, description="tokens generated per request (ignore_eos)")
    repeats: int = Field(3, ge=1, description="requests per context length")
    warmup: bool = Field(True, description="one unrecorded request first, so the first length is not paying for it")

    @field_validator("context_lengths")
    @classmethod
    def _positive_sorted(cls, v: list[int]) -> list[int]:
        if any(x < 4 for x in v):
            raise ValueError("every context length must be at least 4 tokens")
        if len(set(v)) != len(v):
            raise ValueError("context lengths must not repeat")
        return sorted(v)

    def longest_request_tokens(self) -> int:
        """Prompt plus output of the longest request: what the server's max_model_len must hold."""
        return max(self.context_lengths) + self.output_tokens
