"""Hostile servers and damaged files, round four (issue 35): one case per class, through the real CLI.

Each case runs `offload-lab` as a program against a misbehaving server on loopback (tests/robust/hostile_server.py)
or a damaged file, with a time bound, and asserts the exit code and that the message names the input. Classes:
secrets a server echoes; answers of the wrong shape; deadlines (a stream that trickles comments, a range server that
trickles bytes); lies (usage against the stream); crashes and disks (torn logs, a user's folder, a sealed run,
symlinks in a run, a full disk); and the users' own inputs (long names, a bad date, a tensor named twice).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "robust"))
from hostile_server import MODEL, HostileServer, basic  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SECRET = "hunter2-s3cr3t-XYZ"
KEY = "sk-live-0123456789abcdefghijKLMN"


def cli(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    """One offload-lab command as a user runs it, bounded in time (a hang fails the test, it never blocks it)."""
    return subprocess.run([sys.executable, "-c", "import sys; from offload_lab.cli.main import main; sys.exit(main())",
                           *args], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**os.environ, "OFFLOAD_LAB_LOG_DIR": str(cwd / "_logs"), **(env or {})})


def files_holding(folder: Path, *needles: str) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
            and any(n.encode() in p.read_bytes() for n in needles)]


def bench(url: str, out: Path, *more: str) -> list[str]:
    return ["bench", "--url", url, "--regime", "short", "--streams", "1", "--requests-per-stream", "2",
            "--prompt-tokens", "16", "--output-tokens", "4", "--workers", "1", "--out", str(out), *more]


def request_events(out: Path) -> list[dict]:
    events = []
    for p in out.rglob("events.jsonl"):
        events += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return [e for e in events if e.get("kind") == "request"]


# --- secrets ----------------------------------------------------------------------------------------------------


_QUALITY_DRIVER = r"""
import sys
from offload_lab.core import runs
from offload_lab.experiments.quality import runner as q
from offload_lab.core.errors import OffloadLabError
url, data, model, key_env = sys.argv[1:5]
run = runs.new_run(data, "c", "quality", {}, server={"url": url})
params = q.QualityParams(benchmarks=["gsm8k"], limit=1, replicates=1, side="local", on_canary_failure="continue",
                         local={"model": model, "api_key_env": key_env or None, "retries": 0, "backoff_s": 0})
try:
    q.run_experiment(run, url, params, log=print)
    run.finish("ok")
except OffloadLabError as e:
    run.finish("failed", error=str(e))
    print("error:", e, file=sys.stderr)
