"""A deployed stack's life with the real engine on the rig (`python -m rig engine`, after `make rig`): what users do
after the first `pulumi up`, each step a verdict with its evidence in the run's report.

1. `pulumi preview --expect-no-changes` passes, and `pulumi refresh --expect-no-changes` finds no drift;
2. a budget change (the default's token limit cut to a fifth) previews as exactly one update, of the
   BackendTrafficPolicy, applies, and the next call of an actor under the default budget is limited by the new
   number (seconds from the start of `pulumi up` to that call, measured);
3. an added service account previews as the authorization change and, once applied, its first call is admitted;
4. `pulumi preview --policy-pack policy` fails on a stack file that breaks a mandatory rule and passes on the stack's
   own;
5. no API key, Redis password, provider key or kubeconfig key in plain text in the state, the outputs or the
   engine's logs;
6. `pulumi destroy` removes everything, and the cluster holds nothing of the stack afterwards.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from typing import Any

from core.identity import KUBERNETES, SUBSTRATE, actor_source, actors_of_source
from core.settings import StackSettings
from rig import component_package as component_package_check
from rig import egress_check, live_stack, move, program
from rig.engine import Engine, changed_resources, secrets_seen
from rig.node import Node
from rig.processes import StepError, wait_until

STACK_NAMESPACES = ("agent-budgets", "agent-budgets-redis", "envoy-gateway-system", "envoy-ai-gateway-system")


def no_changes(engine: Engine, stack: str) -> dict[str, Any]:
    began = time.monotonic()
    engine.pulumi("preview", "--stack", stack, "--expect-no-changes", log_name=f"{stack}-preview-no-changes")
    preview_seconds = round(time.monotonic() - began, 1)
    began = time.monotonic()
    engine.pulumi("refresh", "--stack", stack, "--yes", "--expect-no-changes", log_name=f"{stack}-refresh")
    return {
        "preview_expect_no_changes": "passed",
        "preview_seconds": preview_seconds,
        "refresh_expect_no_changes": "passed",
        "refresh_seconds": round(time.monotonic() - began, 1),
    }


def preview_changes(engine: Engine, stack: str, name: str) -> list[tuple[str, str]]:
    return changed_resources(engine.pulumi("preview", "--stack", stack, "--json", log_name=f"{stack}-preview-{name}"))


def default_budget_caller(settings: StackSettings) -> str:
    """An active actor the default budget holds (no class, no pool, not suspended) that the rig can sign for: a
    Substrate actor or a service account."""
    held_elsewhere = set(settings.suspended)
    held_elsewhere.update(actor for budget_class in settings.budgets.classes for actor in budget_class.actors)
    held_elsewhere.update(member for pool in settings.budgets.pools for member in pool.members)
    for actor in settings.actors:
        if actor not in held_elsewhere and actor_source(actor) in (SUBSTRATE, KUBERNETES):
            return actor
    raise StepError("the stack lists no active Substrate actor or service account under the default budget")


def lowered_default(budgets: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
    """The budgets section with the default's token limit cut to a fifth, and (old, new): lower, so the token limit
    is the caller's most restrictive one, the limit Envoy's `x-ratelimit-limit` names (a usd limit beside it has
    more left after the calls made so far). Either form of the default: `tokens`/`per`, or a `limits` list."""
    default = dict(budgets["default"])
    if "limits" in default:
        limits = [dict(limit) for limit in default["limits"]]
        entry = next((limit for limit in limits if "tokens" in limit), None)
        if entry is None:
            raise StepError("the default budget has no token limit to change")
        old = int(entry["tokens"])
        entry["tokens"] = max(1, old // 5)
        default["limits"] = limits
        new = entry["tokens"]
    else:
        old = int(default["tokens"])
        new = default["tokens"] = max(1, old // 5)
    return {**budgets, "default": default}, old, new


def budget_change(node: Node, engine: Engine, stack: str) -> dict[str, Any]:
    """The default budget's token limit cut to a fifth: exactly one update (the BackendTrafficPolicy), then the next
    call's `x-ratelimit-limit` names the new limit."""
    config = engine.stack_config(stack)
    actor = default_budget_caller(engine.stack_settings(stack))
    budgets, old, new = lowered_default(config["agent-budgets:budgets"])
    engine.overlay(stack, {"agent-budgets:budgets": budgets})
    changes = preview_changes(engine, stack, "budget")
    if len(changes) != 1 or changes[0][0] != "update" or ":BackendTrafficPolicy::" not in changes[0][1]:
        raise StepError(f"a budget change previews as {changes}, not one update of the BackendTrafficPolicy")
    caller = live_stack.Caller.of(node, engine, stack, actor)
    began = time.monotonic()
    engine.up(stack, log_name=f"{stack}-up-budget")
    applied = round(time.monotonic() - began, 1)
    seen: dict[str, Any] = {}

    def limited_by_new() -> str | None:
        # From fresh counters each time: a call the lower limit refuses answers 429 without the header, and each
        # call spends the mock's tokens, more than a fifth of a small budget.
        caller.fresh()
        status, limit = caller.rate_limit_header()
        seen["status"], seen["x-ratelimit-limit"] = status, limit
        return limit if limit.split(",")[0].strip() == str(new) else None

    wait_until(f"a call limited by {new} tokens", limited_by_new, 120, interval=1)
    return {
        "preview": changes,
        "caller": actor,
        "limit": [old, new],
        "up_seconds": applied,
        "seconds_from_up_to_the_first_call_with_the_new_limit": round(time.monotonic() - began, 1),
        "call": seen,
    }


