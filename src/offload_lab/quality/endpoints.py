"""Endpoints: the same request, translated for each backend, with every sampling setting explicit.

Backends disagree on defaults (vLLM may apply the model's ``generation_config``; the DeepSeek API defaults to
temperature 1.0 and, in V4, thinking on) and on how to continue a partial assistant message, so each kind gets an
adapter:

- ``vllm``: ``continue_final_message: true`` with ``add_generation_prompt: false``; thinking off through
  ``chat_template_kwargs``;
- ``deepseek``: the beta prefix completion (``/beta/chat/completions``, ``"prefix": true`` on the last message);
  thinking off with ``thinking: {type: disabled}``;
- ``openai``: a plain chat completion, which has no way to continue a message: its HumanEval runs fail the
  continuation canary, as they should.

API keys are read from the environment variable the spec names, only when a request is built; stored requests carry
the header with its value redacted.
"""

from __future__ import annotations

import copy
import os
import re
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from offload_lab.core.bounds import MAX_SECONDS
from offload_lab.core.errors import InputError
from offload_lab.core.redact import MASK, add_secret, add_url_secrets, redact_url

# What an environment variable's name looks like; anything else given as --api-key-env is most likely the key itself.
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_KEY_SHAPED = re.compile(r"^(sk|pk|rk|hf|gh[pousr]|xox[abp]|AKIA)[-_]|^[A-Za-z0-9+/=_-]{32,}$")

DEFAULT_API_KEY_ENV = "OFFLOAD_LAB_REFERENCE_API_KEY"
REDACTED = MASK  # one mask for every redaction
_SECRET_HEADERS = ("authorization", "api-key", "x-api-key")


class EndpointSpec(BaseModel):
    """One side of a comparison: where to send requests and with which settings."""

    # hide_input_in_errors: a key given where a variable's name belongs must not come back in the message.
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    label: str = Field("local", description="name of this side in data files (local, reference, ...)")
    url: str = Field(description="base URL, e.g. http://127.0.0.1:8000 or https://api.deepseek.com")
    kind: Literal["vllm", "deepseek", "openai"] = Field(
        "vllm", description="backend adapter: vllm (continue_final_message, chat_template_kwargs), deepseek (beta "
                            "prefix completion, thinking disabled), openai (plain chat: cannot continue)")
    model: str | None = Field(None, description="model name; for vllm the server's first model when not given")
    api_key_env: str | None = Field(None, description="environment variable holding the API key, never the key itself "
                                                      f"(kind deepseek: {DEFAULT_API_KEY_ENV} when not given); sent "
                                                      "as a Bearer token, in place of a user:password in the URL")
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = Field(0, ge=0, description="sampling seed sent with every request (backends may ignore it)")
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=lambda: {"enable_thinking": False, "thinking": False},
        description="vllm only: template variables; both spellings of thinking-off (Qwen3, DeepSeek) by default",
    )
    extra_body: dict[str, Any] = Field(default_factory=dict, description="extra request fields, sent as given")
    concurrency: int = Field(4, ge=1, description="requests in flight at once")
    retries: int = Field(3, ge=0, description="retries of a request that failed for infrastructure reasons")
    timeout_s: float = Field(600.0, gt=0, le=MAX_SECONDS, description="seconds one request may take")
    backoff_s: float = Field(1.0, ge=0, description="first retry delay, doubled each retry")

    @field_validator("url")
    @classmethod
    def _remember_url_secrets(cls, value: str) -> str:
        add_url_secrets(value)
        return value

    @field_validator("api_key_env")
    @classmethod
    def _a_name_not_a_key(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not _ENV_NAME.match(value) or _KEY_SHAPED.match(value):
            # The value is most likely the key itself: remembered for redaction, and never repeated in the message.
            add_secret(value)
            raise ValueError("api_key_env takes the NAME of an environment variable holding the key (e.g. "
                             "DEEPSEEK_API_KEY), and was given something shaped like a key itself (not shown); "
                             "export the key in a variable and pass that variable's name")
        return value

    def record(self) -> dict[str, Any]:
        """What a manifest keeps: everything, and only the name of the key's variable; the URL without credentials."""
        return self.model_dump() | {"url": redact_url(self.url)}

    @property
    def key_env(self) -> str | None:
        """The variable the key is read from: --api-key-env, else the kind's default (deepseek), else None."""
        return self.api_key_env or (DEFAULT_API_KEY_ENV if self.kind == "deepseek" else None)

    @property
    def base(self) -> str:
        """Where requests go. With a key configured the key wins: the URL's ``user:password`` is left out, since an
        HTTP client turns URL credentials into its own Basic ``Authorization`` header, which would replace the
        key's Bearer header and the key would never reach the server."""
        url = self.url.rstrip("/")
        return _without_userinfo(url) if self.key_env else url

    def chat_path(self, continuation: bool) -> str:
        if self.kind == "deepseek":
            # DeepSeek's base URL carries no /v1; prefix completion is a beta feature under /beta.
            return "/beta/chat/completions" if continuation else "/chat/completions"
        return "/v1/chat/completions"

    def models_path(self) -> str:
        return "/models" if self.kind == "deepseek" else "/v1/models"

    def api_key(self) -> str | None:
        name = self.key_env
        if not name:
            return None
        key = os.environ.get(name)
        add_secret(key)
        if not key:
            raise InputError(f"endpoint {self.label} ({redact_url(self.url)}) needs an API key in the environment variable "
                             f"{name}, which is not set; export it (keys are never passed as parameters)")
        return key

    def headers(self) -> dict[str, str]:
        key = self.api_key()
        return {"Authorization": f"Bearer {key}"} if key else {}


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def redact_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if k.lower() in _SECRET_HEADERS else v) for k, v in headers.items()}


