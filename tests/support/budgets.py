"""A compiled budget layout with every feature the counter keys depend on, for the tests that hold a fast path
to the rate-limit model's own evaluation (the spend plan, the model's lookup of literal patterns)."""

from __future__ import annotations

from core.budget_rules import BudgetRules, compile_budget_rules
from core.settings import BudgetsConfig

ATESPACES = ("agents", "lab", "team-x")
WINDOWS = ("Minute", "Hour", "Day", "Week", "Month")


def rich_layout() -> tuple[list[str], BudgetRules, set[str]]:
    """1,200 actors in three atespaces: 14 classes (one retired, emptied), budgets of one to three limits in
    tokens and usd over several windows, limitSlots 3 (so reserved slots), class members spread over several
    exclusion slots, and suspended actors both in classes and in the default budget.

    Returns the actors, the compiled rules and the suspended actors.
    """
    actors = [f"{ATESPACES[n % 3]}/actor-{n:04d}" for n in range(1200)]
    classes = []
    for c in range(14):
        limits: list[dict[str, object]] = [{"tokens": 1000 * (c + 1), "per": WINDOWS[c % 5]}]
        if c % 2:
            limits.append({"usd": 5 + c, "per": WINDOWS[(c + 2) % 5]})
        if c % 3 == 0:
            limits.append({"tokens": 50_000 + c, "per": "Year"})
        members = [] if c == 6 else actors[c * 37 : c * 37 + 30]
        classes.append({"name": f"class-{c:02d}", "limits": limits, "actors": members})
    budgets = BudgetsConfig.model_validate(
        {"default": {"limits": [{"tokens": 500, "per": "Day"}, {"usd": 2, "per": "Hour"}]}, "classes": classes}
    )
    rules = compile_budget_rules(budgets, exclusion_slots=12, limit_slots=3)
    suspended = {actor for n, actor in enumerate(actors) if n % 97 == 0}
    return actors, rules, suspended


def classes_layout(
    actors: list[str], classes: int, member_share: float, default_tokens: int, class_tokens: int
) -> dict[str, object]:
    """`agent-budgets:budgets` with the first `member_share` of `actors` spread evenly over `classes` classes
    (`class-000`, ... with `class_tokens + c` tokens a Day), everyone else on `default_tokens` a Day: the layout
    the benchmarks size their stacks with."""
    members = actors[: int(len(actors) * member_share)]
    per_class = max(1, len(members) // classes)
    return {
        "default": {"tokens": default_tokens, "per": "Day"},
        "classes": [
            {
                "name": f"class-{c:03d}",
                "tokens": class_tokens + c,
                "per": "Day",
                "actors": members[c * per_class : (c + 1) * per_class],
            }
            for c in range(classes)
        ],
    }


MIXED_MODELS = ("gpt-4.1", "gpt-4.1-mini", "claude-3.5:sonnet")
"""The models the mixed layout's per-model limits name (with `.` and `:`, which their patterns escape), and a probe
of each for the oracles; a request naming no model, or another one, is probed too."""


def mixed_layout() -> tuple[list[str], BudgetRules, set[str], list[str]]:
    """Actors of all three identity sources in one layout: Substrate actors in three atespaces (one named `apikey`,
    one `actor`), service accounts (namespaces that share those names, names with `.`), API keys (one named like an
    atespace); classes mixing the sources, per-model limits (Exact and an alternation of escaped names), pools of a
    whole atespace, of listed members of every source, and a retired one; limitSlots 3, classSlots 4, exclusion
    slots over several packed chunks, suspended actors of every source.

    Returns the actors, the compiled rules, the suspended actors and near misses: `x-actor-id` values no actor has
    but that sit next to the listed ones (another source's form of the same names, a pool atespace's look-alikes).
    """
    substrate = [f"{space}/bot-{n:03d}" for space in ("agents", "apikey", "actor") for n in range(40)]
    accounts = [f"serviceaccount:{ns}/sa-{n:03d}" for ns in ("agents", "apikey", "ml") for n in range(30)]
    accounts += ["serviceaccount:agents/research.bot", "serviceaccount:actor/bot-001"]
    accounts += [f"serviceaccount:ml/trainer.with-a-long-name-{n:03d}" for n in range(60)]  # several exclusion slots
    keys = [f"apikey:key-{n:03d}" for n in range(40)] + ["apikey:agents", "apikey:bot-001"]
    actors = substrate + accounts + keys
    classes = [
        {
            "name": "mixed",
            "limits": [{"tokens": 9000, "per": "Hour"}, {"usd": 3, "per": "Day", "models": list(MIXED_MODELS[:2])}],
            "actors": [substrate[1], accounts[1], keys[1], "serviceaccount:agents/research.bot"],
        },
        {
            "name": "keys",
            "limits": [{"calls": 50, "per": "Minute", "models": [MIXED_MODELS[2]]}],
            "actors": keys[10:30],
        },
        {"name": "accounts", "tokens": 700, "per": "Day", "actors": accounts[5:60:3] + accounts[-60:-33]},
        {"name": "trainers", "tokens": 800, "per": "Day", "actors": accounts[-33:-1]},
    ]
    pools = [
        {"name": "whole", "atespaces": ["agents", "apikey"], "limits": [{"usd": 50, "per": "Day"}]},
        {
            "name": "listed",
            "members": [substrate[90], accounts[2], accounts[40], keys[3], "apikey:agents"],
            "atespaces": ["actor"],
            "limits": [
                {"tokens": 1000, "per": "Hour", "count": "output"},
                {"calls": 9, "per": "Minute", "models": [MIXED_MODELS[0]]},
            ],
        },
        {"name": "retired", "limits": [{"tokens": 1, "per": "Day"}]},
    ]
    budgets = BudgetsConfig.model_validate(
        {
            "default": {
                "limits": [
                    {"tokens": 500, "per": "Day"},
                    {"usd": 2, "per": "Hour", "models": list(MIXED_MODELS)},
                    {"tokens": 90, "per": "Hour", "count": "input", "models": [MIXED_MODELS[1]]},
                ]
            },
            "classes": classes,
            "pools": pools,
        }
    )
    rules = compile_budget_rules(budgets, exclusion_slots=6, limit_slots=3, class_slots=4)
    suspended = {actor for n, actor in enumerate(actors) if n % 11 == 0}
    near = ["system:serviceaccount:agents:bot-000", "actor/agents/sa-000", "apikey.bot-000", "actor/agents"]
    near += ["actor/agents/", "actor/agents/a/b", "actor/apikey/key-000", "system:serviceaccount:apikey:key-000"]
    near += ["apikey.apikey", "actor/actor/sa-000", "actor/ml/x", "system:serviceaccount:actor:bot-000"]
    near += ["system:serviceaccount:agents:research", "system:serviceaccount:agents:researchxbot", "apikey.Agents"]
    return actors, rules, suspended, near
