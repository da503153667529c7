"""Secrets out of everything we record or print: credentials in URLs, secret-looking values.

A URL like ``http://user:password@host/v1?api_key=...`` is needed to connect but must never reach a manifest, a
ledger, a data file or a message: :func:`redact_url` keeps the scheme, host, port and path and replaces the userinfo
and secret query values with ``***``. :func:`redact_text` does the same for every URL inside a message, and
:func:`redact_record` for every string inside a record about to be written.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any, Iterator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"
# Names of environment variables, flags and query keys whose values are secrets.
SECRET_NAME = re.compile(r"(key|token|secret|passw(or)?d|credential|auth(?!or))", re.IGNORECASE)
# Words that make a name secret when they stand alone in it (GH_PAT, --api_key, --password, x-auth-token): a name is
# split at '-', '_', '.' and camelCase humps. Whole words, so that --max-num-batched-tokens is not a secret.
SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "pwd", "pass", "passphrase",
                          "pat", "credential", "credentials", "auth", "authorization", "bearer", "cookie",
                          "accesskey", "privatekey", "signature"})
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
# Flags whose next argument (or `=value`) is a secret, as vLLM and OpenAI clients spell them; any flag whose name
# holds a secret word counts too (:func:`is_secret_flag`).
SECRET_FLAGS = ("--api-key", "--hf-token", "--token")
# A URL inside free text: scheme, then anything up to whitespace, a quote or a bracket.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()\[\]{}]+")


def redact_url(url: str) -> str:
    """The URL without credentials: userinfo becomes ``***@`` and the values of secret query keys ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or not parts.scheme or not parts.netloc:
        # Not parseable as a URL: still never let `user:password@` through.
        return re.sub(r"://[^/\s@]*@", f"://{MASK}@", url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = MASK + "@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(looks_secret(k) for k, _ in pairs):
            query = urlencode([(k, MASK if looks_secret(k) else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str) -> str:
    """Every URL inside free text (an error message, a log line) passed through :func:`redact_url`."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)


def redact_args(args: list[str]) -> list[str]:
    """A command line with the values of secret flags (``--api-key X``, ``--api-key=X``) and URLs masked."""
    out: list[str] = []
    hide_next = False
    for a in args:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        flag, eq, _ = a.partition("=")
        if is_secret_flag(flag):
            out.append(f"{flag}={MASK}" if eq else a)
            hide_next = not eq
            continue
        out.append(redact_text(a))
    return out


def redact_record(obj: Any) -> Any:
    """A copy of a JSON-like record with credentials in every string removed (dict keys are kept)."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, dict):
        return {k: redact_record(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        redacted = [redact_record(v) for v in obj]
        return redact_args(redacted) if all(isinstance(v, str) for v in redacted) else redacted
    return obj


def name_words(name: str) -> list[str]:
    return [w.lower() for w in _WORD_SPLIT.split(name) if w]


# A URL's credentials reach a notebook through the kernel's environment, never through its parameters: papermill
# writes parameters into the output notebook (the injected cell and its metadata), which is data.
SERVER_URL_ENV = "OFFLOAD_LAB_SERVER_URL"


@contextlib.contextmanager
def url_outside_parameters(url: str | None) -> Iterator[str | None]:
    """The form of ``url`` to pass as a notebook parameter (redacted); meanwhile the whole URL is in
    :data:`SERVER_URL_ENV`, where :func:`url_with_credentials` finds it in the kernel."""
    if not url or redact_url(url) == url:
        yield url
        return
    before = os.environ.get(SERVER_URL_ENV)
    os.environ[SERVER_URL_ENV] = url
    try:
        yield redact_url(url)
    finally:
        if before is None:
            os.environ.pop(SERVER_URL_ENV, None)
        else:
            os.environ[SERVER_URL_ENV] = before


def url_with_credentials(shown: str | None) -> str | None:
    """The URL a notebook was given in redacted form, with its credentials back from :data:`SERVER_URL_ENV`."""
    full = os.environ.get(SERVER_URL_ENV)
    if shown and full and MASK in shown and redact_url(full) == shown:
        return full
    return shown


def looks_secret(name: str) -> bool:
    """Whether an environment variable's (or field's) name says its value is a secret."""
    return bool(SECRET_NAME.search(name)) or any(w in SECRET_WORDS for w in name_words(name))


def is_secret_flag(arg: str) -> bool:
    """Whether a command-line flag (``--api_key``, ``--password=x``) takes a secret."""
    flag = arg.split("=", 1)[0]
    return flag in SECRET_FLAGS or (flag.startswith("-") and any(w in SECRET_WORDS for w in name_words(flag)))
