"""Check 10 (beyond the write-up): with the rate-limit store unreachable, the dev stack (fail-open) admits an
actor's call; with `rateLimit.failClosed: true` applied (stack config + `pulumi up`) the same call gets 500.
The stack config and Redis are put back afterwards, and the rate-limit service restarted (a charge on one of its
stale Redis connections would be lost: docs/operations.md), also when the check fails."""

import json

import pytest

from tests.e2e.conftest import require_pulumi_cli
from tests.e2e.e2elib.checks import judge_fail_mode
from tests.e2e.e2elib.stack import config_override

pytestmark = [pytest.mark.e2e, pytest.mark.agents(1)]


def test_fail_open_admits_and_fail_closed_refuses_without_the_store(env, report, agents):
    require_pulumi_cli(10)
    s = env.settings
    [actor] = agents
    with report(10) as v:
        v.note(env.fresh_buckets())
        with env.redis_unreachable() as outage:
            open_call = env.call(actor)
            with config_override(env.stack, "rateLimit.failClosed", "true", env.settle_gateway):
                closed_call = env.call(actor)
        restored = (
            f"restored: stack config as before (rateLimit = {json.dumps({'failClosed': s.fail_closed})} "
            "in effect), pulumi up done, Redis back and answering, the rate-limit service restarted (its connections "
            "renewed)"
        )
        judge_fail_mode(v, env.subject(actor), outage, s.fail_closed, open_call, closed_call, restored)
