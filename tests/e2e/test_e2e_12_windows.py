"""Check 12: a class with two windows, 600 tokens per Hour and 5,000 per Day, at 200 tokens a call. Every
call charges both counters; the Hour limit admits 4 calls and refuses the 5th while the Day counter
(800) is far from its limit. budgetPolicy.limitSlots is raised to 2 for the check (the default budget's
block starts at rule 0 whatever the slots, so the default counters stay where they are) and restored.
"""

import json

import pytest

from core.budget_rules import compile_budget_rules
from core.settings import BudgetPolicySettings, BudgetsConfig
from tests.e2e.conftest import require_pulumi_cli
from tests.e2e.e2elib.checks import admitted_calls, judge_windows
from tests.e2e.e2elib.stack import stack_changes

pytestmark = [pytest.mark.e2e, pytest.mark.agents(1)]

SLOTS = 2
SMALL, LARGE = (600, "Hour"), (5000, "Day")


def test_the_smaller_window_refuses_first(env, report, agents):
    require_pulumi_cli(12)
    s = env.settings
    per = s.tokens_per_call
    [actor] = agents
    budgets = env.stack.get_value("budgets")
    classes = budgets.get("classes") or []
    windows = {
        "name": "windows",
        "limits": [{"tokens": SMALL[0], "per": SMALL[1]}, {"tokens": LARGE[0], "per": LARGE[1]}],
        "actors": [s.actor_id(actor)],
    }
    changes = {"budgetPolicy": {"limitSlots": SLOTS}, "budgets": {**budgets, "classes": [*classes, windows]}}
    # Which rules count the class's two limits: the program's own compilation of the changed budgets.
    policy = BudgetPolicySettings.model_validate(changes["budgetPolicy"])
    compiled = compile_budget_rules(BudgetsConfig.model_validate(changes["budgets"]), policy.exclusion_slots, SLOTS)
    small_rule, large_rule = (rule.index for rule in compiled.rules_for_actor(s.actor_id(actor)))
    with report(12) as v:
        with stack_changes(env.stack, changes, env.settle_policy):
            v.note(f"stack config: budgetPolicy.limitSlots = {SLOTS}; budgets.classes += {json.dumps(windows)}")
            v.note(env.fresh_buckets())
            calls = env.run_calls(actor, admitted_calls(SMALL[0], per) + 1, charge_per_call=2 * per)
            reading = env.counters.read([env.subject(actor)])[env.subject(actor)]
        v.note("stack config restored; pulumi up done")
        judge_windows(
            v,
            f"class windows: {s.actor_id(actor)} at {SMALL[0]} tokens/{SMALL[1]} and {LARGE[0]} tokens/{LARGE[1]}",
            env.subject(actor),
            calls,
            (small_rule, SMALL[0]),
            (large_rule, LARGE[0]),
            per,
            reading.by_rule(s.domain),
        )
