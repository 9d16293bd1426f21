"""Unit tests for the probe agent (probe/probe_agent.py): a real probe process on 127.0.0.1 calling the
dev stack's mock model (mock_model/server.py), also a real process, over real HTTP."""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import re
import socket
import string
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from core import egress
from tests.e2e.e2elib.probe import parse_probe_reply
from tests.support.redis_server import _stop as stop_process
from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parents[1]
PROBE_FILE = ROOT / "probe" / "probe_agent.py"
MOCK_FILE = ROOT / "mock_model" / "server.py"
PROVIDER_KEY = "sk-probe-test-key-42"
TOTAL = 200

_spec = importlib.util.spec_from_file_location("probe_agent", PROBE_FILE)
probe_agent = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("probe_agent", probe_agent)  # dataclasses look the module up while loading
_spec.loader.exec_module(probe_agent)


def request(port, method, path, body=None, raw=None, timeout=10):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    payload = resp.read()
    conn.close()
    return resp.status, json.loads(payload) if payload else None


def wait_http(port, path, process):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"process exited: {process.stderr.read()}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing answered on 127.0.0.1:{port}{path}")


def start(argv, env, port, health):
    process = subprocess.Popen(
        argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    wait_http(port, health, process)
    return process


def stop(process):
    stop_process(process)
    process.stderr.close()


def alone(source, tmp_path_factory):
    """A copy of the file in a directory of its own, run as in its container (a module next to the
    original, such as components/platform.py, must not shadow the standard library)."""
    copy = tmp_path_factory.mktemp(source.stem) / source.name
    copy.write_bytes(source.read_bytes())
    return str(copy)


@pytest.fixture(scope="module")
def mock_port(tmp_path_factory):
    port = free_port()
    env = {"PORT": str(port), "MOCK_TOTAL_TOKENS": str(TOTAL), "MOCK_EXPECTED_API_KEY": PROVIDER_KEY}
    process = start([sys.executable, alone(MOCK_FILE, tmp_path_factory)], env, port, "/health")
    yield port
    stop(process)


def start_probe(mock_port, tmp_path_factory, **env):
    """The probe agent on a free port, calling the mock model; (port, process) once it is ready."""
    port = free_port()
    env = {
        "PORT": str(port),
        "PROBE_BIND": "127.0.0.1",
        "PROBE_UPSTREAM": f"http://127.0.0.1:{mock_port}",
        "PROBE_TIMEOUT": "5",
        **env,
    }
    return port, start([sys.executable, alone(PROBE_FILE, tmp_path_factory)], env, port, "/readyz")


@pytest.fixture(scope="module")
def probe_port(mock_port, tmp_path_factory):
    port, process = start_probe(mock_port, tmp_path_factory)
    yield port
    stop(process)


def call(probe_port, **spec):
    return request(probe_port, "POST", "/call", spec)


# --- the probe over HTTP, against the mock model ---------------------------------------------------


def test_readyz_and_unknown_routes(probe_port):
    assert request(probe_port, "GET", "/readyz") == (200, {"status": "ok"})
    assert request(probe_port, "GET", "/healthz")[0] == 200
    status, payload = request(probe_port, "GET", "/nope")
    assert status == 404 and payload["ok"] is False
    assert request(probe_port, "POST", "/nope", {})[0] == 404


def test_a_credential_file_is_sent_as_bearer_and_reread_on_every_call(mock_port, tmp_path, tmp_path_factory):
    """PROBE_AUTHORIZATION_FILE (the Substrate-free dev environment's agents): the file's content as `Bearer`,
    read on every call, since the kubelet rewrites a projected token before it expires; not ready, and a 500 on
    /call, while the file cannot be read; an explicit `authorization` still wins."""
    credential = tmp_path / "token"
    credential.write_text("first-token\n")
    port, process = start_probe(mock_port, tmp_path_factory, PROBE_AUTHORIZATION_FILE=str(credential))
    try:
        status, payload = call(port)
        assert status == 200 and payload["request"]["headers"]["Authorization"] == "Bearer first-token"
        credential.write_text("rotated-token")
        assert call(port)[1]["request"]["headers"]["Authorization"] == "Bearer rotated-token"
        assert (
            call(port, authorization="Bearer explicit")[1]["request"]["headers"]["Authorization"] == "Bearer explicit"
        )
        credential.unlink()
        status, ready = request(port, "GET", "/readyz")
        assert status == 503 and "cannot read PROBE_AUTHORIZATION_FILE" in ready["error"]
        assert request(port, "GET", "/healthz")[0] == 200, "alive, only not ready"
        status, failed = call(port)
        assert status == 500 and failed["error"]["stage"] == "credential"
    finally:
        stop(process)


def test_default_call_sends_a_placeholder_authorization(probe_port):
    status, payload = call(probe_port)
    assert status == 200 and payload["ok"] is True
    assert payload["status"] == 200 and payload["reason"] == "OK"
    assert payload["request"]["headers"]["Authorization"] == "Bearer placeholder"
    assert payload["request"]["body"]["model"] == "mock-small"
    assert "stream" not in payload["request"]["body"] and "stream_options" not in payload["request"]["body"]
    received = payload["json"]["mock_received"]
    assert received["credential"] == {"header": "authorization", "authorization": "other", "x_api_key": "absent"}
    assert received["x_actor_id"] is None
    assert payload["json"]["usage"]["total_tokens"] == TOTAL
    assert payload["headers"]["x-mock-authorization"] == "other"
    assert payload["headers"]["content-type"] == "application/json"
    assert json.loads(payload["body"])["object"] == "chat.completion"
    assert payload["stream"] is None
    assert payload["elapsed_ms"] > 0


def test_authorization_can_be_set_or_left_out(probe_port):
    _, with_key = call(probe_port, authorization=f"Bearer {PROVIDER_KEY}")
    assert with_key["json"]["mock_received"]["credential"]["authorization"] == "provider-key"
    _, without = call(probe_port, authorization=None)
    assert "Authorization" not in without["request"]["headers"]
    assert without["json"]["mock_received"]["credential"] == {
        "header": "none",
        "authorization": "absent",
        "x_api_key": "absent",
    }


def test_spoofed_x_actor_id_is_sent(probe_port):
    _, payload = call(probe_port, headers={"x-actor-id": "actor/agents/actor-b"})
    assert payload["request"]["headers"]["x-actor-id"] == "actor/agents/actor-b"
    assert payload["json"]["mock_received"]["x_actor_id"] == "actor/agents/actor-b"
    assert payload["headers"]["x-mock-x-actor-id"] == "actor/agents/actor-b"


def test_stream_without_usage_request(probe_port):
    status, payload = call(probe_port, stream=True)
    assert status == 200 and payload["status"] == 200
    assert payload["request"]["body"]["stream"] is True
    assert "stream_options" not in payload["request"]["body"]
    assert payload["headers"]["content-type"].startswith("text/event-stream")
    assert payload["json"] is None
    stream = payload["stream"]
    assert stream["done"] is True and stream["events"] >= 3
    assert stream["usage"] is None  # the mock only reports usage when asked; Agent Router asks in the cluster
    assert stream["mock_received"]["credential"]["authorization"] == "other"
    assert payload["body"].rstrip().endswith("data: [DONE]")


def test_stream_with_usage_request(probe_port):
    _, payload = call(probe_port, stream=True, include_usage=True)
    assert payload["request"]["body"]["stream_options"] == {"include_usage": True}
    assert payload["stream"]["usage"]["total_tokens"] == TOTAL


def test_model_path_and_explicit_body(probe_port):
    _, large = call(probe_port, model="mock-large")
    assert large["json"]["model"] == "mock-large"
    body = {"model": "custom", "messages": [{"role": "user", "content": "x"}], "temperature": 0}
    _, explicit = call(probe_port, body=body, model="ignored")
    assert explicit["request"]["body"] == body and explicit["json"]["model"] == "custom"
    _, missing = call(probe_port, path="/v2/nothing?x=1")
    assert missing["ok"] is True and missing["status"] == 404
    assert missing["request"]["url"].endswith("/v2/nothing?x=1")


def test_upstream_down_is_a_connect_error(probe_port):
    closed = free_port()
    status, payload = call(probe_port, url=f"http://127.0.0.1:{closed}/v1/chat/completions")
    assert status == 502 and payload["ok"] is False
    assert payload["error"]["stage"] == "connect"
    assert payload["error"]["type"] == "ConnectionRefusedError"
    assert payload["request"]["url"] == f"http://127.0.0.1:{closed}/v1/chat/completions"


def _one_shot_server(behaviour):
    """A TCP server on 127.0.0.1 that handles one connection with behaviour(conn)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def run():
        conn, _ = server.accept()
        with conn:
            behaviour(conn)
        server.close()

    threading.Thread(target=run, daemon=True).start()
    return server.getsockname()[1]


def _read_request(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    while len(rest) < length:
        rest += conn.recv(65536)


def test_connection_reset_is_a_receive_error(probe_port):
    def reset(conn):
        _read_request(conn)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")

    port = _one_shot_server(reset)
    status, payload = call(probe_port, url=f"http://127.0.0.1:{port}/v1/chat/completions")
    assert status == 502
    assert payload["error"]["stage"] == "receive"
    assert payload["error"]["type"] in ("ConnectionResetError", "RemoteDisconnected")


def test_silent_upstream_is_a_timeout(probe_port):
    release = threading.Event()

    def hold(conn):
        _read_request(conn)
        release.wait(5)

    port = _one_shot_server(hold)
    status, payload = call(probe_port, url=f"http://127.0.0.1:{port}/", timeout=0.3)
    release.set()
    assert status == 502 and payload["error"]["stage"] == "timeout"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "not JSON"),
        (b'{"url": "ftp://example/x"}', "http:// URL"),
        (b'{"headers": {"x-a": 1}}', "string values"),
        (b'{"stream": "yes"}', "stream must be"),
        (b'{"include_usage": "yes"}', "include_usage"),
        (b'{"timeout": 0}', "timeout"),
        (b'{"path": "v1"}', "path must start"),
        (b'{"body": []}', "body must be"),
        (b"[]", "JSON object"),
    ],
)
def test_malformed_requests_get_400(probe_port, raw, message):
    status, payload = request(probe_port, "POST", "/call", raw=raw)
    assert status == 400 and payload["ok"] is False
    assert payload["error"]["stage"] == "input" and message in payload["error"]["message"]


def test_bench_times_each_call(probe_port):
    status, payload = request(probe_port, "POST", "/bench", {"count": 5, "model": "mock-small"})
    assert status == 200 and payload["ok"] is True
    assert payload["count"] == 5 and payload["statuses"] == {"200": 5} and payload["errors"] == 0
    assert len(payload["latencies_ms"]) == 5 and all(v > 0 for v in payload["latencies_ms"])
    assert request(probe_port, "POST", "/bench", {"count": 0})[0] == 400
    assert request(probe_port, "POST", "/bench", {"count": True})[0] == 400


def test_bench_counts_connection_errors(probe_port):
    status, payload = request(probe_port, "POST", "/bench", {"count": 3, "url": f"http://127.0.0.1:{free_port()}/"})
    assert status == 200 and payload["ok"] is False
    assert payload["errors"] == 3 and payload["latencies_ms"] == [] and payload["statuses"] == {}


def test_e2e_client_reads_the_probes_answers(probe_port):
    """The e2e checks' parser against real probe output (the contract between the two)."""
    status, payload = call(probe_port, authorization=f"Bearer {PROVIDER_KEY}", headers={"x-actor-id": "actor/x/y"})
    parsed = parse_probe_reply(status, json.dumps(payload))
    assert (parsed.status, parsed.total_tokens, parsed.credential) == (200, TOTAL, "provider-key")
    assert parsed.upstream_actor_id == "actor/x/y" and parsed.error_stage is None
    status, payload = call(probe_port, stream=True, include_usage=True)
    streamed = parse_probe_reply(status, json.dumps(payload))
    assert streamed.stream_done and streamed.stream_usage_total == TOTAL and streamed.total_tokens == TOTAL
    assert streamed.sent_stream_options is True and streamed.credential == "other"
    status, payload = call(probe_port, url=f"http://127.0.0.1:{free_port()}/")
    refused = parse_probe_reply(status, json.dumps(payload))
    assert refused.status is None and refused.error_stage == "connect"


# --- in-process: pieces that need no server ---------------------------------------------------------


def test_dns_failure_is_reported_as_dns(monkeypatch):
    def no_such_host(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(probe_agent.socket, "getaddrinfo", no_such_host)
    spec = probe_agent.build_call({}, probe_agent.Settings())
    status, payload = probe_agent.perform_call(spec)
    assert status == 502 and payload["error"]["stage"] == "dns" and payload["error"]["type"] == "gaierror"
    assert payload["request"]["url"] == "http://agent-router.envoy-gateway-system.svc.cluster.local/v1/chat/completions"


def test_build_call_defaults_and_overrides():
    settings = probe_agent.Settings(upstream="http://gw.example:8080", model="m", authorization="Bearer p")
    spec = probe_agent.build_call({}, settings)
    assert (spec.host, spec.port, spec.target) == ("gw.example", 8080, "/v1/chat/completions")
    assert spec.headers["Authorization"] == "Bearer p"
    assert json.loads(spec.body) == {"model": "m", "messages": probe_agent.DEFAULT_MESSAGES}
    other = probe_agent.build_call({"url": "http://10.0.0.7/v1/chat/completions?m=1", "stream": True}, settings)
    assert (other.host, other.port, other.target) == ("10.0.0.7", 80, "/v1/chat/completions?m=1")
    assert json.loads(other.body)["stream"] is True
    assert "stream_options" not in json.loads(other.body)
    with pytest.raises(probe_agent.InputError):
        probe_agent.build_call({"url": "http://host:99999/"}, settings)


def test_parse_sse_keeps_the_last_usage():
    data = (
        b'data: {"choices":[],"mock_received":{"x_actor_id":"a"}}\n\n'
        b'data: {"choices":[],"usage":{"total_tokens":5}}\n\n'
        b'data: {"choices":[],"usage":null}\n\n'
        b"data: not json\n\n"
        b": comment\n\n"
        b'data: {"choices":[],"usage":{"total_tokens":7}}\n\n'
        b"data: [DONE]\n\n"
    )
    assert probe_agent.parse_sse(data) == {
        "events": 5,
        "done": True,
        "usage": {"total_tokens": 7},
        "mock_received": {"x_actor_id": "a"},
    }
    assert probe_agent.parse_sse(b"") == {"events": 0, "done": False, "usage": None, "mock_received": None}


def test_settings_from_env():
    settings = probe_agent.Settings.from_env({"PORT": "80", "PROBE_UPSTREAM": "http://x/", "PROBE_TIMEOUT": "2"})
    assert (settings.port, settings.upstream, settings.timeout, settings.bind) == (80, "http://x", 2.0, "0.0.0.0")
    assert probe_agent.Settings.from_env({}).upstream == probe_agent.DEFAULT_UPSTREAM
    with pytest.raises(ValueError):
        probe_agent.Settings.from_env({"PORT": "70000"})
    with pytest.raises(ValueError):
        probe_agent.Settings.from_env({"PROBE_TIMEOUT": "0"})


# --- the manifests and image that run the probe in a sandbox -------------------------------------------


def _render(name, **values):
    return yaml.safe_load_all(string.Template((ROOT / "probe" / name).read_text()).substitute(values))


def _actor_template(snapshot_block):
    (template,) = _render(
        "actor-template.yaml.tmpl",
        ATESPACE="agents",
        ACTOR_TEMPLATE="probe-agent",
        WORKER_LABEL="agent-budgets-probe",
        PROBE_IMAGE="localhost:5001/agent-budgets-probe@sha256:" + "0" * 64,
        SNAPSHOT_BUCKET="ate-snapshots",
        SNAPSHOT_BLOCK=snapshot_block,
    )
    return template


def test_actor_template_runs_the_probe_as_built():
    template = _actor_template(
        "snapshotConfig:\n  onPause: SNAPSHOT_CONTENT_SCOPE_FULL\n  storageLocation: gs://b/agent-budgets/"
    )
    assert template["metadata"] == {"atespace": "agents", "name": "probe-agent"}
    # scripts/up.sh fills in the block in the pinned checkout's shape (scripts/substrate_facts.py).
    assert template["snapshotConfig"] == {
        "onPause": "SNAPSHOT_CONTENT_SCOPE_FULL",
        "storageLocation": "gs://b/agent-budgets/",
    }
    (container,) = template["containers"]
    env = {item["name"]: item["value"] for item in container["env"]}
    dockerfile = (ROOT / "probe" / "Dockerfile").read_text()
    assert "FROM python:3.12-alpine" in dockerfile
    assert f"COPY probe_agent.py {container['command'][1]}" in dockerfile
    assert env["PORT"] == "80" and container["wakeupProbe"]["httpGet"] == {"path": "/readyz", "port": 80}
    assert env["PROBE_UPSTREAM"] == probe_agent.DEFAULT_UPSTREAM
    assert env["PROBE_AUTHORIZATION"] == probe_agent.DEFAULT_AUTHORIZATION
    assert template["workerSelector"]["matchLabels"] == {"workload": "agent-budgets-probe"}


def test_worker_pool_matches_the_template_selector():
    namespace, pool = _render(
        "worker-pool.yaml.tmpl",
        WORKER_NAMESPACE="agent-budgets-actors",
        WORKER_POOL="probe-agents",
        WORKER_LABEL="agent-budgets-probe",
        WORKER_REPLICAS="4",
        WORKER_IMAGE_FIELD="workerImage",
        WORKER_IMAGE="localhost:5001/ateom-gvisor@sha256:" + "1" * 64,
    )
    assert namespace["kind"] == "Namespace" and namespace["metadata"]["name"] == "agent-budgets-actors"
    assert pool["kind"] == "WorkerPool" and pool["metadata"]["labels"] == {"workload": "agent-budgets-probe"}
    assert pool["spec"] == {"replicas": 4, "workerImage": "localhost:5001/ateom-gvisor@sha256:" + "1" * 64}


def test_the_probe_in_an_actor_sends_the_header_its_egress_rule_replaces():
    """Substrate's egress gateway replaces only a header the request already carries: a version of its
    applyEffects lets a request without it go out unchanged, with no JWT (reference/substrate.md §1.5). So
    the probe, as the actor template starts it, must send the very header the rule names, with a value."""
    template = _actor_template("snapshotConfig:\n  storageLocation: gs://b/agent-budgets/")
    env = {item["name"]: item["value"] for item in template["containers"][0]["env"]}
    spec = probe_agent.build_call({}, probe_agent.Settings.from_env(env))
    [rule] = egress.build_rules(
        egress.PolicyInputs(atespace="agents", actor="actor-a", kube_context="k", substrate_ref="v")
    )
    [replaced] = rule["http"]["effects"]["replaceHeaders"]
    sent = {name.lower(): value for name, value in spec.headers.items()}
    assert replaced["header"].lower() in sent and sent[replaced["header"].lower()].strip()
    assert (spec.host, spec.port) == (rule["http"]["hostnames"][0], rule["http"]["ports"]["numbers"][0])
