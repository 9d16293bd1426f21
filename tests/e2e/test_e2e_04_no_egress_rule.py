"""Check 4: an actor with no egress rule for Agent Router cannot reach it, by name or by Service IP,
and nothing arrives at Agent Router (its access log, with a control request to prove the log works). A
positive control from inside a sandbox (an actor with the rule, same by-name call) proves the sandbox
network works at all."""

import pytest

from tests.e2e.e2elib.checks import judge_no_egress
from tests.e2e.e2elib.env import new_marker

pytestmark = [pytest.mark.e2e, pytest.mark.identity_source("substrate"), pytest.mark.agents(1)]


def test_actor_without_egress_rule_cannot_reach_the_gateway(env, report, agents):
    s = env.settings
    actor = s.noegress_actor
    with report(4) as v:
        did = env.ate.ensure_running(actor, s.actor_template)
        has_policy = env.ate.has_egress_policy(actor)
        v.note(
            f"{s.target(actor)}: not in agent-budgets:actors, egress policy: "
            f"{'PRESENT' if has_policy else 'none'} ({did})"
        )
        v.expect(not has_policy, f"{s.target(actor)} has an egress policy, so it is not a fair test")
        service_ip = env.kube.cluster_ip(s.gateway_namespace, s.gateway_service)
        by_name_marker, by_ip_marker, control_marker = new_marker(), new_marker(), new_marker()
        path = "/v1/chat/completions?e2e-marker="
        # Positive control from inside a sandbox: an actor WITH the egress rule makes the same by-name call
        # and must get an answer from the gateway, or the sandbox network is broken for everyone.
        [control_actor] = agents
        control_call = env.call(control_actor, path=path + new_marker(), timeout=15)
        by_name = env.call(actor, path=path + by_name_marker, timeout=15)
        by_ip = env.call(actor, url=f"http://{service_ip}:{s.gateway_port}{path}{by_ip_marker}", timeout=15)
        env.gateway_call({}, path=path + control_marker)
        hits = env.gateway_log_hits(
            {"name": by_name_marker, "ip": by_ip_marker, "control": control_marker}, wait_for="control"
        )
        judge_no_egress(
            v,
            env.subject(actor),
            by_name,
            by_ip,
            service_ip,
            hits["name"] + hits["ip"],
            hits["control"],
            env.subject(control_actor),
            control_call,
        )