def add_service_account(node: Node, engine: Engine, stack: str) -> dict[str, Any]:
    """A new `serviceaccount:` actor: refused (403) before, the preview's changes, admitted after `up`."""
    config = engine.stack_config(stack)
    actors = list(config["agent-budgets:actors"])
    added = "serviceaccount:agents/actor-rig"
    caller = live_stack.Caller.of(node, engine, stack, added)
    before, _ = caller.rate_limit_header()
    engine.overlay(stack, {"agent-budgets:actors": [*actors, added]})
    changes = preview_changes(engine, stack, "actor")
    began = time.monotonic()
    engine.up(stack, log_name=f"{stack}-up-actor")
    seen: dict[str, Any] = {}

    def admitted() -> str | None:
        status, limit = caller.rate_limit_header()
        seen["status"], seen["x-ratelimit-limit"] = status, limit
        return str(status) if status == 200 else None

    wait_until(f"{added} admitted", admitted, 120, interval=1)
    if before != 403:
        raise StepError(f"{added} got {before} before it was listed, not 403")
    return {
        "before": before,
        "preview": changes,
        "seconds_from_up_to_the_first_admitted_call": round(time.monotonic() - began, 1),
        "after": seen,
    }


def with_substrate_actor(actors: list[str]) -> list[str]:
    """The actors with a Substrate one among them (the egress rule needs one), added only when there is none."""
    return actors if actors_of_source(actors, SUBSTRATE) else [*actors, "agents/actor-a"]


def policy_pack(engine: Engine, stack: str) -> dict[str, Any]:
    """The pack on the stack's own file (passes) and on a copy of it that lets egress policies reach an extra host
    (`substrate.egress.extraHostnames`, which `egress-reaches-only-the-gateway` refuses unless the pack allows it)."""
    policy_venv = engine.project / "policy" / "venv"
    if not policy_venv.exists():
        policy_venv.symlink_to(engine.project_root / "venv")
    engine.pulumi("preview", "--stack", stack, "--policy-pack", "policy", log_name=f"{stack}-policy-pass")
    broken = "policy-broken"
    source = engine.project / f"Pulumi.{stack}.yaml"
    (engine.project / f"Pulumi.{broken}.yaml").write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    engine.overlay(
        broken,
        {
            "agent-budgets:identity": {"sources": ["substrate", "kubernetes", "apiKeys"]},
            "agent-budgets:substrate": {
                "trust": {"mode": "localJwks"},
                "egress": {"enabled": True, "extraHostnames": ["api.example.com"]},
            },
            "agent-budgets:actors": with_substrate_actor(engine.stack_config(stack)["agent-budgets:actors"]),
        },
    )
    engine.pulumi("stack", "init", broken, log_name="policy-broken")
    engine.pulumi("preview", "--stack", broken, "--policy-pack", "policy", check=False, log_name="policy-fail")
    log = engine.last_output
    if "egress-reaches-only-the-gateway" not in log or "mandatory" not in log:
        raise StepError(f"the broken stack's preview did not fail on the mandatory rule: {log[-600:]}")
    engine.pulumi("stack", "rm", broken, "--yes", "--force", log_name="policy-broken")
    lines = [line.strip() for line in log.splitlines() if "egress-reaches-only-the-gateway" in line]
    return {"own_stack": "passed", "broken_stack": "failed", "violation": lines[:2]}


def _secret_values(node: Node) -> list[str]:
    """Every secret the stack holds in the cluster (API keys, the Redis password, provider keys) and the kubeconfig's
    client key, as the values the scan looks for."""
    values: list[str] = []
    for namespace in ("agent-budgets", "agent-budgets-redis", "envoy-gateway-system"):
        out = node.kubectl("get", "secrets", "-n", namespace, "-o", "json", check=False)
        for item in json.loads(out).get("items", []) if out.strip() else []:
            if item.get("type") == "helm.sh/release.v1" or item["metadata"]["name"].startswith(("envoy", "sh.helm")):
                continue
            for value in (item.get("data") or {}).values():
                decoded = base64.b64decode(value).decode(errors="replace")
                if len(decoded) >= 8:
                    values.append(decoded)
    key = (node.layout.pki / "admin.key").read_text(encoding="utf-8")
    values.append(key.splitlines()[1])
    return values


