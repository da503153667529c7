"""The agent-turns experiment's parameters: the notebook's parameters cell is generated from this model.

Agent turns are one regime of the concurrency sweep: a context that grows by ``turn_new_tokens`` each turn, replies
of ``output_tokens``. The notebook names the agent's own quantities; :meth:`Params.sweep` builds the sweep from them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from offload_lab.load.closed_loop import StopRule
from offload_lab.load.bar import BAR_TOK_S, MARGIN, Bar, Margin
from offload_lab.load.sweep import RegimeSweepParams

REGIME = "agent_turns"


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    initial_context_tokens: int = Field(ge=1, description="the agent's context at its first turn")
    turn_new_tokens: int = Field(ge=0, description="tokens each turn adds to the context")
    output_tokens: int = Field(ge=2, description="tokens of each reply")
    think_time_s: float = Field(0.0, ge=0, description="pause between a reply and the next turn")
    streams: list[int] = Field(min_length=1, description="agents at once, one level each")
    turns: int = Field(ge=1, description="turns of each agent per level")
    bar_tok_s: Bar = BAR_TOK_S
    margin: Margin = MARGIN
    stop_rule: StopRule = Field(default_factory=StopRule)

    def longest_request_tokens(self) -> int:
        return self.sweep().longest_request_tokens()

    def sweep(self) -> RegimeSweepParams:
        agent = {"regime": REGIME, "initial_context_tokens": self.initial_context_tokens,
                 "turn_new_tokens": self.turn_new_tokens, "output_tokens": self.output_tokens,
                 "think_time_s": self.think_time_s}
        return RegimeSweepParams(regimes={REGIME: agent}, streams=self.streams, requests_per_stream=self.turns,
                                 bar_tok_s=self.bar_tok_s, margin=self.margin, stop_rule=self.stop_rule)
