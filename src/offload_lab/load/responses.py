"""A server's answer is input: every response the load generator reads is bounded here before anything uses it.

An OpenAI-compatible server may be any program (a proxy, a fork, a fake): ``/v1/models`` with no ``id``, a
``/tokenize`` whose ``tokens`` is a dict, usage of 10**30 tokens, a chunk whose ``choices`` is a string. Each answer
is parsed through a model with types, sizes, counts and finite numbers in range (:mod:`pydantic`, strict), and one
that fails is a :class:`BadResponse` (a :class:`~offload_lab.core.errors.ServerError`, exit 3) naming the URL, the
field, what was expected and the first few dozen bytes of what came, redacted -- never a ``KeyError`` deep inside.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError  # noqa: F401 (ValidationError re-exported)

from offload_lab.core.bounds import MAX_TOKENS
from offload_lab.core.errors import ServerError
from offload_lab.core.redact import redact_text

# How much of an offending answer a message quotes.
QUOTE_BYTES = 60
# No JSON answer the load generator reads is larger: a /tokenize of MAX_TOKENS ids is ~80 MB.
MAX_JSON_BYTES = 128 * 1024 * 1024
# Token ids are vocabulary indices: no vocabulary has 2**31 entries.
MAX_TOKEN_ID = 2 ** 31 - 1

Count = Annotated[int, Field(ge=0, le=MAX_TOKENS)]
TokenId = Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]


class BadResponse(ServerError):
    """A server's answer did not have the shape or the values the protocol allows."""


def quote(raw: bytes | str | Any, limit: int = QUOTE_BYTES) -> str:
    """The first ``limit`` bytes of an answer as printable text, redacted: enough to recognise it, never a secret."""
    if isinstance(raw, (bytes, bytearray)):
        text = bytes(raw[: limit * 4]).decode("utf-8", errors="replace")
    elif isinstance(raw, str):
        text = raw[: limit * 4]
    else:
        text = repr(raw)[: limit * 4]
    text = redact_text(text)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return repr(text[:limit] + ("..." if len(text) > limit else ""))


def bad(url: str, field: str, expected: str, got: Any) -> BadResponse:
    return BadResponse(f"the server at {redact_text(url)} answered with a bad {field}: expected {expected}, got "
                       f"{quote(got)}; the server (or a proxy before it) does not speak the OpenAI protocol as vLLM "
                       "does")


class _Strict(BaseModel):
    # Extra fields are the server's business; the ones we read must have their types (no "3" for 3, no true for 1).
    model_config = ConfigDict(extra="ignore", strict=True, hide_input_in_errors=True)


class ModelCard(_Strict):
    id: str = Field(min_length=1, max_length=1024)


class ModelList(_Strict):
    data: list[ModelCard] = Field(max_length=100_000)


class Tokenized(_Strict):
    tokens: list[TokenId] = Field(max_length=MAX_TOKENS)
    max_model_len: Count | None = None


class Detokenized(_Strict):
    prompt: str = Field(max_length=MAX_TOKENS * 64)


class PromptDetails(_Strict):
    cached_tokens: Count | None = None


class Usage(_Strict):
    prompt_tokens: Count | None = None
    completion_tokens: Count | None = None
    total_tokens: Count | None = None
    prompt_tokens_details: PromptDetails | None = None


M = TypeVar("M", bound=BaseModel)


def loads(raw: bytes, url: str, field: str = "body") -> Any:
    """JSON of an answer, bounded in size; a :class:`BadResponse` for bytes that are not JSON."""
    if len(raw) > MAX_JSON_BYTES:
        raise bad(url, field, f"at most {MAX_JSON_BYTES:,} bytes of JSON", raw)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        # orjson also refuses invalid UTF-8 and integers beyond 64 bits here.
        raise bad(url, field, f"JSON ({str(e).split(':')[0]})", raw) from None


def validate(model: type[M], obj: Any, url: str, raw: Any = None) -> M:
    """``obj`` as ``model``, or a :class:`BadResponse` naming the first wrong field and what it must be."""
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        err = e.errors(include_input=False)[0]
        field = ".".join(str(p) for p in err["loc"]) or "body"
        got = at(obj, err["loc"])
        raise bad(url, f"field {field!r}", err["msg"].lower(), got if got is not _MISSING else raw or obj) from None


def parse(model: type[M], raw: bytes, url: str) -> M:
    return validate(model, loads(raw, url), url, raw)


_MISSING = object()


def at(obj: Any, loc: tuple[Any, ...]) -> Any:
    for p in loc:
        try:
            obj = obj[p]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return obj


def finite(value: Any, lo: float = 0.0, hi: float = math.inf) -> bool:
    """Whether ``value`` is a real number (not a bool), finite, within [lo, hi]."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and lo <= value <= hi)
