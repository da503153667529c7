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

The reading is split along its seams: the format (records, header parsing, index) is
:mod:`offload_lab.fit.headers`, remote reads :mod:`offload_lab.fit.remote`, classification
:mod:`offload_lab.fit.classify`; this module reads local files, dispatches by source, and re-exports the public
names so that ``checkpoint.read_checkpoint``, ``checkpoint.classify`` and the rest keep one import.

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
import os
import time
from pathlib import Path
from typing import Any

from offload_lab.core import inputs
from offload_lab.core.errors import InputError
from offload_lab.core.places import require_file, special_root
from offload_lab.fit.classify import (CATEGORIES, DEFAULT_ENGRAM_PATTERN, EXL3_COMPONENTS, RULESETS, Classification,
                                      Classified, Rule, classify, config_int, config_levels, detect_architecture,
                                      summary, tensor_table)
from offload_lab.fit.remote import (DEFAULT_FIRST_READ, HF_TOKEN_ENV, RETRY_STATUSES, FetchError, HFSource,
                                    RangeNotSupportedError, RemoteOptions, hf_file_url, parse_hf_source, read_remote)
from offload_lab.fit.headers import (CONFIG_NAME, DTYPE_BITS, INDEX_NAME, MAX_HEADER_BYTES, SINGLE_NAME,
                                         Checkpoint, Shard, Tensor, header_length, index_files, check_index,
                                         parse_header)

# ----------------------------------------------------------------------------------------------------------------
# Local files


def read_local_header(path: Path, name: str | None = None) -> Shard:
    path = Path(path)
    label = name or path.name
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            n = header_length(f.read(8), str(path))
            raw = f.read(n)
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror or e})") from e
    if len(raw) != n:
        raise InputError(f"{path}: the header is {n} bytes but the file ends after {len(raw)}; truncated")
    metadata, tensors = parse_header(raw, label, size)
    return Shard(file=label, header_bytes=n, file_bytes=size, metadata=metadata, tensors=tensors,
                 fetched_bytes=8 + n, requests=0)


def _read_json_file(path: Path, what: str = "checkpoint file") -> Any:
    return inputs.read_json(path, what, expect=dict)


def read_local(path: Path, workers: int = 8) -> Checkpoint:
    path = Path(path)
    t0 = time.monotonic()
    if path.is_file() and special_root(path) is None:
        shard = read_local_header(path)
        config = _optional_json(path.parent / CONFIG_NAME)
        return Checkpoint(source=str(path), kind="file", shards=[shard], config=config,
                          seconds=time.monotonic() - t0)
    if not path.is_dir():
        # Missing, or a FIFO, a device, a broken link: named for what it is (and never opened).
        require_file(path, "checkpoint", "give a directory, a .safetensors file, a URL or hf://owner/name@revision")
    index_path = path / INDEX_NAME
    weight_map: dict[str, str] | None = None
    if index_path.is_file():
        files, weight_map = index_files(_read_json_file(index_path), str(index_path))
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
        check_index(ckpt, weight_map, str(index_path))
    ckpt.seconds = time.monotonic() - t0
    return ckpt


def _optional_json(path: Path) -> dict[str, Any] | None:
    return _read_json_file(path) if path.is_file() else None


def read_checkpoint(source: str | Path, opts: RemoteOptions | None = None, hf_endpoint: str | None = None,
                    workers: int = 8) -> Checkpoint:
    """Headers of a checkpoint from a directory, a file, an http(s) URL or hf://owner/name@revision."""
    s = str(source)
    scheme = s.partition("://")[0] if "://" in s else None
    if scheme is not None and scheme not in ("http", "https", "hf"):
        raise InputError(f"checkpoint {s}: {scheme}:// is not a source this reader knows; give a directory, a "
                         ".safetensors file, an http(s) URL or hf://owner/name@revision")
    if s.startswith(("http://", "https://", "hf://")):
        return read_remote(s, opts, hf_endpoint)
    return read_local(Path(s), workers=workers)



__all__ = [
    "CATEGORIES", "CONFIG_NAME", "DEFAULT_ENGRAM_PATTERN", "DEFAULT_FIRST_READ", "DTYPE_BITS", "EXL3_COMPONENTS",
    "HF_TOKEN_ENV", "INDEX_NAME", "MAX_HEADER_BYTES", "RETRY_STATUSES", "RULESETS", "SINGLE_NAME", "Checkpoint",
    "Classification", "Classified", "FetchError", "HFSource", "RangeNotSupportedError", "RemoteOptions", "Rule",
    "Shard", "Tensor", "check_index", "classify", "config_int", "config_levels", "detect_architecture",
    "hf_file_url", "parse_header", "parse_hf_source", "read_checkpoint", "read_local", "read_local_header",
    "read_remote", "summary", "tensor_table", "header_length", "index_files",
]