"""


@pytest.mark.parametrize("where", ["url", "key"])
def test_secrets_a_server_echoes_never_reach_a_file_or_a_message(tmp_path, where):
    """The quality experiment as a campaign runs it, with a URL holding a password and an API key from the
    environment; the server quotes the Authorization header (the key, or the Basic form of the URL's user:password)
    in every error. Neither the secrets nor their Basic/Bearer forms are in any file of the run (quality.json,
    side.json, canaries.json, items.jsonl, the manifest) or in what was printed."""
    with HostileServer("echo_auth") as srv:
        url = srv.url_with("u", SECRET) if where == "url" else srv.url
        r = subprocess.run([sys.executable, "-c", _QUALITY_DRIVER, url, str(tmp_path / "data"), MODEL,
                            "" if where == "url" else "H35_TEST_KEY"],
                           capture_output=True, text=True, timeout=240, cwd=tmp_path,
                           env={**os.environ, "H35_TEST_KEY": KEY})
        sent = [h.get("Authorization", "") for _, _, h in srv.requests]
    # The secret did reach the server (else this test proves nothing), and came back in its error texts.
    assert sent and all((basic("u", SECRET) if where == "url" else KEY) in a for a in sent), sent
    needles = (SECRET, KEY, basic("u", SECRET), base64.b64encode(f":{KEY}".encode()).decode())
    written = list((tmp_path / "data").rglob("*"))
    assert {"quality.json", "side.json", "canaries.json", "items.jsonl"} <= {p.name for p in written}, written
    assert files_holding(tmp_path, *needles) == [], r.stderr[-800:]
    assert not any(n in r.stdout + r.stderr for n in needles)


def test_a_key_from_the_environment_wins_over_credentials_in_the_url(tmp_path):
    """--api-key-env and http://u:p@host together: the key is what the server receives (a Bearer token), the URL's
    user:password is not sent, and neither is stored."""
    with HostileServer("ok") as srv:
        r = subprocess.run([sys.executable, "-c", _QUALITY_DRIVER, srv.url_with("u", SECRET), str(tmp_path / "data"),
                            MODEL, "H35_TEST_KEY"], capture_output=True, text=True, timeout=240, cwd=tmp_path,
                           env={**os.environ, "H35_TEST_KEY": KEY})
        sent = [h.get("Authorization", "") for m, _, h in srv.requests if m == "POST"]
    assert sent and all(a == f"Bearer {KEY}" for a in sent), (sent, r.stderr[-600:])
    assert files_holding(tmp_path, SECRET, KEY, basic("u", SECRET)) == []


def test_a_key_given_where_a_variable_name_belongs_is_named_never_printed(tmp_path):
    r = cli(["quality", "run", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--api-key-env", KEY,
             "--data-dir", str(tmp_path / "data")], tmp_path)
    assert r.returncode == 2, r.stderr
    assert "api_key_env" in r.stderr or "--api-key-env" in r.stderr
    assert KEY not in r.stdout + r.stderr and files_holding(tmp_path, KEY) == []


# --- a response is input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, words", [("models_no_id", ("/v1/models", "data.0.id")),
                                         ("models_list", ("/v1/models",)),
                                         ("tokenize_3", ("/tokenize", "does not count tokens"))])
def test_answers_of_the_wrong_shape_are_server_errors_naming_url_and_field(tmp_path, mode, words):
    with HostileServer(mode) as srv:
        r = cli(bench(srv.url, tmp_path / "out"), tmp_path, timeout=120)
    assert r.returncode == 3, (r.returncode, r.stderr[-800:])
    for w in words:
        assert w in r.stderr, (w, r.stderr[-800:])
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr


def test_a_model_list_without_the_model_asked_for_is_refused(tmp_path):
    from offload_lab.core.errors import ServerError
    from offload_lab.load.endpoint import Endpoint

    with HostileServer("models_other") as srv:
        with pytest.raises(ServerError, match=MODEL):
            Endpoint(srv.url).check_model(MODEL)


def test_metrics_that_are_not_prometheus_text_are_a_server_error(tmp_path):
    from offload_lab.load import metrics
    from offload_lab.load.responses import BadResponse

    with HostileServer("metrics_garbage") as srv:
        with pytest.raises(BadResponse, match="/metrics"):
            metrics.block_size(srv.url)


# --- deadlines ----------------------------------------------------------------------------------------------------


def test_a_stream_that_only_trickles_comments_ends_at_the_first_byte_deadline(tmp_path):
    """A comment every 0.2 s keeps every per-read timeout happy; the first-byte deadline (here 2 s, through its flag)
    still ends the request, which is recorded as a timeout and fails the run."""
    with HostileServer("trickle") as srv:
        r = cli(bench(srv.url, tmp_path / "out", "--first-byte-timeout", "2"), tmp_path, timeout=200)
    assert r.returncode != 0 and "internal error" not in r.stderr, r.stderr[-800:]
    events = request_events(tmp_path / "out")
    assert events and all(e["error_kind"] == "timeout" and "first-byte" in e["error"] for e in events)


def test_the_whole_request_deadline_holds_through_the_environment(tmp_path):
    from offload_lab.core.errors import InputError
    from offload_lab.load.endpoint import Endpoint

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OFFLOAD_LAB_REQUEST_DEADLINE_S", "7")
        assert Endpoint("http://127.0.0.1:9").request_deadline(4096) == 7
        mp.setenv("OFFLOAD_LAB_REQUEST_DEADLINE_S", "forever")
        with pytest.raises(InputError, match="OFFLOAD_LAB_REQUEST_DEADLINE_S"):
            Endpoint("http://127.0.0.1:9")
    assert Endpoint("http://127.0.0.1:9").request_deadline(100) == 600 + 100


def test_redirects_are_not_followed_off_the_host(tmp_path):
    with HostileServer("redirect_away") as srv:
        r = cli(bench(srv.url, tmp_path / "out"), tmp_path, timeout=60)
    assert r.returncode == 3 and "/v1/models" in r.stderr, r.stderr[-600:]
    assert "127.0.0.2" not in r.stderr or "HTTP 302" in r.stderr


class _RangeHandler(BaseHTTPRequestHandler):
    """A quiet handler that answers 404 for anything but the checkpoint file."""

    def log_message(self, *a):
        pass

    def not_found(self) -> bool:
        if self.path.endswith(".safetensors"):
            return False
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()
        return True


class _TrickleRange(_RangeHandler):
    """Answers a range request with 206 and a valid Content-Range, then one byte every 0.3 s."""

    def do_GET(self):  # noqa: N802
        if self.not_found():
            return
        self.send_response(206)
        self.send_header("Content-Range", "bytes 0-65535/1000000")
        self.send_header("Content-Length", "65536")
        self.end_headers()
        try:
            self.wfile.write((100).to_bytes(8, "little"))
            for _ in range(1000):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.3)
        except (BrokenPipeError, ConnectionResetError):
            pass


def test_a_range_server_trickling_bytes_ends_at_the_request_deadline():
    from offload_lab.fit import remote

    srv = ThreadingHTTPServer(("127.0.0.1", 0), _TrickleRange)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/model.safetensors"
        with pytest.raises(remote.TooSlowError, match="deadline"):
            remote.read_remote(url, remote.RemoteOptions(retries=0, deadline_s=1.5, timeout_s=5))
    finally:
        srv.shutdown()
        srv.server_close()


class _BadRange(_RangeHandler):
    """A range server that is wrong in one way (``fault``): a Content-Range from another byte, a header that is not
    JSON, a 200 with the whole body for a range request."""

    fault = "wrong_start"

    def do_GET(self):  # noqa: N802
        if self.not_found():
            return
        header = b"{not json" if self.fault == "garbage_header" else b'{"t": {"dtype": "F32", "shape": [1], ' \
            b'"data_offsets": [0, 4]}}'
        body = len(header).to_bytes(8, "little") + header + b"\0" * 4
        if self.fault == "ignore_range":
            self.send_response(200)
        else:
            self.send_response(206)
            first = 5 if self.fault == "wrong_start" else 0
            self.send_header("Content-Range", f"bytes {first}-{len(body) - 1}/{len(body)}")
            body = body[first:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize("fault, words", [("wrong_start", "sent them from 5"), ("garbage_header", "header"),
                                          ("ignore_range", "ignored the Range header")])
def test_a_range_server_that_answers_wrongly_is_server_trouble_naming_the_url(tmp_path, fault, words):
    handler = type("H", (_BadRange,), {"fault": fault})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/model.safetensors"
        r = cli(["audit", url, "--tp", "1", "--usable-gib", "80"], tmp_path, timeout=120)
    finally:
        srv.shutdown()
        srv.server_close()
    assert r.returncode == 3, (r.returncode, r.stderr[-600:])
    assert url in r.stderr and words in r.stderr, r.stderr[-600:]


def test_an_audit_of_a_url_with_credentials_never_records_them():
    """The checkpoint an audit records (and prints, --json too) names the URL without its user:password."""
    from offload_lab.fit import remote

    handler = type("H", (_BadRange,), {"fault": "none"})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://u:{SECRET}@127.0.0.1:{srv.server_address[1]}/model.safetensors"
        ckpt = remote.read_remote(url, remote.RemoteOptions(retries=0))
    finally:
        srv.shutdown()
        srv.server_close()
    assert ckpt.source.endswith("/model.safetensors") and SECRET not in ckpt.source, ckpt.source


class _TrickleHeaders(BaseHTTPRequestHandler):
    """Never finishes its status line: one byte every 0.2 s, each resetting any per-read timeout."""

    def log_message(self, *a):
        pass

    def do_GET(self):  # noqa: N802
        try:
            for _ in range(1500):
                self.wfile.write(b"H")
                self.wfile.flush()
                time.sleep(0.2)
        except (BrokenPipeError, ConnectionResetError):
            pass


def test_a_server_trickling_its_headers_ends_at_the_whole_request_deadline():
    """The status line and headers come under the deadline too: /v1/models (the load generator's first call) and
    an audit's range read both give up at theirs, naming the URL."""
    from offload_lab.core.errors import ServerError
    from offload_lab.fit import remote
    from offload_lab.load.endpoint import Endpoint

    srv = ThreadingHTTPServer(("127.0.0.1", 0), _TrickleHeaders)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        with pytest.raises(ServerError, match="within 1.5 s"):
            Endpoint(url).models(timeout_s=1.5)
        with pytest.raises(remote.TooSlowError, match=r"127\.0\.0\.1.*1\.5 s deadline"):
            remote.read_remote(url + "/model.safetensors", remote.RemoteOptions(retries=0, deadline_s=1.5,
                                                                                 timeout_s=5))
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("text, words", [("vllm:generation_tokens_total \u0665\n", "ASCII digits"),
                                         ("vllm:generation_tokens_total 1" + "0" * 400 + "\n", "too large"),
                                         ("vllm:generation_tokens_total 1e300\n", "beyond")])
def test_metrics_with_numbers_no_exporter_writes_are_a_server_error(text, words):
    from offload_lab.load import metrics
    from offload_lab.load.responses import BadResponse

    with pytest.raises(BadResponse, match=words):
        metrics.parse_checked(text, "http://127.0.0.1:9/metrics")
    assert metrics.parse("vllm:num_requests_running NaN\nvllm:generation_tokens_total 5\n") == {
        "vllm:generation_tokens_total": 5.0}


# --- lies ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, kinds", [("usage_huge", ("bad_response", "lie")), ("usage_zero", ("lie",)),
                                         ("cached_above", ("lie",)), ("no_done", ("no_done",)),
                                         ("finish_early", ("lie",)), ("prompt_huge", ("lie",))])
