"""The held-back set of issue 24: cases written after the fixes, never used to shape them (run with
`hostile.py --set heldback`). Same classes and verdicts as hostile.py."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Callable


def add_cases(case: Callable[..., None], g: dict[str, Any]) -> None:
    ROOT, SECRET, CLOSED = g["ROOT"], g["SECRET"], g["CLOSED"]
    writes, stack_yaml, campaign_text, make_run_dir = g["writes"], g["stack_yaml"], g["campaign_text"], g["make_run_dir"]
    hb = {"held_back": True}

    # output places
    case("output", "HB checkpoint synth --out inside a run", ["checkpoint", "synth", "{fx}/small.yaml", "--out",
         "{t}/data/c/e/20260101T000000Z-abc/ck"], setup=make_run_dir, words=("--out", "run directory"), **hb)
    case("output", "HB model tiny --out is a FIFO", ["model", "tiny", "--out", "{fx}/fifo"],
         words=("--out", "named pipe"), timeout=30, **hb)
    case("output", "HB bench --out empty", ["bench", "--url", CLOSED, "--regime", "short", "--out", ""],
         words=("--out",), **hb)
    case("output", "HB paper build --bundle inside data", ["paper", "build", "--campaign", "c", "--data-dir",
         "{t}/data", "--bundle", "{t}/data/b"], setup=make_run_dir, words=("--bundle", "data"), **hb)
    case("output", "HB routing collect --out a directory", ["routing", "collect", "--model", "{fx}/ck", "--out",
         "{t}"], words=("--out", "directory"), **hb)
    case("output", "HB plan make --out under /sys", ["plan", "make", "{fx}/ck", "--generator", "uniform",
         "--fraction", "0.1", "--out", "/sys/p.json"], words=("--out", "/sys"), **hb)

    # numbers
    case("numbers", "HB audit --reserve-gib 1e308", ["audit", "{fx}/ck", "--tp", "1", "--usable-gib", "80",
         "--reserve-gib", "1e308"], words=("--reserve-gib",), **hb)
    case("numbers", "HB memory-math --params 5e15", ["memory-math", "--params", "5e15"], words=("--params",), **hb)
    case("numbers", "HB quality --exec-timeout inf", ["quality", "run", "--endpoint", CLOSED, "--exec-timeout", "inf"],
         words=("--exec-timeout",), **hb)
    case("numbers", "HB bench --think-time 1e308", ["bench", "--url", CLOSED, "--regime", "agent_turns",
         "--think-time", "1e308", "--out", "{t}/d"], words=("--think-time",), timeout=60, **hb)
    case("numbers", "HB plan make --hbm-gbps 1e308", ["plan", "make", "{fx}/ck", "--generator", "uniform",
         "--fraction", "0.1", "--hbm-gbps", "1e308", "--out", "{t}/p.json"], words=("--hbm-gbps",), **hb)
    case("numbers", "HB stack probe.max_tokens 1e12", ["stack", "check", "{t}/s.yaml"],
         setup=lambda t: writes("s.yaml", stack_yaml(**{"server.probe": {"max_tokens": 10**12}}))(t),
         words=("max_tokens",), **hb)
    case("numbers", "HB campaign agent turns 1e9", ["campaign", "check", "{t}/c.yaml"],
         setup=writes("c.yaml", campaign_text(("turns: 3", "turns: 1000000000"))), words=("agent_turns",), **hb)

    # checks
    case("checks", "HB duplicate key inside parameters", ["campaign", "check", "{t}/c.yaml"],
         setup=writes("c.yaml", campaign_text(("      repeats: 3\n", "      repeats: 3\n      repeats: 4\n"))),
         words=("repeats", "twice"), **hb)
    case("checks", "HB stack served name with a space", ["stack", "check", "{t}/s.yaml"],
         setup=lambda t: writes("s.yaml", stack_yaml(**{"model.served_name": "a b"}))(t), words=("served_name",), **hb)
    case("checks", "HB stack python is a text file", ["stack", "check", "{t}/s.yaml"],
         setup=lambda t: writes("s.yaml", stack_yaml(python="/etc/hostname"))(t), words=("python",), **hb)
    case("checks", "HB regime prefix over max_model_len", ["campaign", "check", "{t}/c.yaml"],
         setup=writes("c.yaml", campaign_text(("prefix_tokens: 2048, suffix_tokens: 32, output_tokens: 48}",
                                               "prefix_tokens: 20480, suffix_tokens: 32, output_tokens: 48}"))),
         words=("concurrency", "max_model_len"), **hb)
    case("checks", "HB output_tokens as a string", ["campaign", "check", "{t}/c.yaml"],
         setup=writes("c.yaml", campaign_text(("output_tokens: 64", 'output_tokens: "64"'))),
         words=("output_tokens",), **hb)

    # the kind of a path
    def broken(t: Path) -> None:
        (t / "broken.yaml").symlink_to(t / "nowhere")

    def sock(t: Path) -> None:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(t / "sock"))
        s.close()

    case("kind", "HB stack check of a broken symlink", ["stack", "check", "{t}/broken.yaml"], setup=broken,
         words=("broken symbolic link",), **hb)
    case("kind", "HB campaign check of /dev/null", ["campaign", "check", "/dev/null"], words=("/dev/null",), **hb)
    case("kind", "HB profile of a socket", ["profile", "{t}/sock", "--stream-tok-s", "40"], setup=sock,
         words=("socket",), **hb)
    case("kind", "HB plan check against a FIFO checkpoint", ["plan", "check", "{fx}/plan.json", "{fx}/fifo"],
         words=("fifo",), timeout=30, **hb)

    # secrets
    case("secrets", "HB stack --hf_token in args", ["stack", "check", "{t}/s.yaml"], expect="any", secret=SECRET,
         setup=lambda t: writes("s.yaml", stack_yaml(**{"server.args": ["--hf_token", SECRET]}))(t), **hb)
    case("secrets", "HB stack DB_PASSWORD in env", ["stack", "check", "{t}/s.yaml"], expect="any", secret=SECRET,
         setup=lambda t: writes("s.yaml", stack_yaml(**{"server.env": {"DB_PASSWORD": SECRET}}))(t), **hb)
    case("secrets", "HB quality endpoint with credentials", ["quality", "run", "--endpoint",
         f"http://u:{SECRET}@127.0.0.1:9", "--data-dir", "{t}/d"], expect="any", secret=SECRET, **hb)
    case("secrets", "HB campaign --url with ?token=", ["campaign", "run", str(ROOT / "configs/campaigns/embedded.yaml"),
         "--url", f"http://127.0.0.1:9/?token={SECRET}", "--data-dir", "{t}/d"], expect="any", secret=SECRET, **hb)
    case("secrets", "HB stack model path s3:// credentials", ["stack", "check", "{t}/s.yaml"], expect="any",
         secret=SECRET, setup=lambda t: writes("s.yaml", stack_yaml(**{"model.path": f"s3://AKIA:{SECRET}@b/m"}))(t),
         **hb)
