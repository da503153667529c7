"""Helpers for the quality tests: the dataset directory, and a scriptable fake OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parents[1]


def datasets_dir() -> Path:
    """The GSM8K and IFEval files the package ships (a directory of the same layout as one --datasets names)."""
    from offload_lab.quality import data

    path = data.shipped_dir()
    assert (path / "gsm8k" / "test.jsonl").is_file(), f"offload-lab's shipped data files are missing from {path}"
    return path


Handler = Callable[[str, dict[str, Any], dict[str, str]], tuple[int, dict[str, Any]]]


def chat_response(content: str, finish: str = "stop", prompt_tokens: int = 10, reasoning: str | None = None,
                  completion_tokens: int = 5) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion", "model": "fake",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content,
                                                 "reasoning_content": reasoning},
                         "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
            "system_fingerprint": "fp_fake"}


class FakeEndpoint:
    """A threaded HTTP server on 127.0.0.1; ``handler(path, body, headers)`` returns (status, json body)."""

    def __init__(self, handler: Handler):
        self.handler = handler
        self.requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._reply(200, {"data": [{"id": "fake-model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                headers = {k: v for k, v in self.headers.items()}
                outer.requests.append((self.path, body, headers))
                status, out = outer.handler(self.path, body, headers)
                self._reply(status, out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "FakeEndpoint":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def write_quality_run(data_root: Path, campaign: str = "embedded-fixture", run_id: str = "20260101T000000Z-q00001",
                      n: int = 6, reference_right: int = 4, local_right: int = 3, agree: int | None = None) -> Path:
    """A finished ``quality`` run written the way the experiment writes it, from synthetic outcomes (no server).

    Per benchmark, the reference gets the first ``reference_right`` items right and the local side the first
    ``local_right``; each side answers twice with the same outcomes. The answers' token ids agree on the first
    ``agree`` items of each benchmark (default: half) and part at token 2 on the others. The paper's fixture campaigns
    can call this so that the quality section's claims resolve.
    """
    agree = n // 2 if agree is None else agree
    import pandas as pd

    from offload_lab.core import runs
    from offload_lab.experiments.quality import runner as experiment

    # The embedded campaign's comparison (configs/campaigns/embedded.yaml), which the embedded paper's prose describes
    # (a .setup block): the fixture campaigns are of the embedded kind.
    compare = {"reference": "quality_float32", "local": "quality_bfloat16"}
    run = runs.new_run(data_root, campaign, "quality", {"replicates": 2, "resamples": 1000, "compare_runs": compare},
                       run_id=run_id)
    benches = {"gsm8k": [str(i) for i in range(n)], "ifeval": [str(1000 + i) for i in range(n)],
               "humaneval": [f"HumanEval/{i}" for i in range(n)]}
    for role, right in (("reference", reference_right), ("local", local_right)):
        side = run.path / "sides" / role
        side.mkdir(parents=True)
        rows, records = [], []
        for bench, ids in benches.items():
            for rep in (0, 1):
                for k, item_id in enumerate(ids):
                    ok = k < right
                    row = {"side": role, "benchmark": bench, "item_id": item_id, "replicate": rep, "status": "ok",
                           "correct": ok}
                    if bench == "ifeval":
                        row.update(prompt_strict=ok, prompt_loose=ok, inst_total=2, inst_strict=2 * ok,
                                   inst_loose=2 * ok)
                    rows.append(row)
                    tokens = [k, 1, 2 if role == "reference" or k < agree else 99, 3]
                    records.append({"kind": "item", "side": role, "benchmark": bench, "item_id": item_id,
                                    "replicate": rep, "status": "ok", "content": "x",
                                    "response": {"choices": [{"token_ids": tokens}]}})
        runs.atomic_write_text(side / "items.jsonl", "".join(json.dumps(r) + "\n" for r in records))
        pd.DataFrame(rows).to_csv(side / "scores.csv", index=False)
        runs.atomic_write_json(side / "side.json", {"label": role, "model": "fake", "replicates": 2, "valid": True,
                                                    "endpoint": {"url": f"http://{role}", "kind": "vllm"}})
        runs.atomic_write_json(side / "scoring.json", {"scored": True})
    experiment.write_comparison(run.path, run.path / "sides" / "reference", run.path / "sides" / "local", 1000, 0)
    runs.atomic_write_json(run.path / experiment.QUALITY_JSON, {"valid": True, "reference_is_local": False})
    run.finish("ok")
    return run.path