def test_usage_that_contradicts_the_stream_is_flagged_and_fails_the_run(tmp_path, mode, kinds):
    with HostileServer(mode) as srv:
        r = cli(bench(srv.url, tmp_path / "out"), tmp_path, timeout=120)
    assert r.returncode not in (0, 70), (r.returncode, r.stderr[-800:])
    events = request_events(tmp_path / "out")
    assert events and all(e["error_kind"] in kinds and not e["ok"] for e in events), [e["error"] for e in events]
    manifest = json.loads(next((tmp_path / "out").rglob("manifest.json")).read_text())
    assert manifest["outcome"] != "ok"


def test_a_stream_that_comes_in_one_read_is_no_measurement(tmp_path):
    # A buffering proxy hands over every token at once: no time between tokens, so no per-stream speed. It used
    # to print "held the bar up to 0 stream(s)" and exit 0.
    with HostileServer("one_read") as srv:
        r = cli(bench(srv.url, tmp_path / "out"), tmp_path, timeout=120)
    assert r.returncode == 3, (r.returncode, r.stderr[-800:])
    assert "could be measured" in r.stderr and "one read" in r.stderr
    manifest = json.loads(next((tmp_path / "out").rglob("manifest.json")).read_text())
    assert manifest["outcome"] == "failed"


