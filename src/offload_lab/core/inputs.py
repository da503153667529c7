"""Reading what users give us: text, JSON and YAML files with a size bound, validation errors named by field or flag,
and outputs that are never overwritten without ``--force``.

Every loader of a user file calls these instead of ``Path.read_text``, ``json.loads`` or ``yaml.safe_load``, so that a
missing file, a directory, one non-UTF-8 byte, a 200,000-deep array, a YAML alias bomb or a 10 GB file is an
:class:`InputError` naming the file (exit 2), never a traceback.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml
from pydantic import ValidationError

from offload_lab.core.errors import InputError
from offload_lab.core.places import check_output, kind_of, require_file

CONFIG_MAX_BYTES = 4 * 2**20    # stack, campaign, profile files: a few kB in practice (the largest is 21 kB)
DATA_MAX_BYTES = 256 * 2**20    # plans, routing counts, manifests
YAML_MAX_NODES = 100_000        # after alias expansion: the billion-laughs file is refused long before it grows
MAX_PROBLEMS = 20               # lines printed for repeated problems; the rest are counted


def read_bytes(path: Path | str, what: str, max_bytes: int = CONFIG_MAX_BYTES) -> bytes:
    """The file's bytes; InputError naming ``what path`` when it is missing, a directory, unreadable or too big."""
    p = require_file(path, what)  # a directory, a FIFO, a device: named for what it is, and never opened
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise InputError(f"{what} {p}: {size:,} bytes is more than the {max_bytes:,} this reader accepts; "
                             "is it the right file?")
        with open(p, "rb") as f:
            return f.read(max_bytes + 1)
    except InputError:
        raise
    except OSError as e:
        raise InputError(f"{what} {p}: cannot read it ({e.strerror or e})") from e


def decode_utf8(data: bytes, path: Path | str, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(f"{what} {path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}, line "
                         f"{line}); save it as UTF-8") from e


def read_text(path: Path | str, what: str, max_bytes: int = CONFIG_MAX_BYTES) -> str:
    """A UTF-8 text file; a bad byte is named by its offset and line."""
    return decode_utf8(read_bytes(path, what, max_bytes), path, what)


def _parse(parse: Any, text: str, path: Path | str, what: str, errors: tuple[type[Exception], ...],
           describe: Any) -> Any:
    try:
        return parse(text)
    except errors as e:
        raise InputError(f"{what} {path}: {describe(e)}") from e
    except RecursionError as e:
        raise InputError(f"{what} {path}: nested too deeply to be a {what}") from e
    except ValueError as e:  # Python's bound on an integer's digits (4,300); a YAML date such as 2026-13-45
        said = str(e).split(";")[0]
        raise InputError(f"{what} {path}: holds a value that cannot be read ({said}); correct it") from e


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def json_depth_at_most(text: str, limit: int) -> bool:
    """Whether the JSON text nests arrays and objects at most ``limit`` deep, found without recursion (a parser's
    recursion on 50,000 open brackets is what this guards against) and stopping at the first bracket too deep."""
    depth = 0
    for m in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        if depth > limit:
            return False
    return True


def parse_json(text: str, path: Path | str, what: str, max_depth: int | None = None) -> Any:
    """JSON text; with ``max_depth``, a document nested deeper than its format allows is refused before parsing."""
    if max_depth is not None and not json_depth_at_most(text, max_depth):
        raise InputError(f"{what} {path}: nested more than {max_depth} deep, which no {what} is")
    return _parse(json.loads, text, path, what, (json.JSONDecodeError,),
                  lambda e: f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})")


def read_json(path: Path | str, what: str, max_bytes: int = DATA_MAX_BYTES, expect: type | None = None) -> Any:
    """A JSON file; ``expect`` (dict or list) is checked at the top level."""
    return _expect(parse_json(read_text(path, what, max_bytes), path, what), expect, path, what)


