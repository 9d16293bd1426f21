"""Live checks 11-13 and 15 (money, windows, suspension, pools) run against a simulation driven by the real
program.

No hand-written fake budget logic: every `pulumi up` of the simulated stack runs `core.validation` on the
stack configuration the check wrote, and calls are answered from what the program would deploy:

* which rules charge an actor, and under which Redis keys: core.ratelimit_model.PolicyModel over the
  compiled BackendTrafficPolicy rules (Envoy Gateway v1.9.0 translation, envoyproxy/ratelimit keys), for the
  call's `x-actor-id` and the `x-ai-eg-model` Agent Router sets from its body;
* what a call costs in mills: the CEL of the route's AIGatewayRoute `llmRequestCosts`, evaluated with
  cel-python on the mock model's usage (mock_model/server.py);
* a refusal: 429 once any applying counter is over its limit (check-only request,
  envoyproxy/ratelimit base_limiter.go), 403 with the responseOverride body for a suspended actor.

The Pulumi CLI is a fake that stores `config set --path` leaves the way Pulumi does (an untyped leaf is a
bool or an integer when it parses as one, else text; `--type float` makes a float: pulumi/pulumi
sdk/go/common/resource/config/value.go `coerce`) and rewrites the stack file on every change.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import dataclasses
import json
import re
import time
from datetime import UTC, datetime
from typing import Any

import celpy
import pytest
from celpy import celtypes

import tests.e2e.conftest as e2e_conftest
import tests.e2e.test_e2e_11_usd_limit as check_usd
import tests.e2e.test_e2e_12_windows as check_windows
import tests.e2e.test_e2e_13_suspended as check_suspended
import tests.e2e.test_e2e_15_pools as check_pools
from core import manifests
from core.budget_rules import ACTOR_HEADER, COST_METADATA_KEY, MODEL_HEADER, TOKEN_METADATA_KEYS
from core.money import USD_METADATA_KEY
from core.ratelimit_model import PolicyModel
from core.suspension import SUSPENDED_BODY
from core.validation import validate_stack
from mock_model.server import Settings as MockSettings
from tests.e2e.e2elib import checks, kube, stack
from tests.e2e.e2elib.checks import TITLES
from tests.e2e.e2elib.config import Settings, load_settings
from tests.e2e.e2elib.counters import CounterReading, Counters
from tests.e2e.e2elib.env import LiveEnv
from tests.e2e.e2elib.money import mock_call_mills
from tests.e2e.e2elib.probe import Call
from tests.e2e.e2elib.verdict import Verdict, reporting
from tests.support.program import stack_config
from tests.test_e2e_helpers import PASSWORD, FakeClock, FakeRunner, coerce_config_leaf, redis_glob, set_config_path

SETTINGS = load_settings()  # names from scripts/versions.env, models and budgets from Pulumi.dev.yaml
NOW = 1_767_225_600 + 3_600 * 7 + 120  # a fixed instant: every window start is derived from it


class FakePulumiConfig:
    """`pulumi config get/set/rm --path [--type float]` and `pulumi up` over every `agent-budgets:*` key."""

    def __init__(self, config: dict[str, Any], stack_file, on_up=lambda config: None):
        self.config = copy.deepcopy(config)
        self.stack_file = stack_file
        self.on_up = on_up
        self.log: list[str] = []
        self._write()

    def _write(self) -> None:
        self.stack_file.write_text(json.dumps(self.config) + "\n# rewritten by pulumi\n")

    def __call__(self, argv, stdin):
        assert argv[0] == "pulumi" and argv[-3:] == ["--stack", "dev", "--non-interactive"]
        words = argv[1:-3]
        self.log.append(" ".join(words))
        self.config = json.loads(self.stack_file.read_text().splitlines()[0])  # a restore may rewrite it
        if words[:2] == ["config", "get"]:
            key = words[2]
            if key not in self.config:
                return 255, "", f"error: configuration key 'agent-budgets:{key}' not found for stack 'dev'"
            value = self.config[key]
            structured = value if isinstance(value, dict | list) else None
            return 0, json.dumps({"value": json.dumps(value), "objectValue": structured, "secret": False})
        if words[:2] == ["config", "rm"]:
            self.config.pop(words[2], None)
        elif words[:3] == ["config", "set", "--path"]:
            rest = words[3:]
            typed = rest[:2] == ["--type", "float"]
            path, raw = rest[2:] if typed else rest
            set_config_path(self.config, path, float(raw) if typed else coerce_config_leaf(raw))
        elif words[0] == "up":
            self.on_up(copy.deepcopy(self.config))
            return 0, ""
        self._write()
        return 0, ""


class ProgramStack:
    """The dev stack as the program deploys it: rules, costs and suspensions from core.validation."""

    def __init__(self, config: dict[str, Any], *, honours_suspension=True, prices_usd=True):
        self.honours_suspension = honours_suspension
        self.prices_usd = prices_usd  # False: a broken stack whose usd rules are charged in tokens
        self.counters: dict[str, int] = {}  # Redis key -> value
        self.deploy(config)

    def deploy(self, config: dict[str, Any]) -> None:
        self.deployed_at = time.time()  # when the processor's new filter configuration is there to load
        validated = validate_stack(config, lambda key: (True, True))
        self.settings = validated.settings
        self.specs = validated.rules.specs()
        self.model = PolicyModel(SETTINGS.policy_namespace, SETTINGS.policy_name, self.specs)
        self.cost_programs: dict[str, Any] = {}
        env = celpy.Environment()
        for route in self.settings.routes:
            for cost in manifests.route_manifest(self.settings, route).spec["llmRequestCosts"]:
                if cost["type"] == "CEL":
                    program = env.program(env.compile(cost["cel"]))
                    for model in route.models:
                        self.cost_programs[model] = program

    def _charge(self, metadata_key: str, model: str) -> int:
        usage = MockSettings(total_tokens=SETTINGS.tokens_per_call).usage()
        if metadata_key == COST_METADATA_KEY or (metadata_key == USD_METADATA_KEY and not self.prices_usd):
            return usage["total_tokens"]  # (the second: a gateway that charges usd rules in tokens, to be caught)
        reported = {  # Agent Router's InputToken, OutputToken, CachedInputToken of an OpenAI-schema usage
            TOKEN_METADATA_KEYS["input"]: usage["prompt_tokens"],
            TOKEN_METADATA_KEYS["output"]: usage["completion_tokens"],
            TOKEN_METADATA_KEYS["cachedInput"]: 0,
        }
        if metadata_key in reported:
            return reported[metadata_key]
        assert metadata_key == USD_METADATA_KEY
        activation = {
            "model": celtypes.StringType(model),
            "input_tokens": celtypes.UintType(usage["prompt_tokens"]),
            "cached_input_tokens": celtypes.UintType(0),
            "cache_creation_input_tokens": celtypes.UintType(0),
            "output_tokens": celtypes.UintType(usage["completion_tokens"]),
        }
        return int(self.cost_programs[model].evaluate(activation))

    def call(self, actor, **spec):
        actor_id = f"{SETTINGS.atespace}/{actor}"
        if self.honours_suspension and actor_id in self.settings.suspended:
            return Call(status=403, reason="Forbidden", body=SUSPENDED_BODY)
        model = spec.get("model", SETTINGS.models[0])
        applied = self.model.applied({ACTOR_HEADER: SETTINGS.subject(actor), MODEL_HEADER: model})
        if any(self.counters.get(rule.counter_key(NOW), 0) > rule.requests for rule in applied):
            return Call(status=429, reason="Too Many Requests", remaining="0")
        for rule in applied:
            response = self.specs[rule.index]["cost"].get("response")
            if response is None:  # a calls limit: counted on the request
                self.counters[rule.counter_key(NOW)] = self.counters.get(rule.counter_key(NOW), 0) + 1
                continue
            key = response["metadata"]["key"]
            counter = rule.counter_key(NOW)
            self.counters[counter] = self.counters.get(counter, 0) + self._charge(key, model)
        return Call(status=200, reason="OK", total_tokens=SETTINGS.tokens_per_call, credential="provider-key")

    def kubectl(self, argv, stdin):
        if "secret" in argv:
            return 0, base64.b64encode(PASSWORD.encode()).decode()
        # The Envoy pod's Agent Router processor, as check 11's settle_costs reads it (Agent Router v1.1.0's line).
        if "logs" in argv and "ai-gateway-extproc" in argv:
            at = datetime.fromtimestamp(self.deployed_at + 0.001, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
            return 0, f'time={at}Z level=INFO msg="loading a new bundled config" path=/etc/filter-config-bundle'
        if "get" in argv and "service" in argv:
            return 0, json.dumps({"spec": {"selector": {"app.kubernetes.io/name": "envoy"}}})
        if "get" in argv and "pods" in argv:
            return 0, json.dumps({"items": [{"metadata": {"name": "envoy-agent-budgets-0"}}]})
        at = argv.index("-c")
        mode, patterns = argv[at + 3], argv[at + 4 :]
        lines = []
        for index, pattern in enumerate(patterns):
            regex = redis_glob(pattern)
            for counter, value in list(self.counters.items()):
                if regex.match(counter):
                    lines.append(f"{index}\t{counter}\t{1 if mode == 'del' else value}")
                    if mode == "del":
                        del self.counters[counter]
        return 0, "\n".join(lines)


class ProgramEnv(LiveEnv):
    program: ProgramStack
    pulumi: FakePulumiConfig

    def settle_policy(self):
        self.program.deploy(self.pulumi.config)

    def settle_policies(self):
        self.program.deploy(self.pulumi.config)


def program_env(tmp_path, **behaviour) -> ProgramEnv:
    config = stack_config("dev")
    program = ProgramStack(config, **behaviour)
    runner = FakeRunner(program.kubectl)
    k = kube.Kube(runner, SETTINGS.kube_context)
    pulumi = FakePulumiConfig(config, tmp_path / "Pulumi.dev.yaml")
    clock = FakeClock()
    env = ProgramEnv(
        settings=SETTINGS,
        runner=runner,
        kube=k,
        ate=None,
        counters=Counters(
            k, "agent-budgets-redis", "redis-0", "redis-auth", "password", sleep=clock.advance, clock=clock.now
        ),
        probe=program,
        gateway=None,
        stack=stack.StackConfig(FakeRunner(pulumi), dataclasses.replace(SETTINGS, root=tmp_path), environ={}),
    )
    env.program, env.pulumi = program, pulumi
    return env


USD, WINDOWS, SUSPENDED, POOLS = 11, 12, 13, 15
CHECKS = {
    USD: (check_usd, check_usd.test_usd_limit_refuses_the_call_after_the_one_that_crosses_it),
    WINDOWS: (check_windows, check_windows.test_the_smaller_window_refuses_first),
    SUSPENDED: (check_suspended, check_suspended.test_a_suspended_actor_is_refused_and_its_budget_kept),
    POOLS: (check_pools, check_pools.test_a_pool_and_a_per_model_limit),
}


def run_check(number, env, monkeypatch) -> tuple[Verdict, str]:
    verdicts, printed = [], []

    def fail(message):
        raise AssertionError(message)

    def report(n, title=None):
        return reporting(n, title or TITLES[n], record=verdicts.append, fail=fail, emit=printed.append)

    _, check = CHECKS[number]
    monkeypatch.setattr(e2e_conftest.shutil, "which", lambda name: "/usr/bin/pulumi")
    with contextlib.suppress(AssertionError):  # a FAIL; the verdict says why
        check(env, report, e2e_conftest.agents_of(check, env.settings))  # as conftest's `agents` fixture does
    (verdict,) = verdicts
    return verdict, printed[0]


@pytest.mark.parametrize("number", sorted(CHECKS))
def test_each_check_passes_on_the_program_s_stack_and_restores_its_config(tmp_path, number, monkeypatch):
    env = program_env(tmp_path)
    original = env.pulumi.stack_file.read_bytes()
    verdict, printed = run_check(number, env, monkeypatch)
    assert verdict.failures == [], printed
    assert env.pulumi.stack_file.read_bytes() == original, "the stack file is restored byte for byte"
    assert env.pulumi.config == stack_config("dev")
    assert env.program.settings.suspended == [] and not env.program.settings.prices
    assert sum(1 for line in env.pulumi.log if line.startswith("up")) == 2


def test_usd_check_charges_each_call_its_price_rounded_up(tmp_path, monkeypatch):
    env = program_env(tmp_path)
    _, printed = run_check(USD, env, monkeypatch)
    assert mock_call_mills(200) == 171  # 50 * $401 + 150 * $1,000 per 1M tokens = $0.17005 -> 171 mills
    assert "each call costs 171 mills (rounded up); 1,000 mills admit 6 calls" in printed
    assert "actor-a usd counter: 1,026 mills" in printed
    assert "prices.mock-small.input 401" in " ".join(env.pulumi.log)


def test_windows_check_reads_each_window_s_counter(tmp_path, monkeypatch):
    env = program_env(tmp_path)
    _, printed = run_check(WINDOWS, env, monkeypatch)
    assert "actor-a counters by rule: {2: 800, 3: 800}" in printed
    assert "config set --path budgetPolicy.limitSlots 2" in env.pulumi.log


def test_suspension_check_shows_the_counter_kept_through_the_suspension(tmp_path, monkeypatch):
    env = program_env(tmp_path)
    _, printed = run_check(SUSPENDED, env, monkeypatch)
    assert "actor-b counter: 200 -> 200 (suspended) -> 200 (lifted) -> 400" in printed
    assert "actor-b call while suspended: HTTP 403 actor_suspended: This actor is suspended" in printed


def test_suspension_check_fails_when_the_gateway_serves_a_suspended_actor(tmp_path, monkeypatch):
    env = program_env(tmp_path, honours_suspension=False)
    verdict, _ = run_check(SUSPENDED, env, monkeypatch)
    assert any("while suspended: expected HTTP 403, got" in failure for failure in verdict.failures)
    assert any("counter while suspended (untouched)" in failure for failure in verdict.failures)


def test_usd_check_fails_when_usd_rules_are_charged_in_tokens(tmp_path, monkeypatch):
    env = program_env(tmp_path, prices_usd=False)
    verdict, _ = run_check(USD, env, monkeypatch)
    assert verdict.failures, "200 'mills' a call would refuse the 6th call: the check must notice"


def test_pools_check_reads_the_shared_counter_by_its_rule(tmp_path, monkeypatch):
    env = program_env(tmp_path)
    _, printed = run_check(POOLS, env, monkeypatch)
    assert "counters: a default 200, b default 600, b model 400, pool 800" in printed
    assert 'actor-b call 3: {"status":429' in printed and 'actor-a call 2: {"status":429' in printed
    assert "config set --path budgetPolicy.classSlots 0" in env.pulumi.log


def test_pools_check_fails_when_the_pool_is_not_shared(tmp_path, monkeypatch):
    """A gateway that gives each member its own pool counter lets actor-a through: the check must notice."""
    env = program_env(tmp_path)
    deploy = env.program.deploy

    def per_member(config):
        deploy(config)
        specs = copy.deepcopy(env.program.specs)
        for rule in specs:  # a pool's rule is the one without a Distinct match: give it one
            headers = rule["clientSelectors"][0]["headers"]
            if not any(match["type"] == "Distinct" for match in headers):
                headers.insert(0, {"name": "x-actor-id", "type": "Distinct"})
        env.program.specs = specs
        env.program.model = PolicyModel(SETTINGS.policy_namespace, SETTINGS.policy_name, specs)

    monkeypatch.setattr(env.program, "deploy", per_member)
    verdict, _ = run_check(POOLS, env, monkeypatch)
    assert any("actor-a (pool) call 2: expected HTTP 429" in failure for failure in verdict.failures)


def test_a_failing_check_still_restores_the_stack(tmp_path, monkeypatch):
    env = program_env(tmp_path)
    original = env.pulumi.stack_file.read_bytes()

    def broken_call(actor, **spec):
        raise RuntimeError("probe agent crashed")

    monkeypatch.setattr(env.program, "call", broken_call)
    verdict, _ = run_check(SUSPENDED, env, monkeypatch)
    assert any("probe agent crashed" in failure for failure in verdict.failures)
    assert env.pulumi.stack_file.read_bytes() == original


# --- the helpers on their own ----------------------------------------------------------------------------


def test_float_leaves_are_set_with_type_float(tmp_path):
    pulumi = FakePulumiConfig({"budgets": {"default": {"tokens": 5, "per": "Day"}}}, tmp_path / "Pulumi.dev.yaml")
    config = stack.StackConfig(FakeRunner(pulumi), Settings(root=tmp_path), environ={})
    config.set_value("prices", {"m": {"input": 2.5, "output": 10}})
    assert pulumi.config["prices"] == {"m": {"input": 2.5, "output": 10}}
    assert "config set --path --type float prices.m.input 2.5" in pulumi.log
    assert "config set --path prices.m.output 10" in pulumi.log
    assert stack.float_leaves({"a": [1.5, 2], "b": {"c": 0.25}}, "k") == {"k.a[0]", "k.b.c"}


def test_restore_values_removes_keys_the_stack_did_not_set(tmp_path):
    pulumi = FakePulumiConfig({"actors": ["agents/a"]}, tmp_path / "Pulumi.dev.yaml")
    config = stack.StackConfig(FakeRunner(pulumi), Settings(root=tmp_path), environ={})
    assert config.get_value("suspended") is stack.UNSET
    config.set_value("suspended", ["agents/a"])
    config.restore_values({"suspended": stack.UNSET}, None)  # no stack file snapshot: key by key
    assert "suspended" not in pulumi.config
    assert "config rm suspended" in pulumi.log


def test_counters_by_rule_read_the_rule_index_from_the_key():
    domain = SETTINGS.domain
    reading = CounterReading(
        "actor/agents/actor-b",
        (
            (f"{domain}_{domain}/rule/2_{domain}/rule/2_rule-2-match-0_actor/agents/actor-b_rule-2-match-1_x_1", 800),
            (f"{domain}_{domain}/rule/3_{domain}/rule/3_rule-3-match-0_actor/agents/actor-b_rule-3-match-1_x_2", 600),
            (f"{domain}_{domain}/rule/3_{domain}/rule/3_rule-3-match-0_actor/agents/actor-b_rule-3-match-1_x_3", 200),
        ),
    )
    assert reading.by_rule(domain) == {2: 800, 3: 800}


def test_judges_fail_on_what_they_guard():
    ok = Call(status=200, total_tokens=200)
    refused = Call(status=403, body=SUSPENDED_BODY)
    verdict = Verdict(SUSPENDED, TITLES[SUSPENDED])
    checks.judge_suspension(verdict, "actor/agents/actor-b", "actor/agents/actor-a", ok, refused, ok, ok,
                            (200, 200, 0, 200), 200)  # fmt: skip
    assert verdict.failures == [
        "actor-b counter once lifted (spent budget kept): expected 200, got 0",
        "actor-b counter after its next call: expected 400, got 200",
    ]
    plain_403 = Verdict(SUSPENDED, TITLES[SUSPENDED])
    rbac = Call(status=403, body="RBAC: access denied")
    checks.judge_suspension(plain_403, "actor/agents/actor-b", "actor/agents/actor-a", ok, rbac, ok, ok,
                            (200, 200, 200, 400), 200)  # fmt: skip
    assert plain_403.failures == ["actor-b while suspended: the body does not say so: 'RBAC: access denied'"]
    windows = Verdict(WINDOWS, TITLES[WINDOWS])
    calls = [ok] * 4 + [Call(status=429)]
    checks.judge_windows(windows, "c", "actor/agents/actor-b", calls, (2, 600), (3, 600), 200, {2: 800, 3: 800})
    assert windows.failures == ["the larger window is over too (800 > 600): the check proves nothing"]


def test_check_11_waits_for_every_processor_to_load_the_new_prices(tmp_path, monkeypatch):
    """settle_costs reads the reload from the processor's log instead of sleeping past its reload period."""
    env = program_env(tmp_path)
    verdict, printed = run_check(USD, env, monkeypatch)
    assert verdict.failures == [], printed
    seen = re.findall(r"processor loaded its new filter configuration envoy-agent-budgets-0 (\d+\.\d) s after", printed)
    assert len(seen) == 2, printed  # in the verdict: after the change, and after the restore
    assert "waited" not in printed and len(env.cost_reloads) == 2