def test_open_loop_with_no_success_is_not_ok(tmp_path):
    with HostileServer("no_done") as srv:
        r = cli(bench(srv.url, tmp_path / "out", "--rates", "5", "--requests", "3"), tmp_path, timeout=120)
    assert r.returncode not in (0, 70), r.stderr[-600:]
    manifest = json.loads(next((tmp_path / "out").rglob("manifest.json")).read_text())
    assert manifest["outcome"] != "ok"


def test_a_gauge_that_reads_nan_is_left_out_and_said():
    from offload_lab.load import metrics

    scraper = metrics.Scraper("http://127.0.0.1:9")
    scraper._raw = [("during", 1, "vllm:kv_cache_usage_perc NaN\nvllm:num_requests_running 2\n"),
                    ("after", 2, "vllm:kv_cache_usage_perc 0.5\nvllm:num_requests_running 0\n")]
    scraper._parse_raw()
    assert [s["kv_cache_usage"] for s in scraper.samples] == [None, 0.5]
    assert scraper.problems == ["during: not a finite number, left out: vllm:kv_cache_usage_perc = nan"]


def test_counters_going_backwards_are_flagged_and_left_out():
    from offload_lab.load import metrics

    samples = [{"generation_tokens": 100.0, "prefix_cache_hits": 5.0}, {"generation_tokens": 40.0,
                                                                         "prefix_cache_hits": 9.0}]
    out = metrics.summarize(samples)
    assert out["generation_tokens"] is None and out["prefix_cache_hits"] == 4.0
    assert any("generation_tokens" in f for f in out["flags"])


