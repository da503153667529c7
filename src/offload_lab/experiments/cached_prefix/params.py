"""The cached-prefix experiment's parameters: the notebook's parameters cell is generated from this model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from offload_lab.load.closed_loop import StopRule


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prefix_tokens: int = Field(ge=16, description="the long prefix every user's prompt starts with, cached once")
    suffix_tokens: int = Field(32, ge=1, description="each request's own question after the prefix")
    output_tokens: int = Field(ge=2, description="tokens generated per request (ignore_eos)")
    users: int = Field(4, ge=1, description="users at once, each a closed-loop stream on the same prefix")
    requests_per_user: int = Field(3, ge=1, description="requests each user sends, one after another")
    stop_rule: StopRule = Field(default_factory=StopRule)

    def longest_request_tokens(self) -> int:
        """Prompt (prefix, question and the chat template's few tokens) plus output."""
        return self.prefix_tokens + self.suffix_tokens + 2 + self.output_tokens
