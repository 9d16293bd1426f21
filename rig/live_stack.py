"""What the rig's checks read and change on the deployed stack, shared by them all: the live budget policy and the
rules it charges an actor, the counters in Redis, and a caller's token.

Read from the cluster, never from the models' own inputs: each check compares these with a model.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.identity import SERVICE_ACCOUNT_ID_PREFIX, SUBSTRATE, actor_header_value, actor_source
from core.ratelimit_model import rules_for_actor
from core.settings import StackSettings
from rig import actor_keys, program
from rig.engine import Engine
from rig.node import Node
from rig.processes import StepError

REDIS_NAMESPACE = "agent-budgets-redis"
REDIS_POD = "redis-0"


def redis_counters(node: Node) -> dict[str, int]:
    """Every key in the rate-limit store and its value, read inside the Redis pod (its own password variable)."""
    script = (
        'export REDISCLI_AUTH="$REDIS_PASSWORD"; redis-cli --scan | while IFS= read -r key; do '
        'printf "%s\\t%s\\n" "$key" "$(redis-cli GET "$key")"; done'
    )
    out = node.kubectl("exec", "-n", REDIS_NAMESPACE, REDIS_POD, "-c", "redis", "--", "sh", "-c", script)
    counters: dict[str, int] = {}
    for line in out.splitlines():
        key, _, value = line.partition("\t")
        if key:
            counters[key] = int(value) if value.strip().lstrip("-").isdigit() else -1
    return counters


def delete_counters(node: Node, keys: list[str]) -> int:
    """The counters `keys` deleted (a check starts from fresh buckets, as tests/e2e does): how many existed."""
    if not keys:
        return 0
    script = 'export REDISCLI_AUTH="$REDIS_PASSWORD"; redis-cli DEL "$@"'
    out = node.kubectl("exec", "-n", REDIS_NAMESPACE, REDIS_POD, "-c", "redis", "--", "sh", "-c", script, "sh", *keys)
    return int(out.strip() or 0)


def budget_policy(node: Node, namespace: str) -> dict[str, Any]:
    """The live BackendTrafficPolicy that holds the budgets (the one with global rate-limit rules)."""
    policies = json.loads(node.kubectl("get", "backendtrafficpolicies", "-n", namespace, "-o", "json"))["items"]
    found = [p for p in policies if (p["spec"].get("rateLimit") or {}).get("global")]
    if len(found) != 1:
        raise StepError(f"{len(found)} BackendTrafficPolicies with global rate limits in {namespace}, not one")
    return found[0]


def actor_rules(policy: Mapping[str, Any], actor: str) -> list[Any]:
    """The rules of the live budget policy that charge `actor`, as core/ratelimit_model.py reads them."""
    rules = policy["spec"]["rateLimit"]["global"]["rules"]
    namespace, name = policy["metadata"]["namespace"], policy["metadata"]["name"]
    return rules_for_actor(namespace, name, rules, actor_header_value(actor))


def fresh_counters(node: Node, namespace: str, actors: list[str]) -> int:
    """The actors' counters of the current windows deleted (a check starts from fresh buckets, as tests/e2e does)."""
    policy = budget_policy(node, namespace)
    now = int(time.time())
    return delete_counters(
        node, sorted({rule.counter_key(now) for actor in actors for rule in actor_rules(policy, actor)})
    )


def caller_token(node: Node, engine: Engine, settings: StackSettings, actor: str) -> str:
    """A JWT for a Substrate actor (signed by the rig's key) or a service account (from the TokenRequest API)."""
    if actor_source(actor) == SUBSTRATE:
        return actor_keys.actor_token(engine, settings, actor)
    namespace, name = actor.removeprefix(SERVICE_ACCOUNT_ID_PREFIX).split("/")
    return program.service_account_token(node, namespace, name, settings.identity.kubernetes.audience)


@dataclass(frozen=True)
class Caller:
    """One actor calling through the Gateway, its address, token and the live rules that charge it worked out once,
    so that a poll timing a change makes only its call (and, from fresh counters, one deletion)."""

    node: Node
    actor: str
    url: str
    host: str
    token: str
    rules: tuple[Any, ...]

    @classmethod
    def of(cls, node: Node, engine: Engine, stack: str, actor: str) -> Caller:
        """`actor` of the project copy's `stack`."""
        return cls.at(node, engine, engine.stack_settings(stack), engine.outputs(stack), actor)

    @classmethod
    def at(cls, node: Node, engine: Engine, settings: StackSettings, outputs: Mapping[str, Any], actor: str) -> Caller:
        """`actor` of a deployment with these settings and stack outputs (another program's, too)."""
        url, host = program.gateway_address(node, outputs)
        rules = actor_rules(budget_policy(node, settings.gateway.namespace), actor)
        return cls(node, actor, url, host, caller_token(node, engine, settings, actor), tuple(rules))

    def fresh(self) -> int:
        """The actor's counters of the current windows deleted. A budget change keeps every counter key (a limit is
        not part of one), so the rules read before it still name them."""
        now = int(time.time())
        return delete_counters(self.node, sorted({rule.counter_key(now) for rule in self.rules}))

    def rate_limit_header(self) -> tuple[int, str]:
        """One call; (status, the x-ratelimit-limit header Envoy's rate-limit filter sent)."""
        status, _, headers = program.call(self.url, self.host, self.token)
        return status, headers.get("x-ratelimit-limit", "")