# libyaml's parser when PyYAML was built with it: a 4 MB file parses in a second, not a minute.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _BoundedLoader(_SafeLoader):  # type: ignore[misc, valid-type]
    """A safe loader that refuses a document whose values, aliases expanded, number more than YAML_MAX_NODES.

    PyYAML builds an alias once and shares it, so a billion-laughs file loads small; what blows up is whoever walks
    the result (a validator, a JSON dump). The expanded size is counted on the node graph, each node's size memoized,
    so the count itself stays cheap."""

    def construct_document(self, node: Any) -> Any:
        sizes: dict[int, int] = {}

        def size(n: Any) -> int:
            if id(n) in sizes:
                return sizes[id(n)]
            sizes[id(n)] = 1  # a recursive alias counts once (and PyYAML refuses to build it anyway)
            if isinstance(n, yaml.SequenceNode):
                total = 1 + sum(size(c) for c in n.value)
            elif isinstance(n, yaml.MappingNode):
                total = 1 + sum(size(k) + size(v) for k, v in n.value)
            else:
                total = 1
            sizes[id(n)] = total
            return total

        if size(node) > YAML_MAX_NODES:
            raise yaml.YAMLError(f"more than {YAML_MAX_NODES:,} values once aliases are expanded; refused as a "
                                 "YAML bomb")
        return super().construct_document(node)


    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        # A key given twice is refused: PyYAML keeps the last, so a second `experiments:` would silently replace the
        # first list (and the error, if any, would blame one of its fields).
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise DuplicateKeyError(f"key {key!r} appears twice (lines {seen[key]} and {line}); keep one")
            seen[key] = line
        return super().construct_mapping(node, deep)


class DuplicateKeyError(yaml.YAMLError):
    """A mapping names a key twice."""


def parse_yaml(text: str, path: Path | str, what: str) -> Any:
    return _parse(lambda t: yaml.load(t, Loader=_BoundedLoader), text, path, what, (yaml.YAMLError,),  # noqa: S506
                  lambda e: f"not valid YAML ({str(e).strip()})")


# A parameter value typed on a command line or in a notebook's parameters: a list of lengths, a mapping of settings.
PARAMETER_MAX_BYTES = 64 * 1024


def parse_yaml_value(text: str, what: str) -> Any:
    """A parameter's value read as YAML (``-p context_lengths '[1024, 4096]'``), bounded like every YAML file: an
    alias bomb, a document too deep or a value over 64 KiB is an :class:`InputError` naming ``what``."""
    if len(text) > PARAMETER_MAX_BYTES:
        raise InputError(f"{what}: {len(text):,} characters; a parameter's value is at most {PARAMETER_MAX_BYTES:,}")
    try:
        return parse_yaml(text, "(its value)", what)
    except InputError as e:  # on one line: YAML's own messages span several, and this one is printed after a flag
        raise InputError(" ".join(str(e).split())) from e.__cause__


def read_yaml(path: Path | str, what: str, max_bytes: int = CONFIG_MAX_BYTES, expect: type | None = dict) -> Any:
    """A YAML file (safe loader, bounded); by default it must be a mapping."""
    return _expect(parse_yaml(read_text(path, what, max_bytes), path, what), expect, path, what)


def _expect(data: Any, expect: type | None, path: Path | str, what: str) -> Any:
    if expect is not None and not isinstance(data, expect):
        kind = {dict: "a mapping of fields", list: "a list"}.get(expect, expect.__name__)
        got = "empty" if data is None else f"a {type(data).__name__}"
        raise InputError(f"{what} {path}: expected {kind}, got {got}")
    return data


def field_errors(e: ValidationError, flags: Mapping[str, str] | None = None) -> list[str]:
    """Each pydantic error as ``location: message``; a top-level field found in ``flags`` is named by its flag."""
    out = []
    for err in e.errors():
        loc = [str(x) for x in err["loc"]]
        head = flags.get(loc[0]) if flags and loc else None
        where = (head + (f" ({'.'.join(loc[1:])})" if loc[1:] else "")) if head else ".".join(loc) or "(top level)"
        bad = err.get("input")
        shown = f" (got {bad!r})" if head and not isinstance(bad, (dict, list)) else ""
        out.append(f"{where}: {err['msg']}{shown}")
    return out


