"""Check 13: actor-b calls once, is suspended (stack config `suspended`, `pulumi up`), gets 403 with a body
that says it is suspended while actor-a is served, and its counter does not move; once the suspension is
lifted (the config restored) it is admitted again and its counter continues from what it had spent.
"""

import pytest

from tests.e2e.conftest import require_pulumi_cli
from tests.e2e.e2elib.checks import judge_suspension
from tests.e2e.e2elib.stack import stack_changes

pytestmark = [pytest.mark.e2e, pytest.mark.agents(2)]


def test_a_suspended_actor_is_refused_and_its_budget_kept(env, report, agents):
    require_pulumi_cli(13)
    s = env.settings
    actor_a, actor_b = agents
    with report(13) as v:
        v.note(env.fresh_buckets())
        [first] = env.run_calls(actor_b, 1)
        before = env.totals(actor_b)[actor_b]
        with stack_changes(env.stack, {"suspended": [s.actor_id(actor_b)]}, env.settle_policies):
            v.note(f"stack config: suspended = [{s.actor_id(actor_b)}]; pulumi up done")
            refused = env.call(actor_b)
            [other] = env.run_calls(actor_a, 1)
            during = env.totals(actor_b)[actor_b]
        v.note("stack config restored (suspended as before); pulumi up done")
        lifted = env.totals(actor_b)[actor_b]
        [readmitted] = env.run_calls(actor_b, 1)
        after = env.totals(actor_b)[actor_b]
        judge_suspension(
            v,
            env.subject(actor_b),
            env.subject(actor_a),
            first,
            refused,
            other,
            readmitted,
            (before, during, lifted, after),
            s.tokens_per_call,
        )
