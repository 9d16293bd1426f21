"""Check 11: a class whose limit is in dollars. The mock reports 50 input and 150 output tokens a call; at
$401 and $1,000 per 1,000,000 tokens that is $0.17005, charged 171 mills (rounded up). A $1 limit
(1,000 mills) admits floor(1000 / 171) + 1 = 6 calls and refuses the 7th. The prices, the class and the
budgets are set through stack config and `pulumi up`, and restored afterwards even when the check fails.
"""

import json

import pytest

from tests.e2e.conftest import require_pulumi_cli
from tests.e2e.e2elib.checks import admitted_calls, judge_usd_limit
from tests.e2e.e2elib.money import MOCK_PRICE, mock_call_mills
from tests.e2e.e2elib.stack import UNSET, stack_changes

pytestmark = [pytest.mark.e2e, pytest.mark.agents(1)]

LIMIT_USD = 1
MILLS_PER_USD = 1000


def test_usd_limit_refuses_the_call_after_the_one_that_crosses_it(env, report, agents):
    require_pulumi_cli(11)
    s = env.settings
    [actor] = agents
    per_call = mock_call_mills(s.tokens_per_call)
    limit = LIMIT_USD * MILLS_PER_USD
    budgets = env.stack.get_value("budgets")
    money = {"name": "money", "usd": LIMIT_USD, "per": s.default_per, "actors": [s.actor_id(actor)]}
    changes = {
        "prices": {model: MOCK_PRICE for model in s.models},
        "budgets": {**budgets, "classes": [*(budgets.get("classes") or []), money]},
    }
    with report(11) as v:
        with stack_changes(env.stack, changes, env.settle_costs) as originals:
            v.note(f"stack config: prices = {json.dumps(changes['prices'])}; budgets.classes += {json.dumps(money)}")
            v.note(f"after pulumi up: {env.cost_reloads[-1]}")
            v.note(env.fresh_buckets())
            calls = env.run_calls(actor, admitted_calls(limit, per_call) + 1, charge_per_call=per_call)
            counter = env.counters.totals([env.subject(actor)])[env.subject(actor)]
        restored = {key: ("not set" if value is UNSET else "restored") for key, value in originals.items()}
        v.note(f"stack config restored ({restored}); pulumi up done; {env.cost_reloads[-1]}")
        judge_usd_limit(
            v,
            f"class money: {s.actor_id(actor)} at ${LIMIT_USD} per {s.default_per} = {limit} mills",
            env.subject(actor),
            calls,
            limit,
            per_call,
            s.tokens_per_call,
            counter,
        )
