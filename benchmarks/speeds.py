"""The project's own speeds that users feel, each a ratio of two things timed side by side in one run (issue 38).

A benchmark, not a test: the figures depend on the machine and its load; read the ratios, on a quiet machine.

- ``paper``: `paper build` of the embedded campaign's committed data through Quarto against the pandoc + Typst
  fallback, each in its own copy of the working tree (Quarto from $HOME/.local/quarto/bin when present, else from
  PATH; the row says when there is none);
- ``audit``: the headers of the study's checkpoint (configs/checkpoints/synthetic-dsv41-flash-exl3.yaml, written as a
  header-exact sparse checkpoint) audited over HTTP range requests from the project's range server behind a proxy
  that adds 50 ms to each request, against reading the same files locally: requests made and seconds;
- ``predict``: the one-command answer (`pod predict`) for the study's stack file and for a config.json with a pod
  described on the command line, against the bare start of the command line (`offload-lab --version`): how much of
  the wait is the answer rather than Python starting.

Each pair is timed alternately, ``--repeats`` times after one unrecorded warm-up; the median of each side and their
ratio are printed (``--json``: one JSON document). Run: ``.venvs/lab/bin/python benchmarks/speeds.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
QUARTO_HOME = Path.home() / ".local" / "quarto" / "bin"
STUDY_SPEC = ROOT / "configs" / "checkpoints" / "synthetic-dsv41-flash-exl3.yaml"
STUDY_STACK = ROOT / "configs" / "stacks" / "study-pod.yaml"
QWEN_CONFIG = ROOT / "tests" / "fixtures" / "configs" / "qwen3-30b-a3b.json"  # Qwen/Qwen3-30B-A3B's, verbatim
ADDED_LATENCY_S = 0.050


def side_by_side(a: Callable[[], Any], b: Callable[[], Any], repeats: int) -> tuple[list[float], list[float]]:
    """Seconds of ``a`` and of ``b``, alternated, after one unrecorded run of each (caches warm for both)."""
    ta, tb = [], []
    for i in range(repeats + 1):
        for fn, out in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            fn()
            if i:
                out.append(time.perf_counter() - t0)
    return ta, tb


def row(name: str, a_name: str, ta: list[float], b_name: str, tb: list[float], **extra: Any) -> dict[str, Any]:
    ma, mb = statistics.median(ta), statistics.median(tb)
    return {"benchmark": name, "a": a_name, "a_s": ma, "b": b_name, "b_s": mb, "ratio_a_over_b": ma / mb,
            "repeats": len(ta), **extra}


# --- paper ----------------------------------------------------------------------------------------------------------

def _tree_copy(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in files:
        if rel and (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    # Quarto's hooks run the checkout's own offload-lab (paper/offload-lab): the environments, linked.
    (dest / ".venvs").symlink_to(ROOT / ".venvs", target_is_directory=True)
    return dest


def bench_paper(tmp: Path, repeats: int, campaign: str = "embedded") -> dict[str, Any]:
    from offload_lab.core.errors import OffloadLabError
    from offload_lab.paper import build

    quarto_dir = QUARTO_HOME if (QUARTO_HOME / "quarto").exists() else None
    if quarto_dir is None and shutil.which("quarto") is None:
        return {"benchmark": "paper", "skipped": "no Quarto at $HOME/.local/quarto/bin or on PATH"}
    if quarto_dir is not None:
        os.environ["PATH"] = f"{quarto_dir}{os.pathsep}{os.environ['PATH']}"
    copies = {k: _tree_copy(tmp / f"repo-{k}") for k in ("quarto", "fallback")}

    def make(quarto: bool) -> Callable[[], Any]:
        key = "quarto" if quarto else "fallback"
        return lambda: build.build_paper(campaign, copies[key] / "data", out_dir=tmp / f"out-{key}",
                                         repo_root=copies[key], use_quarto=quarto)

    try:
        tq, tf = side_by_side(make(True), make(False), repeats)
    except OffloadLabError as e:  # a paper that does not build is not timed
        return {"benchmark": "paper", "skipped": f"the {campaign} paper did not build: {str(e).splitlines()[0]}"}
    version = subprocess.run(["quarto", "--version"], capture_output=True, text=True).stdout.strip()
    return row("paper", "quarto", tq, "pandoc+typst", tf, quarto=version, campaign=campaign)


# --- audit ----------------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def latency_proxy(upstream: str, delay_s: float) -> Iterator[str]:
    """A TCP proxy on loopback that holds each chunk the client sends for ``delay_s`` before passing it on: every
    request (and every new connection's first bytes) arrives ``delay_s`` late, as over a far link."""
    host, port = upstream.removeprefix("http://").split(":")
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, Any] = {}

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
        try:
            while data := await reader.read(65536):
                if delay:
                    await asyncio.sleep(delay)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection(host, int(port))
        await asyncio.gather(pipe(cr, uw, delay_s), pipe(ur, cw, 0.0))

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        box["url"] = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        box["server"] = server
        started.set()
        with contextlib.suppress(asyncio.CancelledError):  # closed by the block's end
            async with server:
                await server.serve_forever()

    thread = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield box["url"]
    finally:
        loop.call_soon_threadsafe(box["server"].close)
        thread.join(timeout=5)


