"""What every part of the command line shares: JSON printing, the internal-error log, and flag types.

The flag types are argparse ``type=`` callables: a bad value is refused by argparse itself, whose message names the
flag (``argument --port: 99999 is not a port: give 1 to 65535``) and exits 2 before any work starts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from offload_lab.core.bounds import MAX_PRICE, MAX_SECONDS, MAX_STREAMS, MAX_TOKEN_RATE, MAX_TOKENS
from offload_lab.core.paths import DATA_DIR
from offload_lab.core.redact import redact_text

LOG_DIR_ENV = "OFFLOAD_LAB_LOG_DIR"


def print_json(obj: Any) -> None:
    """Print a JSON document for `--json`: indented, with anything JSON does not know written as text."""
    print(json.dumps(obj, indent=2, default=str))


# --- unforeseen errors -------------------------------------------------------------------------------------------

def log_dir() -> Path:
    """Where internal-error logs go: $OFFLOAD_LAB_LOG_DIR, else $XDG_STATE_HOME/offload-lab/logs (never data/,
    whose files are data)."""
    if os.environ.get(LOG_DIR_ENV):
        return Path(os.environ[LOG_DIR_ENV])
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "offload-lab" / "logs"


def internal_error(e: BaseException, args: argparse.Namespace | None = None) -> str:
    """Write the traceback of an unforeseen error to a log file; return the one line to print."""
    names = sorted((k != "command", k) for k in vars(args) if k.endswith("command")) if args else []
    command = "-".join(str(getattr(args, k)) for _, k in names if getattr(args, k))
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    text = redact_text("".join(traceback.format_exception(type(e), e, e.__traceback__)))
    where = "(no log could be written)"
    for folder in (log_dir(), Path(tempfile.gettempdir()) / "offload-lab-logs"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{stamp}-{command or 'offload-lab'}.log"
            path.write_text(f"argv: {redact_text(' '.join(sys.argv))}\n\n{text}", encoding="utf-8")
            where = str(path)
            break
        except OSError:
            continue
    first = redact_text(str(e).splitlines()[0] if str(e) else "")[:300]
    return (f"offload-lab: internal error: {type(e).__name__}: {first} (full traceback in {where}; "
            "please report it)")


# --- flag types --------------------------------------------------------------------------------------------------

def _number(text: str, kind: Callable[[str], Any]) -> Any:
    try:
        return kind(text)
    except ValueError:
        name = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{text!r} is not {name}") from None


def int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """A whole number in [low, high]."""

    def parse(text: str) -> int:
        v = _number(text, int)
        if v < low or (high is not None and v > high):
            span = f"at least {low}" if high is None else f"{low} to {high:,}"
            raise argparse.ArgumentTypeError(f"{v} is out of range: give {span}")
        return v

    parse.__name__ = "whole number"
    return parse


positive_int = int_at_least(1)
nonneg_int = int_at_least(0)
# Bounds of the quantities themselves, so that a typo (1e9 streams, 1e12 tokens) is refused before any work or any
# server is reached: no model reads or writes more than 10M tokens at once, and one client machine cannot hold more
# than tens of thousands of open streams.
token_count = int_at_least(1, MAX_TOKENS)
stream_count = int_at_least(1, MAX_STREAMS)


def port_number(text: str) -> int:
    v = _number(text, int)
    if not 1 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"{v} is not a port: give 1 to 65535 (or leave the flag out for a free one)")
    return v


def finite_float(low: float | None = None, high: float | None = None, *, low_open: bool = False,
                 high_open: bool = False) -> Callable[[str], float]:
    """A finite number in the interval given (closed unless ``low_open``/``high_open``); NaN and inf refused."""

    def parse(text: str) -> float:
        v = _number(text, float)
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        below = low is not None and (v <= low if low_open else v < low)
        above = high is not None and (v >= high if high_open else v > high)
        if below or above:
            raise argparse.ArgumentTypeError(f"{v:g} is out of range: give {_span(low, high, low_open, high_open)}")
        return v

    parse.__name__ = "number"
    return parse


def _span(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"{'more than' if low_open else 'at least'} {low:g}"
    return f"{'less than' if high_open else 'at most'} {high:g}"


positive_float = finite_float(0, low_open=True)
# The bounds of times, rates and prices (core.bounds).
seconds = finite_float(0, MAX_SECONDS, low_open=True)
nonneg_seconds = finite_float(0, MAX_SECONDS)
token_rate = finite_float(0, MAX_TOKEN_RATE, low_open=True)
price = finite_float(0, MAX_PRICE, low_open=True)
nonneg_float = finite_float(0)
probability = finite_float(0, 1, low_open=True)


def http_url(text: str) -> str:
    """An http(s) URL with a host. Credentials in it are allowed (they are redacted wherever recorded). The check is
    core.inputs.check_server_url, the one a notebook's base_url goes through."""
    from offload_lab.core.errors import InputError
    from offload_lab.core.inputs import check_server_url

    try:
        return check_server_url(text, "URL")
    except InputError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("URL ")) from None


def endpoint_url(text: str) -> str:
    """An http(s) URL without credentials: a quality side records its endpoint in many files, so a key travels in
    an environment variable (``--api-key-env``), never in the URL."""
    url = http_url(text)
    if "@" in urlsplit(url).netloc:
        raise argparse.ArgumentTypeError(f"{redact_text(url)!r} holds credentials (user:password@); put the key in "
                                         "an environment variable and pass --api-key-env NAME")
    return url


DATA_DIR_HELP = "root of the data tree (default: %(default)s)"


# --- flags many commands share -----------------------------------------------------------------------------------

def finish_parser(p: argparse.ArgumentParser, func: Callable[[argparse.Namespace], int], *,
                  campaign: str | None = None, data_dir: bool = False, json_help: str | None = "print JSON") -> None:
    """The tail most subcommands share: ``--campaign`` (with its default), ``--data-dir``, ``--json``, and the
    handler. ``campaign`` names the default (None: no flag); ``json_help`` None: no ``--json``."""
    if campaign is not None:
        p.add_argument("--campaign", default=campaign,
                       help=f"campaign the run is filed under (default: {campaign})")
    if data_dir:
        p.add_argument("--data-dir", default=DATA_DIR, help=DATA_DIR_HELP)
    if json_help is not None:
        p.add_argument("--json", action="store_true", help=json_help)
    p.set_defaults(func=func)


def action_group(sub: Any, name: str, help: str, description: str) -> Any:
    """A subcommand with actions (``offload-lab NAME ACTION``); the chosen action lands in ``NAME_command``."""
    parser = sub.add_parser(name, help=help, description=description)
    return parser.add_subparsers(dest=f"{name}_command", metavar="ACTION")
