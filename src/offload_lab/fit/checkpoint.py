"""Checkpoint audit from safetensors headers: what a checkpoint holds, without reading a single weight.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON (each tensor's dtype, shape and
``data_offsets`` into the data that follows), then the data. Everything the memory model needs is in the header, so a
checkpoint of hundreds of GiB is audited by reading a few hundred KiB.

Sources (:func:`read_checkpoint`):

- a local directory: the shards named by ``model.safetensors.index.json``, else every ``*.safetensors`` in it;
- a local ``.safetensors`` file;
- an http(s) URL of a file, of an index, or of a directory (``<url>/model.safetensors.index.json``, else
  ``<url>/model.safetensors``);
- ``hf://owner/name@revision``: a Hugging Face repository at a revision, resolved to file URLs with
  ``huggingface_hub.hf_hub_url`` (no API call). The commit the server actually served (``X-Repo-Commit``) is recorded.

Remote reads use range requests: the first request asks for ``bytes=0-(first_read-1)`` (the 8-byte length and, most of
the time, the whole header), a second one the rest of the header when it is longer. Shards are read concurrently, each
with retries on connection errors, 429 and 5xx. A server that ignores ``Range`` answers 200 with the whole body: the
reader stops reading once it holds the header bytes, closes the connection and raises :class:`RangeNotSupportedError`
-- it never downloads weights. ``HF_TOKEN`` (from the environment only) is sent to the Hugging Face endpoint and to no
other host, and is never stored in a record, a log or an error message.

Classification (:func:`classify`) maps each tensor name to a category by ordered regular-expression rules per
architecture (first match wins): routed expert (with its layer and expert), shared expert, dense MLP, attention,
router, embedding, lm_head, Engram table, norm, MTP, and "other" for anything unmatched -- reported with its bytes,
never dropped.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import hashlib
import json
import math
import os
import re
import struct
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

import httpx

from offload_lab.core.errors import InputError

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
# safetensors itself refuses headers above 100 MB; a larger length is a damaged file or not a safetensors file.
MAX_HEADER_BYTES = 100_000_000
DEFAULT_FIRST_READ = 64 * 1024
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
HF_TOKEN_ENV = "HF_TOKEN"

# Bits per element of every safetensors dtype (sub-byte ones from safetensors >= 0.6). Bytes always come from
# data_offsets; this table only checks that offsets and shape agree.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}

CATEGORIES = (
    "routed_expert", "shared_expert", "dense_mlp", "attention", "router", "embedding", "lm_head", "engram", "norm",
    "mtp", "other",
)
EXL3_COMPONENTS = frozenset({"trellis", "suh", "svh", "mcg", "mul1"})
DEFAULT_ENGRAM_PATTERN = r"(?i)(^|\.)engram"


class RangeNotSupportedError(InputError):
    """The server answered a range request with the whole file: reading on would download the weights."""


class FetchError(InputError):
    """A remote file could not be read, after retries where retrying made sense."""


# ----------------------------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str
    offset: int  # absolute offset of the tensor's first byte in its file

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Shard:
    file: str
    header_bytes: int
    file_bytes: int | None
    metadata: dict[str, str]
    tensors: tuple[Tensor, ...]
    fetched_bytes: int = 0  # bytes actually read to get this header (remote: received from the server)
    requests: int = 0


@dataclass
class Checkpoint:
    """What the headers of a checkpoint say. ``source`` is as given by the user and never carries a token."""

    source: str
    kind: str  # directory | file | url | hf
    shards: list[Shard]
    config: dict[str, Any] | None = None
    revision: str | None = None
    commit: str | None = None
    seconds: float = 0.0
    _by_name: dict[str, Tensor] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for shard in self.shards:
            for t in shard.tensors:
                if t.name in self._by_name:
                    raise InputError(
                        f"checkpoint {self.source}: tensor {t.name} is in both {self._by_name[t.name].file} and "
                        f"{t.file}; a checkpoint must hold each tensor once"
                    )
                self._by_name[t.name] = t

    @property
    def tensors(self) -> dict[str, Tensor]:
        return self._by_name

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self._by_name.values())

    @property
    def fetched_bytes(self) -> int:
        return sum(s.fetched_bytes for s in self.shards)

    @property
    def requests(self) -> int:
        return sum(s.requests for s in self.shards)

    def fingerprint(self) -> str:
        """sha256 of every tensor's name, dtype and shape: the same layout gives the same fingerprint anywhere."""
        h = hashlib.sha256()
        for name in sorted(self._by_name):
            t = self._by_name[name]
            h.update(f"{name}\t{t.dtype}\t{','.join(map(str, t.shape))}\n".encode())
        return h.hexdigest()

    def record(self) -> dict[str, Any]:
        """A JSON-ready description of where the headers came from (for manifests and plan files)."""
        return {
            "source": self.source,
            "kind": self.kind,
            "revision": self.revision,
            "commit": self.commit,
            "shards": len(self.shards),
            "tensors": len(self._by_name),
            "total_bytes": self.total_bytes,
            "header_bytes": sum(s.header_bytes for s in self.shards),
            "fetched_bytes": self.fetched_bytes,
            "requests": self.requests,
            "fingerprint": self.fingerprint(),
        }


