"""Canaries: before a run, prove the endpoint continues a partial answer and does not think when told not to.

The study's first HumanEval run against the API scored 0 on every item because a plain chat completion opened a new
turn instead of continuing the code; on the local side the tokenizer ignored the continue flag. Both failures are
silent: the endpoint answers, just not the question asked. The checks:

- ``continuation.prompt_tokens``: the continuation request must count fewer prompt tokens than the same messages
  sent as a finished conversation (which adds an end-of-turn and a new assistant header). A server that ignores the
  flag renders both alike. This holds for any model, random weights included;
- ``continuation.rendered`` (vLLM): the prompt the server renders for the continuation, read back through
  ``/tokenize`` and ``/detokenize``, ends with the partial message;
- ``continuation.no_restart``: the reply does not start over with a code fence or the function's ``def``;
- ``thinking.off``: with thinking off, no reasoning text (``reasoning_content``/``reasoning`` empty, no ``<think>``)
  and some content;
- ``finish_reason``: every canary reply ended with ``stop`` or ``length``.

A run whose canaries fail is marked invalid and kept; its items are never scored as the model's result.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from offload_lab.core.redact import redact_url
from offload_lab.load.client import run_sync
from offload_lab.quality import benchmarks, endpoints, runner

CANARY_PROMPT = 'def add_one(x: int) -> int:\n    """Return x plus one."""\n'
THINKING_QUESTION = "What is 17 + 25? Reply with the number only."
CANARY_MAX_TOKENS = 32


@dataclass
class Check:
    name: str
    passed: bool | None  # None: could not be checked (the endpoint gave no usage, no /tokenize)
    detail: str


@dataclass
class CanaryReport:
    checks: list[Check] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    continuation_needed: bool = True

    @property
    def valid(self) -> bool:
        if any(c.passed is False for c in self.checks):
            return False
        if self.continuation_needed:
            # At least one structural proof of continuation; the content check alone cannot tell on a random model.
            structural = [c for c in self.checks if c.name in ("continuation.prompt_tokens", "continuation.rendered")]
            if not any(c.passed for c in structural):
                return False
        return all(c.passed for c in self.checks if c.name in ("thinking.off", "finish_reason"))

    @property
    def reasons(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if c.passed is not True]

    def to_json(self) -> dict[str, Any]:
        return {"valid": self.valid, "reasons": self.reasons, "checks": [asdict(c) for c in self.checks],
                "requests": self.requests}


def _continuation_messages() -> list[dict[str, str]]:
    user = benchmarks.HUMANEVAL_INSTRUCTION + benchmarks.HUMANEVAL_FENCE + CANARY_PROMPT + "```"
    return [{"role": "user", "content": user},
            {"role": "assistant", "content": benchmarks.humaneval_prefix(CANARY_PROMPT)}]


async def _post(client: httpx.AsyncClient, spec: endpoints.EndpointSpec, path: str, body: dict[str, Any],
                headers: dict[str, str], name: str, report: CanaryReport) -> dict[str, Any] | None:
    call = await runner.post_with_retries(client, spec, path, body, headers)
    report.requests.append({"canary": name, "url": redact_url(spec.base + path),
                            "headers": endpoints.redact_headers(headers), "body": body,
                            "http_status": call.http_status, "response": call.response, "error": call.error})
    return call.response if call.status == "answered" else None


def _prompt_tokens(resp: dict[str, Any] | None) -> int | None:
    usage = endpoints.message_parts(resp)["usage"] if resp else None
    value = (usage or {}).get("prompt_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


async def _rendered_prompt(client: httpx.AsyncClient, spec: endpoints.EndpointSpec, body: dict[str, Any],
                           headers: dict[str, str]) -> str | None:
    keys = ("model", "messages", "continue_final_message", "add_generation_prompt", "chat_template_kwargs")
    try:
        tok = await client.post(spec.base + "/tokenize", json={k: body[k] for k in keys if k in body},
                                headers=headers, timeout=60)
        tok.raise_for_status()
        det = await client.post(spec.base + "/detokenize", json={"model": body["model"],
                                                                  "tokens": tok.json()["tokens"]},
                                headers=headers, timeout=60)
        det.raise_for_status()
        prompt = det.json().get("prompt") if isinstance(det.json(), dict) else None
        return prompt if isinstance(prompt, str) else None
    except (httpx.HTTPError, KeyError, ValueError, TypeError, AttributeError):
        return None


async def _run(spec: endpoints.EndpointSpec, model: str, continuation_needed: bool) -> CanaryReport:
    report = CanaryReport(continuation_needed=continuation_needed)
    headers = spec.headers()
    finishes: list[str | None] = []
    async with httpx.AsyncClient(timeout=spec.timeout_s) as client:
        if continuation_needed:
            msgs = _continuation_messages()
            cont = endpoints.chat_payload(spec, model, msgs, CANARY_MAX_TOKENS, benchmarks.HUMANEVAL_STOP, True)
            turn = endpoints.chat_payload(spec, model, msgs, CANARY_MAX_TOKENS, benchmarks.HUMANEVAL_STOP, False)
            r_cont = await _post(client, spec, spec.chat_path(True), cont, headers, "continuation", report)
            r_turn = await _post(client, spec, spec.chat_path(False), turn, headers, "new_turn", report)
            finishes += [endpoints.message_parts(r)["finish_reason"] for r in (r_cont, r_turn) if r]
            p_cont, p_turn = _prompt_tokens(r_cont), _prompt_tokens(r_turn)
            if r_cont is None:
                report.checks.append(Check("continuation.request", False, "the continuation request failed"))
            if p_cont is None or p_turn is None:
                report.checks.append(Check("continuation.prompt_tokens", None,
                                           "the endpoint reported no prompt token count"))
            else:
                report.checks.append(Check(
                    "continuation.prompt_tokens", p_cont < p_turn,
                    f"continuation {p_cont} prompt tokens, new turn {p_turn} (continuing must count fewer)"))
            if spec.kind == "vllm":
                rendered = await _rendered_prompt(client, spec, cont, headers)
                if rendered is None:
                    report.checks.append(Check("continuation.rendered", None, "/tokenize or /detokenize unavailable"))
                else:
                    prefix = msgs[-1]["content"]
                    # A template that trims whitespace drops the prompt's final newline; that is still a continuation.
                    ok = rendered.endswith(prefix) or rendered.endswith(prefix.rstrip())
                    report.checks.append(Check("continuation.rendered", ok,
                                               f"rendered prompt ends with {rendered[-40:]!r}"))
            if r_cont is not None:
                text = (endpoints.message_parts(r_cont)["content"] or "").lstrip()
                restarted = text.startswith("```") or text.startswith("def add_one")
                report.checks.append(Check("continuation.no_restart", not restarted,
                                           f"reply starts with {text[:40]!r}"))
        think = endpoints.chat_payload(spec, model, [{"role": "user", "content": THINKING_QUESTION}],
                                       CANARY_MAX_TOKENS, None, False)
        r_think = await _post(client, spec, spec.chat_path(False), think, headers, "thinking", report)
        if r_think is None:
            report.checks.append(Check("thinking.off", False, "the thinking-off request failed"))
        else:
            parts = endpoints.message_parts(r_think)
            finishes.append(parts["finish_reason"])
            content = parts["content"] or ""
            reasoning = parts["reasoning_content"] or ""
            ok = not reasoning.strip() and "<think>" not in content and bool(content.strip())
            report.checks.append(Check("thinking.off", ok, f"reasoning {len(reasoning)} chars, content "
                                                           f"{len(content)} chars: {content[:40]!r}"))
    bad = [f for f in finishes if f not in ("stop", "length")]
    failed = [f"{r['canary']}: {r['error']}" for r in report.requests if r.get("error")]
    detail = f"finish reasons {finishes}"
    if failed:
        # Say why a request had no finish reason at all (HTTP 500, 429, a timeout), not only that it had none.
        detail += f"; {len(failed)} canary request(s) failed: " + "; ".join(f[:200] for f in failed[:3])
    report.checks.append(Check("finish_reason", not bad and bool(finishes), detail))
    return report


def run_canaries(spec: endpoints.EndpointSpec, model: str, continuation_needed: bool = True) -> CanaryReport:
    return run_sync(_run(spec, model, continuation_needed))
