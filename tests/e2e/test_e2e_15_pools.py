"""Check 15: a pool of actor-a and actor-b on top of their default budget, and a per-model limit on the second
model route (stack config + `pulumi up`, then restored). actor-b calls that model until its per-model limit
refuses it while its default budget has room, then another model once; actor-a, with its own budget almost
untouched, gets one call before the pool both share refuses it. The rule indexes come from the program's own
compilation of the changed budgets; the pool's counter is read by its rule (it holds no actor id)."""

import json

import pytest

from core.budget_rules import compile_budget_rules
from core.settings import BudgetPolicySettings, BudgetsConfig
from tests.e2e.conftest import require_pulumi_cli
from tests.e2e.e2elib.checks import admitted_calls, judge_pool, pool_check_limits
from tests.e2e.e2elib.stack import UNSET, stack_changes

pytestmark = [pytest.mark.e2e, pytest.mark.agents(2)]

CHECK = 15


def test_a_pool_and_a_per_model_limit(env, report, agents):
    require_pulumi_cli(CHECK)
    s = env.settings
    per = s.tokens_per_call
    actor_a, actor_b = agents
    model_limit, pool_limit = pool_check_limits(per)
    budgets = env.stack.get_value("budgets")
    policy = env.stack.get_value("budgetPolicy")
    policy = {} if policy is UNSET else dict(policy)
    default = budgets["default"]
    limits = list(default["limits"]) if "limits" in default else [{"tokens": default["tokens"], "per": default["per"]}]
    with report(CHECK) as v:
        if not v.expect(len(s.models) >= 2, f"the dev stack has one model ({s.models[0]}): the check needs two"):
            return
        large = s.models[1]
        pool = {
            "name": "pair",
            "members": [s.actor_id(actor_a), s.actor_id(actor_b)],
            "limits": [{"tokens": pool_limit, "per": s.default_per}],
        }
        pools = [*(budgets.get("pools") or []), pool]
        changed = {
            **budgets,
            "default": {"limits": [*limits, {"tokens": model_limit, "per": s.default_per, "models": [large]}]},
            "pools": pools,
        }
        layout = {
            **policy,
            "limitSlots": max(policy.get("limitSlots", 1), len(limits) + 1),
            # Pools come after the class blocks: room for every class the stack has, so no class counter moves.
            "classSlots": max(policy.get("classSlots", 0), len(budgets.get("classes") or [])),
        }
        changes = {"budgetPolicy": layout, "budgets": changed}
        # Which rules count what: the program's own compilation of the changed budgets.
        settings = BudgetPolicySettings.model_validate(layout)
        compiled = compile_budget_rules(
            BudgetsConfig.model_validate(changed), settings.exclusion_slots, settings.limit_slots, settings.class_slots
        )
        own = compiled.rules_for_actor(s.actor_id(actor_b))
        rules = {
            "default": own[0].index,
            "model": own[len(limits)].index,
            "pool": compiled.rules_of_pool(len(pools) - 1)[0].index,
        }
        with stack_changes(env.stack, changes, env.settle_policy):
            v.note(f"stack config: budgetPolicy = {json.dumps(layout)}; budgets = {json.dumps(changed)}")
            v.note(env.fresh_buckets())
            v.note(f"the pool's counters deleted first: {env.counters.clear_rule(s.domain, rules['pool'])} key(s)")
            model_calls = env.run_calls(
                actor_b, admitted_calls(model_limit, per) + 1, charge_per_call=2 * per, model=large
            )
            [other_call] = env.run_calls(actor_b, 1, model=s.models[0])
            pool_calls = env.run_calls(actor_a, 2, model=s.models[0])
            readings = env.counters.read([env.subject(actor_a), env.subject(actor_b)])
            by_rule_a = readings[env.subject(actor_a)].by_rule(s.domain)
            by_rule_b = readings[env.subject(actor_b)].by_rule(s.domain)
            counters = {
                "a default": by_rule_a.get(rules["default"], 0),
                "b default": by_rule_b.get(rules["default"], 0),
                "b model": by_rule_b.get(rules["model"], 0),
                "pool": env.counters.rule_total(s.domain, rules["pool"]),
            }
        v.note("stack config restored; pulumi up done")
        judge_pool(
            v,
            f"pool pair: {s.actor_id(actor_a)} and {s.actor_id(actor_b)} at {pool_limit} tokens/{s.default_per}; "
            f"default {s.default_tokens} each, of which {model_limit} on {large}",
            (env.subject(actor_a), env.subject(actor_b)),
            model_calls,
            other_call,
            pool_calls,
            per,
            s.default_tokens,
            rules,
            counters,
        )
