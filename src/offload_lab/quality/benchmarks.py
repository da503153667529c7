"""How a benchmark item becomes a request: the prompt bytes, the stops and the token budget.

Both sides of a comparison get exactly these messages (no system prompt). The texts are part of the pre-registered
protocol: changing one changes every score, so each has a version recorded in the run's manifest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from offload_lab.quality.data import Item

PROMPTS_VERSION = 1

GSM8K_TEMPLATE = (
    "{question}\n\n"
    "Solve the problem step by step. End your reply with a line of the form \"The answer is N.\", where N is the "
    "final number."
)
HUMANEVAL_INSTRUCTION = "Complete the following Python function. Reply with the whole function in one code block.\n\n"
HUMANEVAL_FENCE = "```python\n"
# The fence closes the code block; the Codex stops are applied to the completion client-side (see humaneval.py).
HUMANEVAL_STOP = ["```"]

DEFAULT_MAX_TOKENS = {"gsm8k": 1024, "ifeval": 1280, "humaneval": 1024}


@dataclass(frozen=True)
class ItemRequest:
    """What to send for one item; ``continuation`` marks a partial assistant message to be continued."""

    messages: list[dict[str, Any]]
    max_tokens: int
    stop: list[str] | None
    continuation: bool


def humaneval_prefix(prompt: str) -> str:
    return HUMANEVAL_FENCE + prompt


def build_request(item: Item, max_tokens: int | None = None) -> ItemRequest:
    budget = max_tokens or DEFAULT_MAX_TOKENS[item.benchmark]
    f = item.fields
    if item.benchmark == "gsm8k":
        return ItemRequest([{"role": "user", "content": GSM8K_TEMPLATE.format(question=f["question"])}],
                           budget, None, False)
    if item.benchmark == "ifeval":
        return ItemRequest([{"role": "user", "content": f["prompt"]}], budget, None, False)
    if item.benchmark == "humaneval":
        user = HUMANEVAL_INSTRUCTION + HUMANEVAL_FENCE + f["prompt"] + "```"
        return ItemRequest(
            [{"role": "user", "content": user}, {"role": "assistant", "content": humaneval_prefix(f["prompt"])}],
            budget, list(HUMANEVAL_STOP), True,
        )
    raise ValueError(f"unknown benchmark {item.benchmark}")


def protocol() -> dict[str, Any]:
    """The prompt texts and defaults, for the manifest."""
    return {"version": PROMPTS_VERSION, "gsm8k_template": GSM8K_TEMPLATE,
            "humaneval_instruction": HUMANEVAL_INSTRUCTION, "humaneval_prefix": HUMANEVAL_FENCE + "{prompt}",
            "humaneval_stop": HUMANEVAL_STOP, "ifeval": "the prompt as is, no system prompt",
            "default_max_tokens": DEFAULT_MAX_TOKENS}
