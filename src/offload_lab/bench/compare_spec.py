"""What a comparison with the peers asks for (:mod:`offload_lab.bench.compare` runs it): its parameters and their
defaults, the agreement tolerance and the figures never compared. Light to import: the CLI builds its flags from it."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from offload_lab.core.bounds import MAX_TOKENS

PEER_NAMES = ("vllm", "aiperf", "guidellm")
AGREE_WITHIN = 0.03
MIN_ROUNDS = 4
CacheMode = Literal["cold", "shared"]

# Figures the tools name alike but measure differently: reported by each tool, never compared.
NOT_COMPARABLE: dict[str, str] = {
    "aiperf inter_chunk_latency": (
        "gaps between network reads, not between tokens: a read that carries two SSE events is one gap, so it "
        "counts fewer gaps than tokens"),
    "guidellm time_per_output_token_ms": "(last token - request start) / tokens: it includes the TTFT",
    "vllm itl": ("gaps between SSE messages as vLLM's tool assembles them: messages that one read carries share "
                 "one time stamp (a zero gap)"),
    "p99 of any latency": ("a few requests a window; every tool's p99 is its slowest request or two, so only "
                           "means (which the server's histograms also give) are compared"),
}


class CompareParams(BaseModel):
    """One comparison; a default lives here only."""

    model_config = ConfigDict(extra="forbid")

    tools: list[str] = Field(default_factory=lambda: list(PEER_NAMES),
                             description="peers beside this load generator: vllm, aiperf, guidellm")
    # Longer than one KV block (128 on vLLM's CPU backend), so that a prefix hit is possible and the cache check
    # has something to find; with 128-token prompts no block can ever hit and the check is empty.
    # Named as the load generator's WorkloadSpec names them (one flag, one field); the old names (vllm bench
    # serve's, kept in the comparison's JSON: serialization_alias) still load.
    prompt_tokens: int = Field(320, ge=4, le=MAX_TOKENS, validation_alias=AliasChoices("prompt_tokens", "input_len"),
                               serialization_alias="input_len",
                               description="prompt tokens, longer than one KV block so that the cache check can find "
                                           "a hit")
    output_tokens: int = Field(64, ge=2, le=MAX_TOKENS, validation_alias=AliasChoices("output_tokens", "output_len"),
                               serialization_alias="output_len", description="output tokens per request")
    num_prompts: int = Field(16, ge=1, description="requests per round and tool")
    concurrency: int = Field(1, ge=1, description="closed-loop concurrency")
    # Mirrored rounds come in pairs; four or more for a figure anyone quotes (a test may run two).
    rounds: int = Field(MIN_ROUNDS, ge=2, description="rounds, in mirrored order")
    cache: CacheMode = Field("cold", description="cold: no prompt may hit the prefix cache; shared: every prompt of "
                                                 "a window starts with the same primed prefix, so every tool gets the "
                                                 "same hits on purpose")
    # shared: whole blocks of a primed prefix in every prompt of a window (fresh per tool and round).
    shared_blocks: int = Field(1, ge=1, description="shared: KV blocks in the primed prefix")

def check_tools(tools: list[str]) -> list[str]:
    """The peers named, or a clear error naming the flag (before any server is asked anything)."""
    from offload_lab.core.errors import InputError

    unknown = [t for t in tools if t not in PEER_NAMES]
    if unknown or not tools:
        raise InputError(f"--tools {','.join(tools)!r}: unknown tool(s) {unknown or '(none given)'}; choose from "
                         f"{', '.join(PEER_NAMES)} (this load generator always runs)")
    return tools
