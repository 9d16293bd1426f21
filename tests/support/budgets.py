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