# ----------------------------------------------------------------------------------------------------------------
# Header parsing


def parse_header(raw: bytes, file: str, file_bytes: int | None = None) -> tuple[dict[str, str], tuple[Tensor, ...]]:
    """Parse the JSON header (without its 8-byte length) of one file; errors name the file and the tensor."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(
            f"{file}: the safetensors header is not valid UTF-8 JSON ({e}); not a safetensors file?") from e
    if not isinstance(obj, dict):
        raise InputError(f"{file}: the safetensors header is a JSON {type(obj).__name__}, not an object")
    metadata = obj.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise InputError(f"{file}: __metadata__ must be an object of strings")
    data_start = 8 + len(raw)
    tensors = []
    spans = []
    for name, entry in obj.items():
        tensors.append(_tensor(name, entry, file, data_start))
        spans.append(tuple(entry["data_offsets"]))
    # safetensors lays tensors out back to back from offset 0; a gap or an overlap means a damaged header.
    end = 0
    for begin, stop in sorted(spans):
        if begin != end:
            raise InputError(f"{file}: tensor data offsets leave a gap or overlap at byte {begin} (expected {end})")
        end = stop
    if file_bytes is not None and data_start + end != file_bytes:
        raise InputError(
            f"{file}: header says the file is {data_start + end} bytes but it is {file_bytes}; truncated or damaged"
        )
    return {str(k): str(v) for k, v in metadata.items()}, tuple(tensors)


def _tensor(name: str, entry: Any, file: str, data_start: int) -> Tensor:
    ok = (
        isinstance(entry, dict)
        and isinstance(entry.get("dtype"), str)
        and isinstance(entry.get("shape"), list)
        and all(isinstance(d, int) and d >= 0 for d in entry["shape"])
        and isinstance(entry.get("data_offsets"), list)
        and len(entry["data_offsets"]) == 2
        and all(isinstance(o, int) for o in entry["data_offsets"])
        and 0 <= entry["data_offsets"][0] <= entry["data_offsets"][1]
    )
    if not ok:
        raise InputError(f"{file}: tensor {name}: header entry needs dtype, shape and data_offsets [begin, end]")
    begin, end = entry["data_offsets"]
    shape = tuple(entry["shape"])
    nbytes = end - begin
    bits = DTYPE_BITS.get(entry["dtype"])
    if bits is not None and nbytes != math.ceil(math.prod(shape) * bits / 8):
        raise InputError(
            f"{file}: tensor {name}: {entry['dtype']} {list(shape)} needs {math.ceil(math.prod(shape) * bits / 8)} "
            f"bytes but data_offsets span {nbytes}"
        )
    return Tensor(name=name, dtype=entry["dtype"], shape=shape, nbytes=nbytes, file=file, offset=data_start + begin)


def _header_length(prefix: bytes, file: str) -> int:
    if len(prefix) < 8:
        raise InputError(f"{file}: shorter than the 8-byte safetensors header length; not a safetensors file")
    (n,) = struct.unpack("<Q", prefix[:8])
    if n == 0 or n > MAX_HEADER_BYTES:
        raise InputError(f"{file}: header length {n} is outside 1..{MAX_HEADER_BYTES}; not a safetensors file")
    return n


# ----------------------------------------------------------------------------------------------------------------
# Local files


def read_local_header(path: Path, name: str | None = None) -> Shard:
    path = Path(path)
    label = name or path.name
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            n = _header_length(f.read(8), str(path))
            raw = f.read(n)
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror or e})") from e
    if len(raw) != n:
        raise InputError(f"{path}: the header is {n} bytes but the file ends after {len(raw)}; truncated")
    metadata, tensors = parse_header(raw, label, size)
    return Shard(file=label, header_bytes=n, file_bytes=size, metadata=metadata, tensors=tensors,
                 fetched_bytes=8 + n, requests=0)


def _read_json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: cannot read it as JSON ({e})") from e


def _index_files(index: Any, where: str) -> tuple[list[str], dict[str, str]]:
    if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
        raise InputError(f"{where}: not a safetensors index (no weight_map object)")
    weight_map = {str(k): str(v) for k, v in index["weight_map"].items()}
    bad = [f for f in set(weight_map.values()) if "/" in f or "\\" in f or f.startswith(".")]
    if bad:
        raise InputError(f"{where}: weight_map names files outside the checkpoint directory: {sorted(bad)[:3]}")
    return sorted(set(weight_map.values())), weight_map


def _check_index(ckpt: Checkpoint, weight_map: Mapping[str, str], where: str) -> None:
    for name, file in weight_map.items():
        t = ckpt.tensors.get(name)
        if t is None:
            raise InputError(f"{where}: tensor {name} is listed for {file} but that shard's header lacks it")
        if t.file != file:
            raise InputError(f"{where}: tensor {name} is listed for {file} but found in {t.file}")
    extra = sorted(set(ckpt.tensors) - set(weight_map))
    if extra:
        raise InputError(f"{where}: shard headers hold tensors the index does not list, e.g. {extra[0]}")


def read_local(path: Path, workers: int = 8) -> Checkpoint:
    path = Path(path)
    t0 = time.monotonic()
    if path.is_file():
        shard = read_local_header(path)
        config = _optional_json(path.parent / CONFIG_NAME)
        return Checkpoint(source=str(path), kind="file", shards=[shard], config=config,
                          seconds=time.monotonic() - t0)
    if not path.is_dir():
        raise InputError(f"checkpoint {path} does not exist (give a directory, a .safetensors file, a URL or "
                         "hf://owner/name@revision)")
    index_path = path / INDEX_NAME
    weight_map: dict[str, str] | None = None
    if index_path.is_file():
        files, weight_map = _index_files(_read_json_file(index_path), str(index_path))
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
        if not files:
            raise InputError(f"checkpoint directory {path} has neither {INDEX_NAME} nor any *.safetensors file")
    missing = [f for f in files if not (path / f).is_file()]
    if missing:
        raise InputError(f"{index_path}: names shard {missing[0]} which is not in {path}")
    with cf.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        shards = list(pool.map(lambda f: read_local_header(path / f, f), files))
    ckpt = Checkpoint(source=str(path), kind="directory", shards=shards, config=_optional_json(path / CONFIG_NAME))
    if weight_map is not None:
        _check_index(ckpt, weight_map, str(index_path))
    ckpt.seconds = time.monotonic() - t0
    return ckpt


def _optional_json(path: Path) -> dict[str, Any] | None:
    return _read_json_file(path) if path.is_file() else None


# ----------------------------------------------------------------------------------------------------------------
# Remote files


@dataclass(frozen=True)
class HFSource:
    repo_id: str
    revision: str
    subfolder: str | None = None

    @property
    def pinned(self) -> bool:
        return bool(re.fullmatch(r"[0-9a-f]{40}", self.revision))


def parse_hf_source(source: str) -> HFSource:
    """``hf://owner/name@revision[/subfolder]`` -> its parts. The revision is required: an audit names what it read."""
    m = re.fullmatch(r"hf://([A-Za-z0-9][\w.-]*/[\w.-]+)(?:@([^/]+))?(?:/(.+))?", source)
    if not m:
        raise InputError(f"{source!r} is not hf://owner/name@revision[/subfolder]")
    repo_id, revision, subfolder = m.groups()
    if not revision:
        raise InputError(
            f"{source}: name a revision, e.g. hf://{repo_id}@<40-hex commit>; a branch name moves, so an audit of "
            "it cannot be reproduced"
        )
    return HFSource(repo_id=repo_id, revision=revision, subfolder=subfolder.strip("/") if subfolder else None)


