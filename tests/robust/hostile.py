"""Hostile inputs through the real CLI (issue 24): each case runs `offload-lab` as a program and is classified as

* clear: refused with exit 2 and a message naming the input (every word the case lists);
* right: the command did what it should (exit 0 where the input is fine, or the case's own check);
* confusing: refused, but not with exit 2 or without naming the input;
* internal: exit 70, a traceback, or no answer within the case's time;
* accepted: exit 0 for an input that cannot work (accepted silently);
* leaked: a planted secret in stdout, stderr or any file the command wrote.

Run ``.venvs/lab/bin/python tests/robust/hostile.py [--set main|heldback|all] [--json FILE] [-k WORD]``; it prints
each case's class and the counts by issue class. Nothing here starts a server; cases reach closed ports only.
Not a pytest file: the cheap, batched tests are tests/test_robust_*.py.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
CLI = [str(ROOT / ".venvs/lab/bin/offload-lab")]
SECRET = "hunter2-s3cr3t-XYZ"
CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens, every connection is refused


@dataclass
class Case:
    cls: str                       # issue class: output, numbers, checks, kind, secrets
    name: str
    argv: list[str]
    setup: Callable[[Path], None] | None = None
    expect: str = "refuse"         # refuse | ok
    words: tuple[str, ...] = ()    # what the refusal must name
    banned: tuple[str, ...] = ()   # what the refusal must not say (a wrong reason)
    secret: str | None = None      # must appear nowhere
    timeout: float = 90
    check: Callable[[Path, subprocess.CompletedProcess], bool] | None = None
    held_back: bool = False


CASES: list[Case] = []
MOUNTS: list[Path] = []
SOURCE: str | None = None


def case(*a, **k) -> None:
    CASES.append(Case(*a, **k))


# --- fixtures shared by every case (built once) -------------------------------------------------------------------

SMALL_SPEC = ROOT / "configs/checkpoints/synthetic-dsv41-flash-exl3.yaml"


def build_fixtures(fx: Path) -> None:
    text = SMALL_SPEC.read_text()
    for a, b in [("num_hidden_layers: 40", "num_hidden_layers: 2"), ("num_experts: 384", "num_experts: 32"),
                 ("num_attention_heads: 64", "num_attention_heads: 4"), ("rows: 19200000", "rows: 1000"),
                 ("vocab_size: 129280", "vocab_size: 1000"), ("num_hash_layers: 3", "num_hash_layers: 0"),
                 ("shards: 100", "shards: 2")]:
        text = text.replace(a, b)
    (fx / "small.yaml").write_text(text)
    (fx / "big.yaml").write_text(text.replace("num_experts: 32", "num_experts: 64"))
    run = lambda *a: subprocess.run([*CLI, *a], capture_output=True, text=True, check=True)  # noqa: E731
    run("checkpoint", "synth", str(fx / "small.yaml"), "--out", str(fx / "ck"))
    run("checkpoint", "synth", str(fx / "big.yaml"), "--out", str(fx / "ck64"))
    run("plan", "make", str(fx / "ck"), "--generator", "uniform", "--fraction", "0.25", "--out", str(fx / "plan.json"))
    run("plan", "make", str(fx / "ck64"), "--generator", "uniform", "--fraction", "0.9", "--out",
        str(fx / "plan64.json"))
    (fx / "counts.txt").write_text("hello world\n\nanother text\n")
    ro = fx / "ro"
    ro.mkdir()
    # As root a chmod 555 folder is still writable: a read-only tmpfs is what "read-only" means then.
    if os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "none", str(ro)],
                                            capture_output=True).returncode == 0:
        MOUNTS.append(ro)
    else:
        ro.chmod(0o555)
    (fx / "afile").write_text("x")
    (fx / "fifo").exists() or os.mkfifo(fx / "fifo")
    (fx / "dirlink").symlink_to(ROOT / "configs")


def campaign_text(*edits: tuple[str, str], append: str = "") -> str:
    text = (ROOT / "configs/campaigns/embedded.yaml").read_text()
    for a, b in edits:
        assert a in text, a
        text = text.replace(a, b, 1)
    return text + append


def stack_yaml(**changes: object) -> str:
    import yaml

    spec = yaml.safe_load((ROOT / "configs/stacks/embedded.yaml").read_text())
    for key, value in changes.items():
        *parents, last = key.split(".")
        node = spec
        for p in parents:
            node = node[p]
        node[last] = value
    spec["model"]["path"] = spec["model"]["path"] if "model.path" in changes else str(ROOT / "models/tiny-qwen3-moe")
    spec["python"] = spec["python"] if "python" in changes else str(ROOT / ".venvs/server/bin/python")
    return yaml.safe_dump(spec)


def writes(name: str, text: str | bytes) -> Callable[[Path], None]:
    def setup(t: Path) -> None:
        p = t / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return setup


def make_ro(name: str) -> Callable[[Path], None]:
    def setup(t: Path) -> None:
        (t / name).mkdir()
        (t / name).chmod(0o555)
    return setup


def make_run_dir(t: Path) -> None:
    run = t / "data" / "c" / "e" / "20260101T000000Z-abc"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"experiment": "e", "status": "succeeded"}))


# --- 1. output places ---------------------------------------------------------------------------------------------

PLAN_MAKE = ["plan", "make", "{fx}/ck", "--generator", "uniform", "--fraction", "0.25"]
case("output", "plan make --out in a read-only folder", [*PLAN_MAKE, "--out", "{fx}/ro/p.json"], words=("--out",))
case("output", "plan make --out under /proc", [*PLAN_MAKE, "--out", "/proc/p.json"], words=("--out", "/proc"))
case("output", "plan make --out is a directory", [*PLAN_MAKE, "--out", "{t}"], words=("--out",))
case("output", "plan make --out under a file", [*PLAN_MAKE, "--out", "{fx}/afile/p.json"], words=("--out",))
case("output", "plan export --out read-only", ["plan", "export", "{fx}/plan.json", "--format", "dsv41-host-plan",
                                              "--out", "{fx}/ro/h.json"], words=("--out",))
case("output", "plan export --out /dev/full", ["plan", "export", "{fx}/plan.json", "--format", "dsv41-host-plan",
                                              "--out", "/dev/full", "--force"], words=("--out",))
RUN = ["campaign", "run", str(ROOT / "configs/campaigns/embedded.yaml"), "--url", CLOSED, "--only", "context",
       "--quiet"]
case("output", "campaign run --data-dir read-only", [*RUN, "--data-dir", "{fx}/ro"], words=("--data-dir",))
case("output", "campaign run --data-dir under /proc", [*RUN, "--data-dir", "/proc/x"], words=("--data-dir",))
case("output", "campaign run --data-dir inside a run", [*RUN, "--data-dir", "{t}/data/c/e/20260101T000000Z-abc/d"],
     setup=make_run_dir, words=("--data-dir", "run"))
case("output", "model tiny --out read-only", ["model", "tiny", "--out", "{fx}/ro/m"], words=("--out",))
case("output", "model tiny --out under /proc", ["model", "tiny", "--out", "/proc/m"], words=("--out",))
case("output", "checkpoint synth --out read-only", ["checkpoint", "synth", "{fx}/small.yaml", "--out", "{fx}/ro/c"],
     words=("--out",))
case("output", "checkpoint synth --out a file", ["checkpoint", "synth", "{fx}/small.yaml", "--out", "{fx}/afile"],
     words=("--out",))
BENCH = ["bench", "--url", CLOSED, "--regime", "short", "--streams", "1", "--requests-per-stream", "1"]
case("output", "bench --out read-only", [*BENCH, "--out", "{fx}/ro"], words=("--out",))
case("output", "bench --out a file", [*BENCH, "--out", "{fx}/afile"], words=("--out",))
QUALITY = ["quality", "run", "--endpoint", CLOSED, "--limit", "1"]
case("output", "quality run --data-dir read-only", [*QUALITY, "--data-dir", "{fx}/ro"], words=("--data-dir",))
case("output", "quality run --data-dir under /proc", [*QUALITY, "--data-dir", "/proc/q"], words=("--data-dir",))
PAPER = ["paper", "build", "--campaign", "c", "--data-dir", "{t}/data"]
case("output", "paper build --out inside data/", [*PAPER, "--out", "{t}/data/c/paper"], setup=make_run_dir,
     words=("--out", "data"))
case("output", "paper build --bundle equal to --out", [*PAPER, "--out", "{t}/o", "--bundle", "{t}/o"],
     setup=make_run_dir, words=("--bundle", "--out"))
case("output", "paper build --out read-only", [*PAPER, "--out", "{fx}/ro/o"], setup=make_run_dir, words=("--out",))
case("output", "routing collect --out read-only", ["routing", "collect", "--model", "{fx}/ck", "--out",
                                                  "{fx}/ro/r.json", "--texts", "{fx}/counts.txt"], words=("--out",))

# --- 2. numbers at their limits -----------------------------------------------------------------------------------

AUDIT = ["audit", "{fx}/ck", "--tp", "1"]
case("numbers", "audit --usable-gib 1e308", [*AUDIT, "--usable-gib", "1e308"], words=("--usable-gib",))
case("numbers", "plan make --usable-gib 1e308", ["plan", "make", "{fx}/ck", "--generator", "budget-fit",
                                                "--usable-gib", "1e308", "--out", "{t}/p.json"],
     words=("--usable-gib",))
case("numbers", "memory-math --params 1e308", ["memory-math", "--params", "1e308"], words=("--params",))
case("numbers", "memory-math --params 0.5", ["memory-math", "--params", "0.5"], words=("--params",))
case("numbers", "bench --streams 1e9", ["bench", "--url", CLOSED, "--regime", "short", "--streams", "1000000000",
                                       "--out", "{t}/d"], words=("--streams",), timeout=60)
case("numbers", "quality run --max-tokens 1e12", [*QUALITY, "--max-tokens", "1000000000000", "--data-dir", "{t}/d"],
     words=("--max-tokens",))
case("numbers", "model tiny hidden_size 10000000", ["model", "tiny", "--out", "{t}/m", "--config", "{t}/m.yaml"],
     setup=writes("m.yaml", (ROOT / "configs/models/tiny-qwen3-moe.yaml").read_text().replace(
         "hidden_size: 256", "hidden_size: 10000000", 1)), words=("hidden_size",), timeout=60)
case("numbers", "stack ready_timeout_s 1e308", ["stack", "check", "{t}/s.yaml"],
     setup=lambda t: writes("s.yaml", stack_yaml(**{"server.ready_timeout_s": 1e308}))(t),
     words=("ready_timeout_s",))
case("numbers", "campaign output_tokens 1e26", ["campaign", "check", "{t}/c.yaml"],
     setup=writes("c.yaml", campaign_text(("output_tokens: 64", "output_tokens: 1e26"))), words=("output_tokens",))
case("numbers", "campaign negative max_tokens", ["campaign", "check", "{t}/c.yaml"],
     setup=writes("c.yaml", campaign_text(("max_tokens: {gsm8k: 32,", "max_tokens: {gsm8k: -32,"))),
     words=("max_tokens",))
case("numbers", "campaign repeats: true", ["campaign", "check", "{t}/c.yaml"],
     setup=writes("c.yaml", campaign_text(("repeats: 3", "repeats: true"))), words=("repeats",))


def deep_header(t: Path) -> None:
    depth = 50_000
    header = b'{"x": ' + b"[" * depth + b"]" * depth + b"}"
    (t / "deep.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)


case("numbers", "header nested 50,000 deep", ["audit", "{t}/deep.safetensors", "--usable-gib", "80", "--tp", "1"],
     setup=deep_header, words=("deep.safetensors",))
case("numbers", "plan make --fraction 1e308", [*PLAN_MAKE[:-1], "1e308", "--out", "{t}/p.json"],
     words=("--fraction",))
case("numbers", "audit --tp 1e12", ["audit", "{fx}/ck", "--usable-gib", "80", "--tp", "1000000000000"],
     words=("--tp",))

# --- 3. accepted although it cannot run ---------------------------------------------------------------------------

CHECK = ["campaign", "check", "{t}/c.yaml"]
case("checks", "campaign duplicate key", CHECK, setup=writes("c.yaml", campaign_text(
    ("name: embedded", "name: embedded\nname: other"))), words=("name", "twice"))
case("checks", "campaign duplicate experiments:", CHECK, setup=writes("c.yaml", campaign_text(
    append="experiments:\n  - experiment: context\n    notebook: notebooks/context.ipynb\n")),
     words=("experiments", "twice"))
case("checks", "context above max_model_len", CHECK, setup=writes("c.yaml", campaign_text(
    ("context_lengths: [256, 1024, 2048, 4096]", "context_lengths: [256, 100000]"))),
     words=("context_lengths", "max_model_len"))
case("checks", "tiny_model_dir of another kind", CHECK, setup=writes("c.yaml", campaign_text(
    ("tiny_model_dir: models/tiny-qwen3-moe", "tiny_model_dir: configs"))), words=("tiny_model_dir",))
case("checks", "compare a run with itself", CHECK, setup=writes("c.yaml", campaign_text(
    ("reference: quality_float32, local: quality_bfloat16", "reference: quality_bfloat16, local: quality_bfloat16"))),
     words=("compare_runs",))
case("checks", "compare with a missing experiment", CHECK, setup=writes("c.yaml", campaign_text(
    ("reference: quality_float32,", "reference: quality_nowhere,"))), words=("quality_nowhere",))
STACK = ["stack", "check", "{t}/s.yaml"]
case("checks", "stack python /bin/false", STACK, setup=lambda t: writes("s.yaml", stack_yaml(python="/bin/false"))(t),
     words=("python", "/bin/false"))
case("checks", "stack NUL in env", STACK,
     setup=lambda t: writes("s.yaml", stack_yaml(**{"server.env": {"VLLM_CPU_KVCACHE_SPACE": "2\x00"}}))(t),
     words=("VLLM_CPU_KVCACHE_SPACE",))
case("checks", "stack model path escaping the repo", STACK,
     setup=lambda t: writes("s.yaml", stack_yaml(**{"model.path": "../../../../etc"}))(t), words=("model",))
case("checks", "stack empty served name", STACK,
     setup=lambda t: writes("s.yaml", stack_yaml(**{"model.served_name": ""}))(t), words=("served_name",))
case("checks", "stack module not a module name", STACK,
     setup=lambda t: writes("s.yaml", stack_yaml(**{"server.module": "not a module!"}))(t), words=("module",))
case("checks", "stack module that does not import", STACK,
     setup=lambda t: writes("s.yaml", stack_yaml(**{"server.module": "no_such_module_xyz"}))(t),
     words=("module", "no_such_module_xyz"), timeout=120)
case("checks", "audit of header {}", ["audit", "{t}/e.safetensors", "--usable-gib", "80", "--tp", "1"],
     setup=writes("e.safetensors", (2).to_bytes(8, "little") + b"{}"), words=("e.safetensors",))
case("checks", "--tp 3 on 4 heads", ["audit", "{fx}/ck", "--usable-gib", "80", "--tp", "3"], words=("--tp", "4"))
case("checks", "plan of 64 experts on a 32-expert model", ["plan", "check", "{fx}/plan64.json", "{fx}/ck"],
     words=("plan64.json",), expect="refuse")
case("checks", "profile with wrong source_sha256", ["profile", "{t}/p.yaml", "--stream-tok-s", "40"],
     setup=writes("p.yaml", (ROOT / "configs/profiles/published-week.yaml").read_text().replace(
         "source_sha256: ca4c", "source_sha256: zz4c")), words=("source_sha256",))
case("checks", "--only ',,'", [*RUN[:6], ",,", "--quiet", "--data-dir", "{t}/d"], words=("--only",))

# --- 4. the true reason for a path of the wrong kind --------------------------------------------------------------

case("kind", "stack check of a symlink to a directory", ["stack", "check", "{fx}/dirlink"],
     words=("dirlink", "directory"))
case("kind", "stack check of a FIFO", ["stack", "check", "{fx}/fifo"], words=("fifo",), timeout=20)
case("kind", "stack check of /dev/zero", ["stack", "check", "/dev/zero"], words=("/dev/zero",), timeout=20)
case("kind", "campaign check of a directory", ["campaign", "check", "{fx}/ck"], words=("ck", "directory"))
case("kind", "profile of /dev/zero", ["profile", "/dev/zero", "--stream-tok-s", "40"], words=("/dev/zero",),
     timeout=20)
case("kind", "profile of a directory", ["profile", "{fx}/ck", "--stream-tok-s", "40"], words=("directory",))
case("kind", "plan check of a FIFO", ["plan", "check", "{fx}/fifo", "{fx}/ck"], words=("fifo",), timeout=20)
case("kind", "audit of /dev/zero", ["audit", "/dev/zero", "--usable-gib", "80", "--tp", "1"], words=("/dev/zero",),
     timeout=20)

for _c in CASES:
    if _c.cls == "kind":
        _c.banned = ("does not exist",)

# --- 5. secrets ---------------------------------------------------------------------------------------------------


def no_secret(*_: object) -> bool:
    return True


case("secrets", "stack check GH_PAT", STACK, expect="any", secret=SECRET,
     setup=lambda t: writes("s.yaml", stack_yaml(**{"server.env": {"GH_PAT": SECRET}}))(t))
case("secrets", "stack check --api_key", STACK, expect="any", secret=SECRET,
     setup=lambda t: writes("s.yaml", stack_yaml(**{"server.args": ["--api_key", SECRET]}))(t))
case("secrets", "stack check --password=", STACK, expect="any", secret=SECRET,
     setup=lambda t: writes("s.yaml", stack_yaml(**{"server.args": [f"--password={SECRET}"]}))(t))
case("secrets", "stack check URL credentials in an env value", STACK, expect="any", secret=SECRET,
     setup=lambda t: writes("s.yaml", stack_yaml(**{"server.env": {"HTTPS_PROXY": f"http://u:{SECRET}@proxy:3128"}}))(t))
case("secrets", "stack check credentials in the model path", STACK, expect="any", secret=SECRET,
     setup=lambda t: writes("s.yaml", stack_yaml(**{"model.path": f"https://u:{SECRET}@host/m"}))(t))
case("secrets", "campaign run --url with credentials (closed port)",
     [*RUN[:4], f"http://user:{SECRET}@127.0.0.1:9", *RUN[5:], "--data-dir", "{t}/d"], expect="any", secret=SECRET)
case("secrets", "bench --url with ?api_key= (closed port)",
     ["bench", "--url", f"http://127.0.0.1:9/?api_key={SECRET}", "--regime", "short", "--streams", "1",
      "--requests-per-stream", "1", "--out", "{t}/d"], expect="any", secret=SECRET)


# --- the held-back set: written after the fixes, never used to shape them ------------------------------------------

def _held_back() -> None:
    from hostile_heldback import add_cases  # noqa: PLC0415 (optional module next to this one)

    add_cases(case, globals())


# --- running ------------------------------------------------------------------------------------------------------

def classify(c: Case, t: Path, p: subprocess.CompletedProcess | None, before: set[Path]) -> tuple[str, str]:
    if p is None:
        return "internal", "no answer (timed out)"
    out = (p.stdout or "") + (p.stderr or "")
    if c.secret:
        leaks = [str(f) for f in t.rglob("*") if f.is_file() and not f.is_symlink() and f not in before
                 and c.secret.encode() in _read(f)]
        if c.secret in out or leaks:
            return "leaked", ("in output; " if c.secret in out else "") + ", ".join(leaks[:3])
    if p.returncode == 70 or "Traceback (most recent call last)" in out:
        return "internal", (p.stderr or "").strip().splitlines()[-1][:200] if p.stderr.strip() else "exit 70"
    last = (p.stderr or "").strip().splitlines()
    msg = " | ".join(last[:3])[:300]
    if c.expect == "any":
        return "right", f"exit {p.returncode}: {msg}"
    if c.expect == "ok":
        good = p.returncode == 0 and (c.check is None or c.check(t, p))
        return ("right" if good else "confusing"), f"exit {p.returncode}: {msg}"
    if p.returncode == 0:
        return "accepted", (p.stdout or "").strip().splitlines()[0][:200] if p.stdout.strip() else "exit 0"
    err = (p.stderr or "").lower()
    if p.returncode == 2 and all(w.lower() in err for w in c.words) and not any(b.lower() in err for b in c.banned):
        return "clear", msg
    return "confusing", f"exit {p.returncode}: {msg}"


def _read(f: Path) -> bytes:
    try:
        return f.read_bytes() if f.stat().st_size < 50_000_000 and stat.S_ISREG(f.stat().st_mode) else b""
    except OSError:
        return b""


def run_case(c: Case, fx: Path, base: Path, i: int) -> tuple[str, str, float]:
    t = base / f"case{i:03d}"
    t.mkdir()
    if c.setup:
        c.setup(t)
    before = set(t.rglob("*"))  # the case's own inputs may hold the secret; what the command wrote may not
    argv = [a.replace("{t}", str(t)).replace("{fx}", str(fx)) for a in c.argv]
    env = {**os.environ, "OFFLOAD_LAB_LOG_DIR": str(t / "_logs"), "NO_COLOR": "1"}
    if SOURCE:  # another checkout's library (e.g. HEAD's, for the counts before a change)
        env["PYTHONPATH"] = str(Path(SOURCE) / "src")
    t0 = time.monotonic()
    try:
        p = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=c.timeout, cwd=t, env=env,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        p = None
    return (*classify(c, t, p, before), time.monotonic() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", choices=["main", "heldback", "all"], default="main")
    ap.add_argument("-k", default=None, help="only cases whose name holds this")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--source", default=None, help="run another checkout's library (its src/ on PYTHONPATH)")
    a = ap.parse_args()
    global SOURCE
    SOURCE = a.source
    sys.path.insert(0, str(Path(__file__).parent))
    if a.set != "main":
        _held_back()
    chosen = [c for c in CASES if (a.set == "all" or c.held_back == (a.set == "heldback"))
              and (a.k is None or a.k in c.name)]
    results = []
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        fx = Path(tmp) / "fx"
        fx.mkdir()
        build_fixtures(fx)
        for i, c in enumerate(chosen):
            verdict, detail, secs = run_case(c, fx, Path(tmp), i)
            results.append({"class": c.cls, "case": c.name, "verdict": verdict, "detail": detail,
                            "seconds": round(secs, 1), "held_back": c.held_back})
            print(f"{verdict:9} {c.cls:8} {c.name}: {detail}", flush=True)
        for m in MOUNTS:
            subprocess.run(["umount", str(m)], check=False)
        for p in Path(tmp).rglob("*"):  # read-only folders, so that the temporary tree can be removed
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
    by = defaultdict(Counter)
    for r in results:
        by[r["class"]][r["verdict"]] += 1
    print("\ncounts by class:")
    for cls, cnt in by.items():
        print(f"  {cls:8} " + ", ".join(f"{k} {v}" for k, v in sorted(cnt.items())))
    total = Counter(r["verdict"] for r in results)
    print("  total    " + ", ".join(f"{k} {v}" for k, v in sorted(total.items())))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0 if all(r["verdict"] in ("clear", "right") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
