"""A misbehaving OpenAI-compatible server on loopback, for the hostile-server tests (issue 35).

One threaded ``http.server``; what it does wrong is chosen per instance (``HostileServer(mode)``). With no fault it
behaves: a whitespace tokenizer for ``/tokenize``/``/detokenize`` (so the load generator's exact-length prompts work),
one model in ``/v1/models``, streamed completions of ``max_tokens`` one-word chunks with continuous usage, ``[DONE]``,
and non-streamed chat answers for the quality experiment. The modes:

- ``echo_auth``: every POST answers HTTP 500 quoting the request's ``Authorization`` header (a proxy's error page);
- ``models_no_id`` / ``models_list`` / ``models_other``: ``/v1/models`` without ids, as a bare list, naming another model;
- ``tokenize_3``: ``/tokenize`` counts 3 tokens whatever it is given;
- ``usage_huge`` / ``usage_zero`` / ``cached_above``: usage that contradicts the stream;
- ``no_done``: streams end without ``[DONE]``;
- ``trickle``: a stream that sends a comment every 0.2 s and never a token;
- ``metrics_garbage``: ``/metrics`` answers bytes that are not Prometheus text;
- ``redirect_away``: every request is redirected to another host;
- ``hang_third``: streamed completions after the second send headers and then nothing for minutes (a level that a
  SIGKILL catches with two requests finished and one in flight).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "hostile-model"


class HostileServer:
    def __init__(self, mode: str = "ok"):
        self.mode = mode
        self.vocab: dict[str, int] = {}
        self.words: list[str] = []
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._lock = threading.Lock()
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _json(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict[str, Any]:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b"{}"
                try:
                    return json.loads(raw)
                except ValueError:
                    return {}

            def do_GET(self) -> None:  # noqa: N802
                outer.requests.append(("GET", self.path, dict(self.headers)))
                if outer.mode == "redirect_away":
                    self.send_response(302)
                    self.send_header("Location", "http://127.0.0.2:9" + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path.startswith("/v1/models"):
                    card = {"object": "model"} if outer.mode == "models_no_id" else {"id": MODEL, "object": "model"}
                    if outer.mode == "models_other":
                        card["id"] = "some-other-model"
                    body: Any = [card] if outer.mode == "models_list" else {"object": "list", "data": [card]}
                    self._json(200, body)
                elif self.path.startswith("/metrics"):
                    text = (b"\xff\xfe{model_name=\"tiny\"\n" if outer.mode == "metrics_garbage"
                            else b"vllm:num_requests_running 0\n")
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    self.wfile.write(text)
                else:
                    self._json(404, {"error": "no such path"})

            def do_POST(self) -> None:  # noqa: N802
                body = self._body()
                outer.requests.append(("POST", self.path, dict(self.headers)))
                if outer.mode == "echo_auth":
                    auth = self.headers.get("Authorization", "(none)")
                    self._json(500, {"error": {"message": f"upstream refused header Authorization: {auth} "
                                                          f"(raw {auth})"}})
                    return
                if self.path == "/tokenize":
                    ids = outer.ids(str(body.get("prompt") or json.dumps(body.get("messages"))))
                    if outer.mode == "tokenize_3":
                        ids = [1, 2, 3]
                    self._json(200, {"count": len(ids), "max_model_len": 1 << 16, "tokens": ids})
                elif self.path == "/detokenize":
                    toks = body.get("tokens") or []
                    self._json(200, {"prompt": " ".join(outer.words[i] if i < len(outer.words) else "w"
                                                        for i in toks)})
                elif self.path == "/v1/completions" and body.get("stream"):
                    self._stream(body)
                elif self.path.endswith("/chat/completions"):
                    self._json(200, {"id": "x", "object": "chat.completion", "model": MODEL,
                                     "choices": [{"index": 0, "message": {"role": "assistant", "content": "42"},
                                                  "finish_reason": "stop"}],
                                     "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}})
                else:
                    self._json(404, {"error": "no such path"})

            def _send(self, data: bytes) -> None:
                if outer.mode == "one_read" and data:  # a buffering proxy: the whole stream in one write
                    self.held = getattr(self, "held", b"") + data
                    return
                if outer.mode == "one_read" and getattr(self, "held", b""):
                    data, self.held = self.held, b""
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n")
                    self.wfile.flush()
                    return
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _stream(self, body: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                n = int(body.get("max_tokens") or 4)
                prompt = len(outer.ids(str(body.get("prompt"))))
                try:
                    if outer.mode == "hang_third" and outer.streams_started() > 2:
                        time.sleep(300)
                        return
                    if outer.mode == "trickle":
                        for _ in range(3000):  # 10 minutes of comments at most: the client gives up long before
                            self._send(b": still thinking\n\n")
                            time.sleep(0.2)
                        return
                    for i in range(n):
                        done = i + 1
                        usage = {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done,
                                 "prompt_tokens_details": {"cached_tokens": 0}}
                        if outer.mode == "cached_above":
                            usage["prompt_tokens_details"]["cached_tokens"] = prompt + 100
                        if outer.mode == "prompt_huge":
                            usage["prompt_tokens"] = prompt * 1000
                        finish = "length" if done == n else ("stop" if outer.mode == "finish_early" and i == 0
                                                              else None)
                        chunk = {"id": "c", "object": "text_completion", "model": MODEL,
                                 "choices": [{"index": 0, "text": f" w{i}", "finish_reason": finish}],
                                 "usage": usage}
                        self._send(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    final = {"prompt_tokens": prompt * (1000 if outer.mode == "prompt_huge" else 1),
                             "completion_tokens": n, "total_tokens": prompt + n}
                    if outer.mode == "usage_huge":
                        final["completion_tokens"] = 10 ** 9
                    elif outer.mode == "usage_zero":
                        final["completion_tokens"] = 0
                    self._send(b"data: " + json.dumps({"id": "c", "choices": [], "usage": final}).encode() + b"\n\n")
                    if outer.mode != "no_done":
                        self._send(b"data: [DONE]\n\n")
                    self._send(b"")
                except (BrokenPipeError, ConnectionResetError):
                    return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def streams_started(self) -> int:
        return sum(1 for m, p, _ in list(self.requests) if m == "POST" and p == "/v1/completions")

    def ids(self, text: str) -> list[int]:
        out = []
        with self._lock:
            for word in text.split():
                if word not in self.vocab:
                    self.vocab[word] = len(self.words)
                    self.words.append(word)
                out.append(self.vocab[word])
        return out

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def url_with(self, user: str, password: str) -> str:
        return f"http://{user}:{password}@127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "HostileServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()