# --- crashes and disks --------------------------------------------------------------------------------------------


def test_a_torn_last_line_survives_and_the_next_writer_starts_a_fresh_line(tmp_path):
    from offload_lab.campaigns import ledger
    from offload_lab.core import runs

    path = ledger.ledger_path(tmp_path, "c")
    path.parent.mkdir(parents=True)
    path.write_text('{"event":"start","session":"a","started_at":"x"}\n{"event":"end","sess')  # a full disk
    s = ledger.start_session(tmp_path, "c", {}, None)
    s.end("ok")
    torn: list[str] = []
    events = runs.read_events(path, torn)
    assert [e["event"] for e in events] == ["start", "start", "end"] and len(torn) == 1
    assert len(ledger.read_ledger(tmp_path, "c")) == 2


def test_sigkill_mid_level_keeps_the_requests_that_finished(tmp_path):
    """Two requests of a level finish, the third hangs, and the load generator is SIGKILLed: no handler runs, yet
    both finished requests are in events.jsonl (the journal writer had them as they finished)."""
    import signal

    with HostileServer("hang_third") as srv:
        args = bench(srv.url, tmp_path / "out")
        args[args.index("--requests-per-stream") + 1] = "4"
        err = open(tmp_path / "stderr.txt", "w")
        p = subprocess.Popen([sys.executable, "-c", "import sys; from offload_lab.cli.main import main; "
                              "sys.exit(main())", *args], cwd=tmp_path, stdout=subprocess.DEVNULL,
                             stderr=err, env={**os.environ, "OFFLOAD_LAB_LOG_DIR": str(tmp_path)})
        try:
            for _ in range(1200):
                if srv.streams_started() >= 3 or p.poll() is not None:
                    break
                time.sleep(0.1)
            assert srv.streams_started() >= 3, (tmp_path / "stderr.txt").read_text()[-800:]
            time.sleep(1.0)  # the third is in flight, hanging
            p.send_signal(signal.SIGKILL)
            p.wait(30)
            for _ in range(150):  # the writer drains its pipe after the kill, then exits at end of file
                if len(request_events(tmp_path / "out")) >= 2:
                    break
                time.sleep(0.1)
        finally:
            if p.poll() is None:
                p.kill()
            err.close()
    events = request_events(tmp_path / "out")
    assert len(events) == 2 and all(e["ok"] and e["level"] == 1 for e in events), events