def hf_file_url(src: HFSource, filename: str, endpoint: str | None = None) -> str:
    from huggingface_hub import hf_hub_url

    return hf_hub_url(src.repo_id, filename, subfolder=src.subfolder, revision=src.revision,
                      endpoint=endpoint or os.environ.get("HF_ENDPOINT") or None)


@dataclass
class RemoteOptions:
    concurrency: int = 16
    retries: int = 4
    backoff_s: float = 0.25
    timeout_s: float = 30.0
    first_read: int = DEFAULT_FIRST_READ
    token_host: str | None = None  # the only host HF_TOKEN is ever sent to


class _Remote:
    """One httpx client shared by the shard threads (httpx.Client is thread-safe)."""

    def __init__(self, opts: RemoteOptions):
        self.opts = opts
        self.client = httpx.Client(
            follow_redirects=True,
            timeout=httpx.Timeout(opts.timeout_s),
            limits=httpx.Limits(max_connections=max(1, opts.concurrency), max_keepalive_connections=opts.concurrency),
            headers={"User-Agent": "offload-lab checkpoint audit (header-only range reads)"},
        )

    def close(self) -> None:
        self.client.close()

    def _headers(self, url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = dict(extra or {})
        token = os.environ.get(HF_TOKEN_ENV)
        # httpx drops Authorization itself when a redirect leaves this host (e.g. to a CDN with signed URLs).
        if token and self.opts.token_host and urlsplit(url).hostname == self.opts.token_host:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _retrying(self, url: str, what: str, fn):  # type: ignore[no-untyped-def]
        last: str = ""
        for attempt in range(self.opts.retries + 1):
            try:
                return fn()
            except _Retryable as e:
                last = str(e)
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {e}"
            if attempt < self.opts.retries:
                time.sleep(self.opts.backoff_s * (2 ** attempt))
        raise FetchError(f"{url}: could not read {what} after {self.opts.retries + 1} attempts (last: {last})")

    def get_json(self, url: str, missing_ok: bool = False) -> tuple[Any, httpx.Headers] | None:
        def once() -> tuple[Any, httpx.Headers] | None:
            r = self.client.get(url, headers=self._headers(url))
            if r.status_code == 404 and missing_ok:
                return None
            _raise_for_status(r, url)
            try:
                return r.json(), r.headers
            except json.JSONDecodeError as e:
                raise InputError(f"{url}: not JSON ({e})") from e

        return self._retrying(url, "the JSON file", once)

    def read_header(self, url: str, file: str) -> tuple[Shard, httpx.Headers]:
        state = {"requests": 0, "received": 0}

        def once() -> tuple[Shard, httpx.Headers]:
            state["requests"] = 0
            state["received"] = 0
            return self._read_header_once(url, file, state)

        return self._retrying(url, "the safetensors header", once)

    def _read_header_once(self, url: str, file: str, state: dict[str, int]) -> tuple[Shard, httpx.Headers]:
        first = max(8, self.opts.first_read)
        buf, total, headers = self._range(url, 0, first - 1, None, state)
        n = _header_length(buf, url)
        need = 8 + n
        if len(buf) < need:
            more, total2, _ = self._range(url, len(buf), need - 1, need, state)
            buf += more
            total = total if total is not None else total2
        if len(buf) < need:
            raise InputError(f"{url}: the file ends inside its {n}-byte header; truncated")
        metadata, tensors = parse_header(buf[8:need], file, total)
        shard = Shard(file=file, header_bytes=n, file_bytes=total, metadata=metadata, tensors=tensors,
                      fetched_bytes=state["received"], requests=state["requests"])
        return shard, headers

    def _range(self, url: str, start: int, end: int, header_end: int | None,
               state: dict[str, int]) -> tuple[bytes, int | None, httpx.Headers]:
        """Bytes [start, end] of url, and the file's total size when the server says it."""
        state["requests"] += 1
        with self.client.stream("GET", url, headers=self._headers(url, {"Range": f"bytes={start}-{end}"})) as r:
            if r.status_code == 200:
                self._abort_full_body(r, url, state, header_end)
            if r.status_code == 416:
                raise InputError(f"{url}: the server says byte {start} is past the end of the file (416)")
            _raise_for_status(r, url)
            if r.status_code != 206:
                raise InputError(f"{url}: expected 206 Partial Content for a range request, got {r.status_code}")
            got_start, total = _content_range(r.headers.get("content-range"), url)
            if got_start != start:
                raise InputError(f"{url}: asked for bytes from {start}, the server sent them from {got_start}")
            chunks = []
            size = 0
            for chunk in r.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                state["received"] += len(chunk)
                if size > end - start + 1:
                    raise InputError(f"{url}: the server sent more than the {end - start + 1} bytes asked for")
            return b"".join(chunks), total, r.headers

    def _abort_full_body(self, r: httpx.Response, url: str, state: dict[str, int], header_end: int | None) -> None:
        # The server ignored Range and is sending the whole file. Read only as far as the header reaches (its length
        # is in the first 8 bytes), then close the connection: nothing past the header is downloaded.
        buf = b""
        need = header_end
        for chunk in r.iter_raw():
            buf += chunk
            state["received"] += len(chunk)
            if need is None and len(buf) >= 8:
                need = 8 + _header_length(buf, url)
            if need is not None and len(buf) >= need:
                break
        length = r.headers.get("content-length")
        size = f"{int(length):,} bytes" if length and length.isdigit() else "the whole file"
        raise RangeNotSupportedError(
            f"{url}: the server ignored the Range header and answered 200 with {size}; the transfer was aborted "
            f"after {state['received']:,} bytes (the header), so no weights were downloaded. Audit through a server "
            "that honours range requests (any CDN, nginx, Hugging Face) or download the shard and audit the local file."
        )


class _Retryable(Exception):
    pass


def _raise_for_status(r: httpx.Response, url: str) -> None:
    if r.status_code in RETRY_STATUSES:
        raise _Retryable(f"HTTP {r.status_code}")
    if r.status_code in (401, 403):
        raise InputError(f"{url}: HTTP {r.status_code}; a gated or private repository needs a token in the "
                         f"{HF_TOKEN_ENV} environment variable (never on the command line)")
    if r.status_code == 404:
        raise InputError(f"{url}: HTTP 404, no such file (check the repository, revision and file name)")
    if r.status_code >= 400:
        raise InputError(f"{url}: HTTP {r.status_code}")


def _content_range(value: str | None, url: str) -> tuple[int, int | None]:
    m = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", value or "")
    if not m:
        raise InputError(f"{url}: a 206 answer without a valid Content-Range header ({value!r})")
    return int(m.group(1)), None if m.group(3) == "*" else int(m.group(3))


def read_remote(source: str, opts: RemoteOptions | None = None, hf_endpoint: str | None = None) -> Checkpoint:
    """Headers of a remote checkpoint (a URL or hf://owner/name@revision); see the module docstring."""
    opts = dataclasses.replace(opts) if opts else RemoteOptions()  # a copy: token_host is set per source below
    t0 = time.monotonic()
    hf = parse_hf_source(source) if source.startswith("hf://") else None
    if hf:
        def url_of(name: str) -> str:
            return hf_file_url(hf, name, hf_endpoint)

        opts.token_host = urlsplit(url_of(CONFIG_NAME)).hostname
        single = index = None
    else:
        if not re.match(r"https?://", source):
            raise InputError(f"{source}: not an http(s) URL")
        base, _, last = source.rstrip("/").rpartition("/")
        single = source if last.endswith(".safetensors") else None
        index = source if last.endswith(".json") else None
        root = base if (single or index) else source.rstrip("/")

        def url_of(name: str) -> str:
            return f"{root}/{name}"

    remote = _Remote(opts)
    try:
        commit: str | None = None
        weight_map: dict[str, str] | None = None
        if single:
            files = [single.rpartition("/")[2]]
        else:
            got = remote.get_json(index or url_of(INDEX_NAME), missing_ok=index is None)
            if got is None:
                files = [SINGLE_NAME]
            else:
                files, weight_map = _index_files(got[0], index or url_of(INDEX_NAME))
                commit = got[1].get("x-repo-commit")
        config_got = remote.get_json(url_of(CONFIG_NAME), missing_ok=True)
        config = config_got[0] if config_got else None
        if config_got and not commit:
            commit = config_got[1].get("x-repo-commit")
        with cf.ThreadPoolExecutor(max_workers=max(1, opts.concurrency)) as pool:
            results = list(pool.map(lambda f: remote.read_header(single or url_of(f), f), files))
    finally:
        remote.close()
    shards = [s for s, _ in results]
    commit = commit or next((h.get("x-repo-commit") for _, h in results if h.get("x-repo-commit")), None)
    ckpt = Checkpoint(source=source, kind="hf" if hf else "url", shards=shards, config=config,
                      revision=hf.revision if hf else None, commit=commit)
    if weight_map is not None:
        _check_index(ckpt, weight_map, index or url_of(INDEX_NAME))
    ckpt.seconds = time.monotonic() - t0
    return ckpt


def read_checkpoint(source: str | Path, opts: RemoteOptions | None = None, hf_endpoint: str | None = None,
                    workers: int = 8) -> Checkpoint:
    """Headers of a checkpoint from a directory, a file, an http(s) URL or hf://owner/name@revision."""
    s = str(source)
    if s.startswith(("http://", "https://", "hf://")):
        return read_remote(s, opts, hf_endpoint)
    return read_local(Path(s), workers=workers)


# ----------------------------------------------------------------------------------------------------------------
# Classification


@dataclass(frozen=True)
class Rule:
    category: str
    pattern: str
    stacked: bool = False  # one tensor holds every expert of the layer along dim 0 (vLLM / vllm-exl3 layout)

    def compiled(self) -> re.Pattern[str]:
        return _compile(self.pattern)


_compile_cache: dict[str, re.Pattern[str]] = {}


def _compile(pattern: str) -> re.Pattern[str]:
    if pattern not in _compile_cache:
        _compile_cache[pattern] = re.compile(pattern)
    return _compile_cache[pattern]


_L = r"(?P<layer>\d+)"
_E = r"(?P<expert>\d+)"
_STACKED = r"(?:w13|w2|w1|w3|gate_up_proj|down_proj|gate_proj|up_proj)(?:_[a-z0-9]+)?(?:\.[a-z0-9_]+)?$"

# Hugging Face names (DeepSeek-V3 in transformers, Qwen2-MoE, Qwen3-MoE, Mixtral): ``model.layers.N.mlp...``.
_HF_COMMON_TAIL = [
    Rule("attention", rf"^model\.layers\.{_L}\.self_attn\."),
    Rule("norm", rf"^model\.layers\.{_L}\.(?:input_layernorm|post_attention_layernorm)\."),
    Rule("embedding", r"^model\.embed_tokens\."),
    Rule("norm", r"^model\.norm\."),
    Rule("lm_head", r"^lm_head\."),
]

RULESETS: dict[str, list[Rule]] = {
    # deepseek-ai/DeepSeek-V3 (and R1, V3.1, V3.2) as published on the Hub, FP8 with weight_scale_inv; V3.2's
    # indexer lives under self_attn and is attention. Layers >= num_hidden_layers are the MTP module (see classify).
    "deepseek_v3": [
        Rule("routed_expert", rf"^model\.layers\.{_L}\.mlp\.experts\.{_E}\."),
        Rule("routed_expert", rf"^model\.layers\.{_L}\.mlp\.experts\.{_STACKED}", stacked=True),
        Rule("shared_expert", rf"^model\.layers\.{_L}\.mlp\.shared_experts\."),
        Rule("router", rf"^model\.layers\.{_L}\.mlp\.gate\.(?:weight|bias|e_score_correction_bias)$"),
        Rule("dense_mlp", rf"^model\.layers\.{_L}\.mlp\.(?:gate_proj|up_proj|down_proj)\."),
        Rule("mtp", rf"^model\.layers\.{_L}\.(?:eh_proj|enorm|hnorm|shared_head)\."),
        *_HF_COMMON_TAIL,
    ],
    # DeepSeek's own reference names (V3 inference code, V4 native): ``layers.N.ffn.experts.E.w1``, ``embed``,
    # ``head``, ``mtp.*``. V4's hash-routed layers keep a ``gate.tid2eid`` table: router.
    "deepseek_v4": [
        Rule("mtp", r"^mtp\."),
        Rule("routed_expert", rf"^layers\.{_L}\.ffn\.experts\.{_E}\."),
        Rule("routed_expert", rf"^layers\.{_L}\.ffn\.experts\.{_STACKED}", stacked=True),
        Rule("shared_expert", rf"^layers\.{_L}\.ffn\.shared_experts\."),
        Rule("router", rf"^layers\.{_L}\.ffn\.gate\.(?:weight|bias|tid2eid|e_score_correction_bias)$"),
        Rule("dense_mlp", rf"^layers\.{_L}\.ffn\.(?:w1|w2|w3)\."),
        Rule("attention", rf"^layers\.{_L}\.attn\."),
        Rule("norm", rf"^layers\.{_L}\.(?:attn_norm|ffn_norm)\."),
        Rule("embedding", r"^embed\."),
        Rule("norm", r"^norm\."),
        Rule("lm_head", r"^head\."),
    ],
    "qwen2_moe": [
        Rule("routed_expert", rf"^model\.layers\.{_L}\.mlp\.experts\.{_E}\."),
        Rule("routed_expert", rf"^model\.layers\.{_L}\.mlp\.experts\.{_STACKED}", stacked=True),
        # Qwen2-MoE's shared expert is singular, with its own sigmoid gate; both run for every token.
        Rule("shared_expert", rf"^model\.layers\.{_L}\.mlp\.shared_expert(?:_gate)?\."),
        Rule("router", rf"^model\.layers\.{_L}\.mlp\.gate\.weight$"),
        Rule("dense_mlp", rf"^model\.layers\.{_L}\.mlp\.(?:gate_proj|up_proj|down_proj)\."),
        *_HF_COMMON_TAIL,
    ],
    "qwen3_moe": [
        Rule("routed_expert", rf"^model\.layers\.{_L}\.mlp\.experts\.{_E}\."),
        Rule("routed_expert", rf"^model\.layers\.{_L}\.mlp\.experts\.{_STACKED}", stacked=True),
        Rule("router", rf"^model\.layers\.{_L}\.mlp\.gate\.weight$"),
        # mlp_only_layers / decoder_sparse_step leave some layers dense.
        Rule("dense_mlp", rf"^model\.layers\.{_L}\.mlp\.(?:gate_proj|up_proj|down_proj)\."),
        *_HF_COMMON_TAIL,
    ],
    "mixtral": [
        Rule("routed_expert", rf"^model\.layers\.{_L}\.block_sparse_moe\.experts\.{_E}\."),
        Rule("router", rf"^model\.layers\.{_L}\.block_sparse_moe\.gate\.weight$"),
        *_HF_COMMON_TAIL,
    ],
}

# config.json model_type / architectures -> rule set.
_ARCH_ALIASES = {
    "deepseek_v3": "deepseek_v3", "deepseek_v32": "deepseek_v3", "deepseek_v2": "deepseek_v3",
    "deepseekv3forcausallm": "deepseek_v3", "deepseekv2forcausallm": "deepseek_v3",
    "deepseek_v4": "deepseek_v4", "deepseekv4forcausallm": "deepseek_v4",
    "qwen2_moe": "qwen2_moe", "qwen2moeforcausallm": "qwen2_moe",
    "qwen3_moe": "qwen3_moe", "qwen3moeforcausallm": "qwen3_moe",
    "mixtral": "mixtral", "mixtralforcausallm": "mixtral",
}


def detect_architecture(config: Mapping[str, Any] | None, names: Iterable[str]) -> str:
    """The rule set for a checkpoint: from config.json when it names a known one, else from the tensor names."""
    names = list(names)
    if config:
        for key in [config.get("model_type"), *(config.get("architectures") or [])]:
            if isinstance(key, str) and key.lower() in _ARCH_ALIASES:
                arch = _ARCH_ALIASES[key.lower()]
                # DeepSeek-V4 on the Hub may keep the native names under a V3-style config.
                if arch == "deepseek_v3" and any(n.startswith("layers.") for n in names[:1000]):
                    return "deepseek_v4"
                return arch
    best, best_hits = "qwen3_moe", -1
    for arch, rules in RULESETS.items():
        pats = [r.compiled() for r in rules if r.category == "routed_expert"]
        hits = sum(1 for n in names if any(p.match(n) for p in pats))
        # Prefer the set that also knows the shared expert spelling, so Qwen2-MoE is not read as Qwen3-MoE.
        hits += sum(1 for n in names if ".mlp.shared_expert." in n) if arch == "qwen2_moe" else 0
        hits += sum(1 for n in names if ".mlp.shared_experts." in n) if arch == "deepseek_v3" else 0
        if hits > best_hits:
            best, best_hits = arch, hits
    return best


@dataclass(frozen=True)
class Classified:
    name: str
    category: str
    nbytes: int
    layer: int | None
    expert: int | None  # None for a stacked tensor (all experts of the layer) or a non-expert
    stacked_experts: int | None
    quant: str | None  # "exl3" for EXL3 components, "fp8-block" for weight_scale_inv, else None
    rule: str | None  # the pattern that matched ("" for the engram rule, None for other)


@dataclass
class Classification:
    architecture: str
    engram_pattern: str
    items: list[Classified]
    num_hidden_layers: int | None

    def by_category(self) -> dict[str, dict[str, int]]:
        out = {c: {"tensors": 0, "bytes": 0} for c in CATEGORIES}
        for it in self.items:
            out[it.category]["tensors"] += 1
            out[it.category]["bytes"] += it.nbytes
        return out

    def other(self) -> list[Classified]:
        return sorted((it for it in self.items if it.category == "other"), key=lambda it: -it.nbytes)

    def expert_bytes(self) -> dict[tuple[int, int], int]:
        """Bytes of each routed (layer, expert); a stacked tensor is split evenly over its first dimension."""
        out: dict[tuple[int, int], int] = {}
        for it in self.items:
            if it.category != "routed_expert" or it.layer is None:
                continue
            if it.expert is not None:
                key = (it.layer, it.expert)
                out[key] = out.get(key, 0) + it.nbytes
            elif it.stacked_experts:
                share, rest = divmod(it.nbytes, it.stacked_experts)
                for e in range(it.stacked_experts):
                    key = (it.layer, e)
                    out[key] = out.get(key, 0) + share + (1 if e < rest else 0)
        return out

    def moe_layers(self) -> list[int]:
        return sorted({layer for layer, _ in self.expert_bytes()})


def classify(ckpt: Checkpoint, architecture: str | None = None, engram_pattern: str = DEFAULT_ENGRAM_PATTERN,
             ) -> Classification:
    """Classify every tensor; see the module docstring. ``architecture`` overrides detection."""
    names = list(ckpt.tensors)
    arch = architecture or detect_architecture(ckpt.config, names)
    if arch not in RULESETS:
        raise InputError(f"unknown architecture {arch!r}; known: {', '.join(sorted(RULESETS))}")
    try:
        engram = re.compile(engram_pattern)
    except re.error as e:
        raise InputError(f"Engram pattern {engram_pattern!r} is not a regular expression: {e}") from e
    rules = [(r, r.compiled()) for r in RULESETS[arch]]
    n_layers = _config_int(ckpt.config, "num_hidden_layers", "n_layers")
    items = [_classify_one(ckpt.tensors[n], rules, engram, n_layers) for n in names]
    return Classification(architecture=arch, engram_pattern=engram_pattern, items=items, num_hidden_layers=n_layers)


def _classify_one(t: Tensor, rules: list[tuple[Rule, re.Pattern[str]]], engram: re.Pattern[str],
                  n_layers: int | None) -> Classified:
    last = t.name.rsplit(".", 1)[-1]
    quant = "exl3" if last in EXL3_COMPONENTS or last.split("_")[-1] in EXL3_COMPONENTS else (
        "fp8-block" if last == "weight_scale_inv" else None)
    if engram.search(t.name):
        return Classified(t.name, "engram", t.nbytes, None, None, None, quant, "")
    for rule, pat in rules:
        m = pat.match(t.name)
        if not m:
            continue
        groups = m.groupdict()
        layer = int(groups["layer"]) if groups.get("layer") is not None else None
        expert = int(groups["expert"]) if groups.get("expert") is not None else None
        category = rule.category
        # DeepSeek-V3 on the Hub stores its MTP module as extra layers after the last decoder layer.
        if layer is not None and n_layers is not None and layer >= n_layers:
            category = "mtp"
        stacked = t.shape[0] if rule.stacked and t.shape else None
        return Classified(t.name, category, t.nbytes, layer, expert, stacked if category == "routed_expert" else None,
                          quant, rule.pattern)
    return Classified(t.name, "other", t.nbytes, None, None, None, quant, None)


def _config_int(config: Mapping[str, Any] | None, *keys: str) -> int | None:
    for cfg in _config_levels(config):
        for k in keys:
            v = cfg.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
    return None


def _config_levels(config: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    # Multimodal and some newer configs nest the language model under text_config.
    if not config:
        return []
    nested = config.get("text_config")
    return [config, nested] if isinstance(nested, Mapping) else [config]


def summary(ckpt: Checkpoint, cls: Classification, other_limit: int = 20) -> dict[str, Any]:
    """A JSON-ready audit of what the checkpoint holds, by category, with the unmatched tensors named."""
    eb = cls.expert_bytes()
    sizes = sorted(eb.values())
    layers = cls.moe_layers()
    other = cls.other()
    return {
        "checkpoint": ckpt.record(),
        "architecture": cls.architecture,
        "engram_pattern": cls.engram_pattern,
        "categories": cls.by_category(),
        "routed_experts": {
            "layers": len(layers),
            "first_layer": layers[0] if layers else None,
            "last_layer": layers[-1] if layers else None,
            "experts": len(eb),
            "experts_per_layer_max": max((sum(1 for (layer, _) in eb if layer == x) for x in layers), default=0),
            "bytes_per_expert_min": sizes[0] if sizes else None,
            "bytes_per_expert_median": sizes[len(sizes) // 2] if sizes else None,
            "bytes_per_expert_max": sizes[-1] if sizes else None,
        },
        "other": {
            "tensors": len(other),
            "bytes": sum(o.nbytes for o in other),
            "largest": [{"name": o.name, "bytes": o.nbytes} for o in other[:other_limit]],
        },
    }


def tensor_table(cls: Classification) -> list[dict[str, Any]]:
    """One row per tensor (name, category, layer, expert, bytes): the audit's raw record."""
    return [asdict(it) for it in cls.items]
