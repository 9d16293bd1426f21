"""Check 8 (beyond the write-up): with a budget class giving actor-b 5,000 tokens per Day (applied
through stack config and `pulumi up`, then restored), actor-b is held to its own limit and actor-a to
the default."""

import json

import pytest

from tests.e2e.conftest import require_pulumi_cli
from tests.e2e.e2elib.checks import admitted_calls, judge_class
from tests.e2e.e2elib.stack import budget_class

pytestmark = [pytest.mark.e2e, pytest.mark.agents(2)]

CLASS_TOKENS = 5000


def test_class_member_has_its_own_limit(env, report, agents):
    require_pulumi_cli(8)
    s = env.settings
    per = s.tokens_per_call
    actor_a, actor_b = agents
    large = {"name": "large", "tokens": CLASS_TOKENS, "per": s.default_per, "actors": [s.actor_id(actor_b)]}
    with report(8) as v:
        with budget_class(env.stack, large, env.settle_policy) as original:
            index = len(original.get("classes") or [])
            v.note(
                f"stack config: budgets.classes[{index}] = {json.dumps(large)} (set with pulumi config "
                "set --path, then pulumi up; rate-limit service restarted)"
            )
            v.note(env.fresh_buckets())
            member_calls = env.run_calls(actor_b, admitted_calls(CLASS_TOKENS, per) + 1)
            caller_calls = env.run_calls(actor_a, admitted_calls(s.default_tokens, per) + 1)
        v.note(f"stack config restored: budgets = {json.dumps(original)}; pulumi up done")
        judge_class(
            v,
            f"class large: {s.actor_id(actor_b)} at {CLASS_TOKENS} tokens/{s.default_per}; "
            f"default {s.default_tokens} tokens/{s.default_per}",
            env.subject(actor_a),
            caller_calls,
            env.subject(actor_b),
            member_calls,
            s.default_tokens,
            CLASS_TOKENS,
            per,
        )