def chat_payload(spec: EndpointSpec, model: str, messages: list[dict[str, Any]], max_tokens: int,
                 stop: list[str] | None = None, continuation: bool = False) -> dict[str, Any]:
    """The request body for ``spec``'s backend; ``continuation`` continues the final (assistant) message."""
    msgs = copy.deepcopy(messages)
    if continuation and (not msgs or msgs[-1].get("role") != "assistant"):
        raise ValueError("a continuation request must end with the partial assistant message")
    body: dict[str, Any] = {
        "model": model,
        "messages": msgs,
        "max_tokens": max_tokens,
        "temperature": spec.temperature,
        "top_p": spec.top_p,
        "stream": False,
    }
    if spec.seed is not None:
        body["seed"] = spec.seed
    if stop:
        body["stop"] = list(stop)
    if spec.kind == "vllm":
        body["chat_template_kwargs"] = dict(spec.chat_template_kwargs)
        # vLLM rejects both flags true; set both explicitly so a default can never decide.
        body["continue_final_message"] = bool(continuation)
        body["add_generation_prompt"] = not continuation
        # The generated token ids beside the text: two servers' greedy answers are compared token for token.
        body["return_token_ids"] = True
    elif spec.kind == "deepseek":
        body["thinking"] = {"type": "disabled"}
        if continuation:
            msgs[-1]["prefix"] = True
    body.update(copy.deepcopy(spec.extra_body))
    return body


def message_parts(response: dict[str, Any]) -> dict[str, Any]:
    """content, reasoning, finish_reason, usage and fingerprint of a chat completion response."""
    # A server's answer is input: each part is taken only when it has its type (a list where a string belongs is
    # an empty answer, recorded with the raw response, never a crash).
    def of(value: Any, kind: type) -> Any:
        return value if isinstance(value, kind) else None

    choices = of(response.get("choices"), list) or [{}]
    c = of(choices[0], dict) or {}
    msg = of(c.get("message"), dict) or {}
    return {
        "content": of(msg.get("content"), str),
        "reasoning_content": of(msg.get("reasoning_content") or msg.get("reasoning"), str),
        "finish_reason": of(c.get("finish_reason"), str),
        "usage": of(response.get("usage"), dict),
        "system_fingerprint": of(response.get("system_fingerprint"), str),
        "model": of(response.get("model"), str),
    }
