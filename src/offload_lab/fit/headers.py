"""The safetensors format as the audit reads it: header records, header parsing, and the shard index.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON (each tensor's dtype, shape and
``data_offsets`` into the data that follows), then the data. Everything the memory model needs is in the header, so a
checkpoint of hundreds of GiB is audited by reading a few hundred KiB. Where the bytes come from (local files, range
requests) is :mod:`offload_lab.fit.checkpoint` and :mod:`offload_lab.fit.remote`; what each tensor is, is
:mod:`offload_lab.fit.classify`. (Not named ``safetensors.py``: ``hf_routing_script.py`` runs with this folder first
on ``sys.path`` and would import it in place of the safetensors package.)
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from dataclasses import dataclass, field
from typing import Any, Mapping

from offload_lab.core import inputs
from offload_lab.core.errors import InputError

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
# safetensors itself refuses headers above 100 MB; a larger length is a damaged file or not a safetensors file.
MAX_HEADER_BYTES = 100_000_000

# Bits per element of every safetensors dtype (sub-byte ones from safetensors >= 0.6). Bytes always come from
# data_offsets; this table only checks that offsets and shape agree.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


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


HEADER_MAX_DEPTH = 3


def parse_header(raw: bytes, file: str, file_bytes: int | None = None) -> tuple[dict[str, str], tuple[Tensor, ...]]:
    """Parse the JSON header (without its 8-byte length) of one file; errors name the file and the tensor."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(
            f"{file}: the safetensors header is not valid UTF-8 JSON ({e}); not a safetensors file?") from e
    # An object of tensors, each an object holding two lists: three levels; __metadata__ is flat. Checked before
    # parsing, so a header of 50,000 open brackets is refused without recursing.
    if not inputs.json_depth_at_most(text, HEADER_MAX_DEPTH):
        raise InputError(f"{file}: the safetensors header nests more than {HEADER_MAX_DEPTH} levels deep, which no "
                         "safetensors header does; not a safetensors file?")
    try:
        obj = json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as e:
        raise InputError(
            f"{file}: the safetensors header is not valid UTF-8 JSON ({e}); not a safetensors file?") from e
    except _DuplicateKey as e:
        # json keeps the last of two equal keys: one tensor would hide another's bytes from the audit.
        raise InputError(f"{file}: the safetensors header names {str(e)[:80]!r} twice; a header names each tensor "
                         "once (a damaged or crafted file)") from None
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


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


# A dimension or offset is a non-negative integer below 2**63 (safetensors' own u64 less the sign): JSON's true is
# an int to Python, and a 30-digit number would overflow every size computed from it.
_MAX_INT = 2 ** 63 - 1
MAX_RANK = 16


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _MAX_INT


def _tensor(name: str, entry: Any, file: str, data_start: int) -> Tensor:
    ok = (
        isinstance(entry, dict)
        and isinstance(entry.get("dtype"), str)
        and isinstance(entry.get("shape"), list)
        and len(entry["shape"]) <= MAX_RANK
        and all(_count(d) for d in entry["shape"])
        and isinstance(entry.get("data_offsets"), list)
        and len(entry["data_offsets"]) == 2
        and all(_count(o) for o in entry["data_offsets"])
        and entry["data_offsets"][0] <= entry["data_offsets"][1]
    )
    if not ok:
        raise InputError(f"{file}: tensor {name[:120]}: header entry needs dtype, shape (up to {MAX_RANK} "
                         "non-negative integers, not true/false) and data_offsets [begin, end] (integers)")
    begin, end = entry["data_offsets"]
    shape = tuple(entry["shape"])
    nbytes = end - begin
    bits = DTYPE_BITS.get(entry["dtype"])
    if bits is None:
        raise InputError(f"{file}: tensor {name}: dtype {entry['dtype'][:20]!r} is not a safetensors dtype (known: "
                         f"{', '.join(DTYPE_BITS)}); a damaged header, or a newer format than this reader knows")
    if nbytes != math.ceil(math.prod(shape) * bits / 8):
        raise InputError(
            f"{file}: tensor {name}: {entry['dtype']} {list(shape)} needs {math.ceil(math.prod(shape) * bits / 8)} "
            f"bytes but data_offsets span {nbytes}"
        )
    return Tensor(name=name, dtype=entry["dtype"], shape=shape, nbytes=nbytes, file=file, offset=data_start + begin)


def header_length(prefix: bytes, file: str) -> int:
    if len(prefix) < 8:
        raise InputError(f"{file}: shorter than the 8-byte safetensors header length; not a safetensors file")
    (n,) = struct.unpack("<Q", prefix[:8])
    if n == 0 or n > MAX_HEADER_BYTES:
        raise InputError(f"{file}: header length {n} is outside 1..{MAX_HEADER_BYTES}; not a safetensors file")
    return n



def index_files(index: Any, where: str) -> tuple[list[str], dict[str, str]]:
    if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
        raise InputError(f"{where}: not a safetensors index (no weight_map object)")
    weight_map = {str(k): str(v) for k, v in index["weight_map"].items()}
    bad = [f for f in set(weight_map.values()) if "/" in f or "\\" in f or f.startswith(".")]
    if bad:
        raise InputError(f"{where}: weight_map names files outside the checkpoint directory: {sorted(bad)[:3]}")
    return sorted(set(weight_map.values())), weight_map


def check_index(ckpt: Checkpoint, weight_map: Mapping[str, str], where: str) -> None:
    for name, file in weight_map.items():
        t = ckpt.tensors.get(name)
        if t is None:
            raise InputError(f"{where}: tensor {name} is listed for {file} but that shard's header lacks it")
        if t.file != file:
            raise InputError(f"{where}: tensor {name} is listed for {file} but found in {t.file}")
    extra = sorted(set(ckpt.tensors) - set(weight_map))
    if extra:
        raise InputError(f"{where}: shard headers hold tensors the index does not list, e.g. {extra[0]}")