def secrets_scan(node: Node, engine: Engine, stack: str) -> dict[str, Any]:
    values = _secret_values(node)
    state = engine.pulumi("stack", "export", "--stack", stack, log_name="secret-scan")
    outputs = engine.pulumi("stack", "output", "--stack", stack, "--json", log_name="secret-scan")
    texts = {"state": state, "outputs": outputs}
    if engine.log_dir is not None:
        for log in sorted(engine.log_dir.glob("pulumi-*.log")):
            texts[log.name] = log.read_text(encoding="utf-8")
    found = secrets_seen(texts, values)
    if found:
        raise StepError(f"secrets in plain text: {found}")
    return {"values_looked_for": len(values), "texts_scanned": sorted(texts)}


AGENT_NAMESPACE = "agents"
"""Where the dev environment's probe agents run (scripts/versions.env AGENT_NAMESPACE): `up.sh agent-pods` makes them
for the end-to-end suite, with the project's labels, and the stack does not own them."""


def stack_objects_left(items: list[dict[str, Any]]) -> list[str]:
    """`kind/namespace/name` of the labelled objects that are the stack's: the dev environment's probe agents are
    not."""
    return sorted(
        f"{item['kind']}/{item['metadata'].get('namespace', '')}/{item['metadata']['name']}"
        for item in items
        if item["metadata"].get("namespace") != AGENT_NAMESPACE
    )


def wait_namespaces_gone(node: Node, timeout: float = 240) -> str:
    """Until none of the stack's namespaces is left (finalization takes minutes after `destroy`)."""

    def gone() -> str | None:
        left = [
            ns for ns in STACK_NAMESPACES if node.kubectl("get", "namespace", ns, "-o", "name", check=False).strip()
        ]
        return "none of the stack's namespaces left" if not left else None

    return wait_until("the stack's namespaces gone", gone, timeout)


def destroy(node: Node, engine: Engine, stack: str) -> dict[str, Any]:
    egress_check.before_destroy(engine)
    destroyed = program.destroy(node, engine, stack, log_name=f"{stack}-destroy")
    wait_namespaces_gone(node)
    listing = node.kubectl(
        "get",
        "all,configmaps,secrets,serviceaccounts",
        "-A",
        "-l",
        "app.kubernetes.io/part-of=agent-budgets",
        "-o",
        "json",
        check=False,
    )
    left = stack_objects_left(json.loads(listing).get("items", []) if listing.strip() else [])
    if left:
        raise StepError(f"objects of the stack left after destroy: {', '.join(left)}")
    crds = sorted(
        line
        for line in node.kubectl("get", "crd", "-o", "name").split()
        if "envoyproxy.io" in line or "gateway.networking" in line
    )
    state = json.loads(engine.pulumi("stack", "export", "--stack", stack, log_name="destroy"))
    resources = state.get("deployment", {}).get("resources") or []
    evidence: dict[str, Any] = {
        **destroyed,
        "resources_left_in_state": len(resources),
        "crds_left_by_helm": len(crds),
    }
    egress = egress_check.destroyed(engine, node)
    if egress is not None:
        evidence["egress"] = egress
    return evidence


def component_package(node: Node, engine: Engine, stack: str) -> dict[str, Any]:
    """On the emptied cluster: the YAML program through plugin/ (rig/component_package.py)."""
    wait_namespaces_gone(node)
    return component_package_check.run(node, engine, "dev-kubernetes", program.overlay(node.layout, engine.by_hand))


def move_under_agent_budgets(node: Node, engine: Engine, stack: str) -> dict[str, Any]:
    """On the emptied cluster: the program at the commit before AgentBudgets, then today's (rig/move.py)."""
    wait_namespaces_gone(node)
    return move.run(node, engine, "dev-kubernetes")


LIFECYCLE: list[tuple[str, Callable[[Node, Engine, str], dict[str, Any]]]] = [
    ("preview --expect-no-changes and refresh find nothing", lambda n, e, s: no_changes(e, s)),
    ("a budget change: one update, applied, the next call limited by it", budget_change),
    ("an added service account: admitted after up", add_service_account),
    ("egress policies under the real dynamic-provider host (fake kubectl ate)", egress_check.run),
    ("the policy pack fails a broken stack and passes the stack's own", lambda n, e, s: policy_pack(e, s)),
    ("no secret in plain text in state, outputs or logs", secrets_scan),
    ("destroy leaves nothing of the stack", destroy),
    ("the component package: a YAML program deploys, egress on gets the documented error", component_package),
    ("the move under AgentBudgets: the commit before it, then today's, nothing replaced", move_under_agent_budgets),
]
