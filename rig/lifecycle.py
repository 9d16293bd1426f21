"""A deployed stack's life with the real engine on the rig (`python -m rig engine`, after `make rig`): what users do
after the first `pulumi up`, each step a verdict with its evidence in the run's report.

1. `pulumi preview --expect-no-changes` passes, and `pulumi refresh --expect-no-changes` finds no drift;
2. a budget change previews as exactly one update, of the BackendTrafficPolicy, applies, and the next call is
   limited by the new number (seconds from the start of `pulumi up` to that call, measured);
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

import yaml

from rig import program
from rig.engine import Engine, changed_resources, secrets_seen
from rig.node import Node
from rig.processes import StepError, wait_until

STACK_NAMESPACES = ("agent-budgets", "agent-budgets-redis", "envoy-gateway-system", "envoy-ai-gateway-system")


def _stack_config(engine: Engine, stack: str) -> dict[str, Any]:
    return yaml.safe_load((engine.project / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8"))["config"]


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


def rate_limit_header(node: Node, engine: Engine, stack: str, actor: str) -> tuple[int, str]:
    """One call as a service account; (status, the x-ratelimit-limit header Envoy's rate-limit filter sent)."""
    url, host = program.gateway_address(node, engine.outputs(stack))
    namespace, name = actor.split(":", 1)[1].split("/")
    token = program.service_account_token(node, namespace, name, "agent-router")
    status, _, headers = program.call(url, host, token)
    return status, headers.get("x-ratelimit-limit", "")


def budget_change(node: Node, engine: Engine, stack: str) -> dict[str, Any]:
    """The default budget raised by 100 tokens: exactly one update (the BackendTrafficPolicy), then the next call's
    `x-ratelimit-limit` names the new limit."""
    config = _stack_config(engine, stack)
    budgets = config["agent-budgets:budgets"]
    old = int(budgets["default"]["tokens"])
    new = old + 100
    engine.overlay(stack, {"agent-budgets:budgets": {**budgets, "default": {**budgets["default"], "tokens": new}}})
    changes = preview_changes(engine, stack, "budget")
    if len(changes) != 1 or changes[0][0] != "update" or ":BackendTrafficPolicy::" not in changes[0][1]:
        raise StepError(f"a budget change previews as {changes}, not one update of the BackendTrafficPolicy")
    began = time.monotonic()
    engine.pulumi("up", "--stack", stack, "--yes", "--skip-preview", log_name=f"{stack}-up-budget")
    applied = round(time.monotonic() - began, 1)
    actor = next(a for a in config["agent-budgets:actors"] if a.startswith("serviceaccount:"))
    seen: dict[str, Any] = {}

    def limited_by_new() -> str | None:
        status, limit = rate_limit_header(node, engine, stack, actor)
        seen["status"], seen["x-ratelimit-limit"] = status, limit
        return limit if limit.split(",")[0].strip() == str(new) else None

    wait_until(f"a call limited by {new} tokens", limited_by_new, 120, interval=1)
    return {
        "preview": changes,
        "limit": [old, new],
        "up_seconds": applied,
        "seconds_from_up_to_the_first_call_with_the_new_limit": round(time.monotonic() - began, 1),
        "call": seen,
    }


def add_service_account(node: Node, engine: Engine, stack: str) -> dict[str, Any]:
    """A new `serviceaccount:` actor: refused (403) before, the preview's changes, admitted after `up`."""
    config = _stack_config(engine, stack)
    actors = list(config["agent-budgets:actors"])
    added = "serviceaccount:agents/actor-rig"
    before, _ = rate_limit_header(node, engine, stack, added)
    engine.overlay(stack, {"agent-budgets:actors": [*actors, added]})
    changes = preview_changes(engine, stack, "actor")
    began = time.monotonic()
    engine.pulumi("up", "--stack", stack, "--yes", "--skip-preview", log_name=f"{stack}-up-actor")
    seen: dict[str, Any] = {}

    def admitted() -> str | None:
        status, limit = rate_limit_header(node, engine, stack, added)
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
            "agent-budgets:actors": [*_stack_config(engine, stack)["agent-budgets:actors"], "agents/actor-a"],
        },
    )
    engine.pulumi("stack", "init", broken, log_name="policy-broken")
    output = engine.pulumi("preview", "--stack", broken, "--policy-pack", "policy", check=False, log_name="policy-fail")
    log = (engine.log_dir / "pulumi-policy-fail.log").read_text(encoding="utf-8") if engine.log_dir else output
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


def destroy(node: Node, engine: Engine, stack: str) -> dict[str, Any]:
    began = time.monotonic()
    engine.pulumi("destroy", "--stack", stack, "--yes", "--skip-preview", log_name=f"{stack}-destroy", timeout=1800)
    seconds = round(time.monotonic() - began, 1)

    def gone() -> str | None:
        left = [
            ns for ns in STACK_NAMESPACES if node.kubectl("get", "namespace", ns, "-o", "name", check=False).strip()
        ]
        return "none of the stack's namespaces left" if not left else None

    wait_until("the stack's namespaces gone", gone, 180)
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
    return {
        "destroy_seconds": seconds,
        "resources_left_in_state": len(resources),
        "crds_left_by_helm": len(crds),
    }


LIFECYCLE: list[tuple[str, Callable[[Node, Engine, str], dict[str, Any]]]] = [
    ("preview --expect-no-changes and refresh find nothing", lambda n, e, s: no_changes(e, s)),
    ("a budget change: one update, applied, the next call limited by it", budget_change),
    ("an added service account: admitted after up", add_service_account),
    ("the policy pack fails a broken stack and passes the stack's own", lambda n, e, s: policy_pack(e, s)),
    ("no secret in plain text in state, outputs or logs", secrets_scan),
    ("destroy leaves nothing of the stack", destroy),
]
