"""What every part of the command line shares: JSON printing, the internal-error log, action groups, and the few
flag types no model gives (a port, a server URL): argparse ``type=`` callables, so that argparse refuses a bad value
naming the flag (``argument --port: '99999' is not a port: give 1 to 65535``) and exits 2 before any work starts."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from offload_lab.core.outcome import Outcome
from offload_lab.core.redact import redact_text

LOG_DIR_ENV = "OFFLOAD_LAB_LOG_DIR"


def print_json(obj: Any) -> None:
    """Print a JSON document for `--json`: indented, with anything JSON does not know written as text."""
    print(json.dumps(obj, indent=2, default=str))


def show(args: argparse.Namespace, out: Outcome) -> int:
    """Print a library call's result: its payload as JSON with ``--json``, else its lines; return its exit status."""
    if getattr(args, "json", False):
        print_json(out.payload)
    elif out.lines:
        print("\n".join(out.lines))
    return out.code


def calling(func: str, lines: str | None = None, code: Callable[[Any], int] | None = None
            ) -> Callable[[Any, argparse.Namespace], int]:
    """A command's handler when it only forwards: call ``func`` ("module:function", imported when the command runs,
    so that --help stays quick) with the model built from the flags and show what it returns: an Outcome as it is;
    another result as its JSON, or the lines ``lines(result)`` gives, exit ``code(result)``."""

    def handler(p: Any, args: argparse.Namespace) -> int:
        r = _resolve(func)(p)
        if not isinstance(r, Outcome):
            r = Outcome(r, _resolve(lines)(r) if lines else [], code(r) if code else 0)
        return show(args, r)

    return handler


def _resolve(name: str) -> Callable[..., Any]:
    import importlib

    module, _, attr = name.partition(":")
    return getattr(importlib.import_module(module), attr)


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


# --- flag types (the rest come from the models, cli/model_options.py) -----------------------------------------------

def port_number(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"{v} is not a port: give 1 to 65535 (or leave the flag out for a free one)")
    return v


def http_url(text: str) -> str:
    """An http(s) URL with a host. Credentials in it are allowed (they are redacted wherever recorded). The check is
    core.inputs.check_server_url, the one a notebook's url goes through."""
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


def action_group(sub: Any, name: str, help: str, description: str) -> Any:
    """A subcommand with actions (``offload-lab NAME ACTION``); the chosen action lands in ``NAME_command``."""
    parser = sub.add_parser(name, help=help, description=description)
    return parser.add_subparsers(dest=f"{name}_command", metavar="ACTION")