def pydantic_input_error(e: ValidationError, what: str, flags: Mapping[str, str] | None = None) -> InputError:
    """A ValidationError as an InputError naming ``what`` and every field (or flag) that is wrong."""
    lines = summarize(field_errors(e, flags))
    if len(lines) == 1:
        return InputError(f"{what}: {lines[0]}")
    return InputError(f"{what} is not valid:\n" + "\n".join(f"  {ln}" for ln in lines))


def summarize(problems: Iterable[str], limit: int = MAX_PROBLEMS) -> list[str]:
    """Problems with repeats counted (``x (3 times)``) and at most ``limit`` lines, plus one saying how many more."""
    counts: dict[str, int] = {}
    for p in problems:
        counts[p] = counts.get(p, 0) + 1
    lines = [p if n == 1 else f"{p} ({n:,} times)" for p, n in counts.items()]
    if len(lines) > limit:
        rest = len(lines) - limit
        lines = lines[:limit] + [f"... and {rest:,} more problem(s) of {sum(counts.values()):,} in all"]
    return lines


def check_out(path: Path | str, force: bool, flag: str = "--out", kind: str = "file") -> Path:
    """Refuse to overwrite: an existing ``--out`` file (or non-empty directory, ``kind="dir"``) needs ``--force``;
    and refuse a place nothing can be written (:func:`offload_lab.core.places.check_output`).

    Call it before any work, so that a refusal costs nothing. Returns the path.
    """
    p = check_output(path, flag, kind, force=force)
    if kind == "dir" and p.is_dir() and any(p.iterdir()) and not force:
        raise InputError(f"{flag} {p} is a directory that is not empty; pass --force to write into it, or "
                         "choose another")
    return p


def check_dir(path: Path | str, flag: str, must_exist: bool = False, write: bool = False) -> Path:
    """A directory flag (``--data-dir``): a file there is refused; a missing one is refused when ``must_exist``;
    with ``write``, a place nothing can be written is refused too (:func:`offload_lab.core.places.check_output`)."""
    if write:
        return check_output(path, flag, "dir")
    p = Path(path)
    kind = kind_of(p)
    if kind is not None and not kind.endswith("a directory"):
        raise InputError(f"{flag} {p}: is {kind}, not a directory")
    if must_exist and kind is None:
        raise InputError(f"{flag} {p}: no such directory")
    return p


def check_server_url(text: Any, what: str, credentials: bool = True) -> str:
    """A server's base URL as ``bench --url`` takes it, else InputError naming ``what`` with the URL redacted: http or
    https with a host and a port in range; no query or fragment (a key there would travel in every request's path,
    into the server's access log). ``credentials=False`` (a notebook parameter, which papermill writes into the output
    notebook) refuses ``user:password@`` too: the whole URL goes in the kernel's environment instead."""
    from urllib.parse import urlsplit

    from offload_lab.core.redact import SERVER_URL_ENV, add_url_secrets, redact_text

    if not isinstance(text, str):
        raise InputError(f"{what} {type(text).__name__} is not a URL; give the server's base URL as text, e.g. "
                         "http://127.0.0.1:8000")
    add_url_secrets(text)  # whatever happens next, no message shows them
    try:
        parts = urlsplit(text)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        _ = parts.port  # a port out of range raises ValueError
    except ValueError:
        ok = False
    if not ok:
        raise InputError(f"{what} {redact_text(text)!r} is not an http:// or https:// URL with a host, "
                         "e.g. http://127.0.0.1:8000")
    if parts.query or parts.fragment:
        raise InputError(f"{what} {redact_text(text)!r} holds a query or fragment (?…, #…); give the server's base URL "
                         "only, e.g. http://127.0.0.1:8000 (a key in the URL would be written into the server's "
                         "access log)")
    if not credentials and "@" in parts.netloc:
        raise InputError(f"{what} {redact_text(text)!r} holds credentials (user:password@), which papermill would "
                         f"write into the output notebook; leave them out, and put the whole URL in the environment "
                         f"variable {SERVER_URL_ENV} of the process that starts the kernel")
    return text