def bench_audit(tmp: Path, repeats: int) -> dict[str, Any]:
    from offload_lab.fit import checkpoint, rangeserver, synthetic

    spec = synthetic.load_spec(STUDY_SPEC)
    synthetic.write_checkpoint(spec, tmp / spec.name)
    local = tmp / spec.name
    seen: dict[str, Any] = {}

    def audit(source: str, key: str) -> Callable[[], Any]:
        def run() -> None:
            ckpt = checkpoint.read_checkpoint(source)
            checkpoint.classify(ckpt)
            seen[key] = ckpt
        return run

    with rangeserver.serve_directory_process(tmp) as base, latency_proxy(base, ADDED_LATENCY_S) as far:
        tr, tl = side_by_side(audit(f"{far}/{spec.name}", "http"), audit(str(local), "local"), repeats)
    if seen["http"].fingerprint() != seen["local"].fingerprint():
        raise SystemExit("the checkpoint read differently over HTTP than from its files")
    return row("audit", f"http +{ADDED_LATENCY_S * 1000:.0f} ms", tr, "local", tl, checkpoint=spec.name,
               shards=len(seen["local"].shards), tensors=len(seen["local"].tensors),
               http_requests=seen["http"].requests, http_fetched_bytes=seen["http"].fetched_bytes)


# --- predict --------------------------------------------------------------------------------------------------------

def bench_predict(tmp: Path, repeats: int) -> list[dict[str, Any]]:
    cli = [str(BIN / "offload-lab")]

    def cmd(*args: str) -> Callable[[], None]:
        return lambda: subprocess.run([*cli, *args], cwd=ROOT, check=True, capture_output=True)

    rows = []
    for name, args in (("predict_stack", ["pod", "predict", "--stack", str(STUDY_STACK.relative_to(ROOT)), "--json"]),
                       ("predict_config", ["pod", "predict", "--config", str(QWEN_CONFIG), "--gpu", "h100-sxm",
                                           "--gpus", "1", "--host-ram", "512", "--link", "pcie-gen5-x16",
                                           "--json"])):
        tp, tv = side_by_side(cmd(*args), cmd("--version"), repeats)
        rows.append(row(name, "pod predict", tp, "offload-lab --version", tv, command=" ".join(args)))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each side (after one warm-up)")
    ap.add_argument("--only", default="paper,audit,predict", help="comma-separated: paper, audit, predict")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--campaign", default="embedded", help="the campaign whose paper `paper` builds (default: embedded)")
    args = ap.parse_args(argv)
    wanted = {w.strip() for w in args.only.split(",") if w.strip()}
    unknown = wanted - {"paper", "audit", "predict"}
    if unknown or args.repeats < 1:
        print(f"benchmarks/speeds.py: --only {sorted(unknown)} unknown or --repeats below 1; "
              "use --only paper,audit,predict and --repeats 1 or more", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="offload-lab-speeds-") as tmp:
        for name, fn in (("paper", bench_paper), ("audit", bench_audit), ("predict", bench_predict)):
            if name in wanted:
                (Path(tmp) / name).mkdir()
                out = (bench_paper(Path(tmp) / name, args.repeats, args.campaign) if name == "paper"
                       else fn(Path(tmp) / name, args.repeats))
                rows += out if isinstance(out, list) else [out]
    if args.json:
        print(json.dumps({"machine": {"cpus": os.cpu_count(), "load_1min": os.getloadavg()[0]}, "rows": rows},
                         indent=1))
        return 0
    print(f"cpus {os.cpu_count()}, load average (1 min) {os.getloadavg()[0]:.1f} at the end")
    for r in rows:
        if "skipped" in r:
            print(f"{r['benchmark']:15s} skipped: {r['skipped']}")
            continue
        extra = {k: v for k, v in r.items() if k not in ("benchmark", "a", "a_s", "b", "b_s", "ratio_a_over_b")}
        print(f"{r['benchmark']:15s} {r['a']} {r['a_s']:.2f} s / {r['b']} {r['b_s']:.2f} s = "
              f"{r['ratio_a_over_b']:.2f}x  {json.dumps(extra)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
