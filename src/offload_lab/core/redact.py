"""Secrets out of everything we record or print: credentials in URLs, secret-looking values.

A URL like ``http://user:password@host/v1?api_key=...`` is needed to connect but must never reach a manifest, a
ledger, a data file or a message: :func:`redact_url` keeps the scheme, host, port and path and replaces the userinfo
and secret query values with ``***``. :func:`redact_text` does the same for every URL inside a message, and
:func:`redact_record` for every string inside a record about to be written.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import threading
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


# The run's own secrets, whoever sends them back: a server that quotes the request's Authorization header in an error
# text, or echoes the URL it was asked, puts them where no URL pattern finds them. Every credential this process is
# given (a URL's userinfo, a key from the environment) is remembered here with the forms it travels in (the base64 of
# ``user:password`` that a Basic header carries, percent-encoded), and masked in everything written or printed.
_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()
# Shorter values are not masked: a 3-letter password would mask every word holding those letters.
MIN_SECRET_LEN = 6
# Header-shaped text: `Authorization: Bearer x`, `"x-api-key": "x"`, `api_key=x`, and bare `Bearer x` / `Basic x`.
_HEADER_VALUE = re.compile(
    r"(?i)(\b(?:proxy-)?authorization|\bx-api-key|\bapi[-_]?key|\bcookie|\bset-cookie|\bx-auth-token)"
    r"(\\?[\"']?\s*[:=]\s*\\?[\"']?)([^\"'\r\n,;}\\]+)")
# A bare scheme and token: `Bearer sk-...` (a token holds a digit or a mark, so that "bearer of news" stays), and
# `Basic <base64>` only where the base64 decodes to `user:password`.
_BEARER = re.compile(r"\b([Bb]earer)(\s+)([A-Za-z0-9._~+/=-]{8,})")
_BASIC = re.compile(r"\b(Basic)(\s+)([A-Za-z0-9+/]{4,}={0,2})")


def _forms(value: str) -> set[str]:
    from urllib.parse import quote, unquote

    out = {value, unquote(value), quote(value, safe="")}
    return {v for v in out if len(v) >= MIN_SECRET_LEN}


def add_secret(value: str | None, user: str | None = None) -> None:
    """Remember a credential of this run (and, with ``user``, the Basic form of ``user:value``) for redaction."""
    if not value or not isinstance(value, str):
        return
    from urllib.parse import unquote

    forms = _forms(value)
    pairs = [f"{unquote(user)}:{unquote(value)}"] if user is not None else []
    pairs.append(f":{unquote(value)}")
    for pair in pairs:
        forms.add(base64.b64encode(pair.encode()).decode())
        forms.add(base64.b64encode(pair.encode()).decode().rstrip("="))
    with _SECRETS_LOCK:
        _SECRETS.update(f for f in forms if len(f) >= MIN_SECRET_LEN)


def add_url_secrets(url: str | None) -> None:
    """Remember the credentials a URL carries: userinfo (and its Basic form) and secret query values."""
    if not url or not isinstance(url, str):
        return
    try:
        parts = urlsplit(url)
    except ValueError:
        return
    if parts.password:
        add_secret(parts.password, parts.username or "")
    if parts.username:
        add_secret(parts.username, None if parts.password else "")
        if not parts.password:
            add_secret(parts.username + ":", None)
            forms = base64.b64encode(f"{parts.username}:".encode()).decode()
            with _SECRETS_LOCK:
                _SECRETS.update({forms, forms.rstrip("=")})
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        if looks_secret(k):
            add_secret(v)


_CACHE: dict[str, Any] = {"key": None, "secrets": [], "bytes": []}


def known_secrets() -> list[str]:
    """This run's secrets, and the values of environment variables named like secrets (HF_TOKEN, *_API_KEY); the
    longest first, so that a secret holding another is masked whole. Cached until a secret is added or the
    environment changes size (every record written asks, so the scan of the environment is not repeated)."""
    add_url_secrets(os.environ.get(SERVER_URL_ENV))
    key = (len(_SECRETS), len(os.environ), os.environ.get(SERVER_URL_ENV))
    if _CACHE["key"] == key:
        return _CACHE["secrets"]
    with _SECRETS_LOCK:
        found = set(_SECRETS)
    for name, value in os.environ.items():
        if name != SERVER_URL_ENV and len(value) >= MIN_SECRET_LEN and looks_secret(name):
            found |= _forms(value)
    ordered = sorted(found, key=len, reverse=True)
    _CACHE.update(key=key, secrets=ordered, bytes=[x.encode() for x in ordered])
    return ordered


# Keys in the shapes their issuers give them (OpenAI/DeepSeek sk-, Hugging Face hf_, GitHub ghp_, Slack xox?-, AWS
# AKIA): masked wherever they appear, given to us or not (a key typed where a variable's name belongs).
_KEY_SHAPE = re.compile(r"\b(?:sk|sk-proj|sk-ant|hf|gh[pousr]|github_pat|xox[abprs])[-_][A-Za-z0-9_-]{16,}|\bAKIA[0-9A-Z]{16}\b")


_KEY_SHAPE_B = re.compile(_KEY_SHAPE.pattern.encode())


def _bearer(m: re.Match[str]) -> str:
    token = m.group(3)
    return m.group(1) + m.group(2) + MASK if re.search(r"[0-9._~+/=-]", token) else m.group(0)


def _basic(m: re.Match[str]) -> str:
    try:
        decoded = base64.b64decode(m.group(3) + "=" * (-len(m.group(3)) % 4), validate=True)
    except ValueError:
        return m.group(0)
    return m.group(1) + m.group(2) + MASK if b":" in decoded else m.group(0)


def redact_secrets(text: str, secrets: list[str] | None = None) -> str:
    """Known secrets and header-shaped credentials in free text masked (no URL handling)."""
    for s in known_secrets() if secrets is None else secrets:
        if s in text:
            text = text.replace(s, MASK)
    text = _HEADER_VALUE.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    text = _KEY_SHAPE.sub(MASK, text)
    text = _BEARER.sub(_bearer, text)
    return _BASIC.sub(_basic, text)


def redact_text(text: str, secrets: list[str] | None = None) -> str:
    """Free text (an error message, a log line, a server's answer) with every URL passed through :func:`redact_url`,
    this run's secrets and header-shaped credentials masked."""
    if "://" in text:
        text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
    return redact_secrets(text, secrets)


_TRIGGERS = (b"://", b"earer", b"Basic", b"uthorization", b"UTHORIZATION", b"api-key", b"api_key", b"apikey",
             b"API-KEY", b"API_KEY", b"ookie", b"auth-token")


def needs_redaction(data: bytes) -> bool:
    """Whether serialized data may hold something :func:`redact_record` would change: a fast pre-check for the
    writers, since most lines of an event log hold no URL, no header and no secret."""
    if any(w in data for w in _TRIGGERS) or _KEY_SHAPE_B.search(data):
        return True
    known_secrets()
    return any(s in data for s in _CACHE["bytes"])


_TRIGGERS_STR = tuple(t.decode() for t in _TRIGGERS)


def _text_needs(text: str, secrets: list[str]) -> bool:
    return (any(w in text for w in _TRIGGERS_STR) or bool(_KEY_SHAPE.search(text))
            or any(x in text for x in secrets))


def record_needs_redaction(obj: Any, secrets: list[str] | None = None) -> bool:
    """Whether :func:`redact_record` would look at anything in ``obj``: only its strings are read (an event's lists
    of token stamps are skipped at the cost of a type check each)."""
    secrets = known_secrets() if secrets is None else secrets
    if isinstance(obj, str):
        return _text_needs(obj, secrets)
    if isinstance(obj, dict):
        return any((isinstance(k, str) and _secret_key(k)) or record_needs_redaction(v, secrets)
                   for k, v in obj.items() if isinstance(v, (str, dict, list, tuple)))
    if isinstance(obj, (list, tuple)):
        if len(obj) > 16 and b'"' not in _dumps(obj):
            return False  # numbers only (an event's token stamps): no string in it, found at C speed
        return any(record_needs_redaction(v, secrets) for v in obj if isinstance(v, (str, dict, list, tuple)))
    return False


def _dumps(obj: Any) -> bytes:
    import orjson

    try:
        return orjson.dumps(obj, default=str, option=orjson.OPT_SERIALIZE_NUMPY)
    except TypeError:
        return b'"'  # not serializable as is: walk it


def redacted_json_bytes(obj: Any, dumps: Any) -> bytes:
    """``dumps(obj)`` (bytes or str), after :func:`redact_record` where the record needs it."""
    if record_needs_redaction(obj):
        obj = redact_record(obj)
    data = dumps(obj)
    return data.encode() if isinstance(data, str) else data


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


def redact_record(obj: Any, _secrets: list[str] | None = None) -> Any:
    """A copy of a JSON-like record with credentials in every string removed (dict keys are kept; a value under a
    secret-named key such as ``Authorization`` or ``api_key`` is masked whole)."""
    secrets = known_secrets() if _secrets is None else _secrets
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    if isinstance(obj, dict):
        return {k: (MASK if isinstance(v, str) and v and isinstance(k, str) and _secret_key(k)
                    else redact_record(v, secrets)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        if obj and not any(isinstance(v, (str, dict, list, tuple)) for v in obj):
            return list(obj)  # numbers only (token stamps): nothing to redact
        redacted = [redact_record(v, secrets) for v in obj]
        return redact_args(redacted) if all(isinstance(v, str) for v in redacted) else redacted
    return obj


# Keys whose string value is a credential itself (a header map, a request's api_key field); names like
# `api_key_env` (a variable's name) or `max_tokens` are not.
_SECRET_KEYS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key", "api_key", "apikey",
                          "password", "passwd", "access_token", "cookie", "set-cookie", "hf_token"})


def _secret_key(key: str) -> bool:
    return key.lower() in _SECRET_KEYS


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


# The shell's working directories: "pwd" there is print-working-directory, and masking the current directory turned
# every absolute data path of a paper built from it into "***/data/..." (issue 30).
NOT_SECRET_ENV = frozenset({"PWD", "OLDPWD"})


def looks_secret(name: str) -> bool:
    """Whether an environment variable's (or field's) name says its value is a secret."""
    if name in NOT_SECRET_ENV:
        return False
    return bool(SECRET_NAME.search(name)) or any(w in SECRET_WORDS for w in name_words(name))


def is_secret_flag(arg: str) -> bool:
    """Whether a command-line flag (``--api_key``, ``--password=x``) takes a secret."""
    flag = arg.split("=", 1)[0]
    return flag in SECRET_FLAGS or (flag.startswith("-") and any(w in SECRET_WORDS for w in name_words(flag)))