def test_a_bundle_never_replaces_the_users_own_files(tmp_path):
    from offload_lab.core.errors import InputError
    from offload_lab.paper.bundle import make_bundle

    page = tmp_path / "page.html"
    page.write_text("<html><a href='#x'>x</a></html>")
    mine = tmp_path / "mine"
    (mine / "data").mkdir(parents=True)
    (mine / "paper.html").write_text("my page")
    (mine / "data" / "keep.csv").write_text("a\n1\n")
    with pytest.raises(InputError, match="--bundle"):
        make_bundle(page, mine)
    assert (mine / "paper.html").read_text() == "my page" and (mine / "data" / "keep.csv").is_file()
    fresh = tmp_path / "fresh"
    make_bundle(page, fresh)
    make_bundle(page, fresh)  # its own earlier bundle: replaced
    assert (fresh / "paper.html").is_file()


def test_a_sealed_run_is_never_written_into_and_verify_refuses_links_and_fifos(tmp_path):
    from offload_lab.core import runs
    from offload_lab.core.errors import InputError

    run = runs.new_run(tmp_path, "c", "e", {})
    run.write_json("a.json", {"x": 1})
    run.finish("ok")
    with pytest.raises(InputError, match="sealed"):
        runs.open_run(run.path, tmp_path, "c", "e", {})
    (run.path / "passwd").symlink_to("/etc/passwd")
    os.mkfifo(run.path / "pipe")
    (run.path / "loop").symlink_to(run.path / "loop")
    problems = runs.verify_run(run.path)
    assert any("passwd" in p and "symbolic link" in p for p in problems)
    assert any("pipe" in p and "FIFO" in p for p in problems)
    assert any("loop" in p for p in problems)


def test_a_full_disk_is_a_clear_error_naming_the_file(tmp_path):
    import errno

    from offload_lab.core import signals
    from offload_lab.core.errors import InputError

    with pytest.raises(InputError, match="no space left.*ledger.jsonl"):
        with signals.stopping_on_signals():
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "ledger.jsonl"))


# --- the users' own inputs ----------------------------------------------------------------------------------------


def test_names_dates_and_headers_the_user_gave_are_refused_naming_them(tmp_path):
    from offload_lab.core.errors import InputError
    from offload_lab.fit.headers import parse_header
    from offload_lab.seats.usage_export import _date

    r = cli(["quality", "run", "--endpoint", "http://127.0.0.1:9", "--campaign", "c" * 300, "--data-dir",
             str(tmp_path / "d")], tmp_path)
    assert r.returncode == 2 and "campaign" in r.stderr and "300" in r.stderr, r.stderr
    with pytest.raises(ValueError, match="2026-03-03garbage"):
        _date({"date": "2026-03-03garbage"}, "ccusage-daily", "usage.json")
    twice = b'{"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "t": {"dtype": "F32", "shape": [1], ' \
            b'"data_offsets": [4, 8]}}'
    with pytest.raises(InputError, match="twice"):
        parse_header(twice, "a.safetensors")
    with pytest.raises(InputError, match="shape"):
        parse_header(b'{"t": {"dtype": "F32", "shape": [true, 4], "data_offsets": [0, 16]}}', "a.safetensors")


def test_a_yaml_alias_bomb_in_a_notebook_parameter_is_refused():
    from offload_lab.core.errors import InputError
    from offload_lab.core.inputs import parse_yaml_value

    rows = ["a: &a [x,x,x,x,x,x,x,x,x]"] + [
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]" for p, c in zip("abcdefg", "bcdefgh")]
    with pytest.raises(InputError, match="bomb"):
        parse_yaml_value("\n".join(rows), "parameter context_lengths")
