"""Print the figures of docs/message-size.md, computed with the real rule compiler and size model.

    venv/bin/python scripts/measure_exclusion_slots.py             # what `budgetPolicy.exclusionSlots` costs
    venv/bin/python scripts/measure_exclusion_slots.py --examples  # bytes per model route of example stacks,
                                                                   # and what one suspended actor adds

`make docs` (scripts/gen_docs.py) writes both into docs/message-size.md, between its GENERATED markers;
tests/test_generated_docs.py fails while the page holds anything else.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.budget_rules import (  # noqa: E402
    BudgetRules,
    BudgetSpec,
    LimitSpec,
    compile_budget_rules,
    compile_rules,
    pack_actors,
)
from core.identity import actor_header_value  # noqa: E402
from core.manifests import BUDGET_POLICY_NAME, JWT_PROVIDER_NAME  # noqa: E402
from core.ratelimit_model import rules_for_actor  # noqa: E402
from core.settings import (  # noqa: E402
    EXTENSION_MESSAGE_LIMIT_DEFAULT,
    PROJECT,
    BudgetsConfig,
    message_size_bytes,
)
from core.suspension import suspension_authorization  # noqa: E402
from core.validation import validate_stack  # noqa: E402
from core.xds_size import (  # noqa: E402
    GRPC_DEFAULT_MAX_MESSAGE,
    authorization_route_bytes,
    model_names_that_fit,
    rate_limit_domains,
)
from tools.spend.stack import load_stack  # noqa: E402

SLOT_SAMPLE_ACTOR = "agents/actor-00001"
"""A default-budget actor whose counter key is measured (names like this one, 11 characters)."""
SAMPLE_WINDOW_START = 1_767_225_600
"""2026-01-01T00:00:00Z: a window start with as many digits as any this decade."""


@dataclass(frozen=True)
class SlotCost:
    """What `budgetPolicy.exclusionSlots` costs, measured on the compiled default rule."""

    slots: int
    route_bytes: int
    """Rate-limit bytes on each model route with no class at all (every slot holds the match-nothing
    pattern): the floor the slot count sets."""
    counter_key_bytes: int
    """Length of one default-budget actor's Redis counter key: every slot adds its descriptor entry."""
    members_capacity: int
    """Class members the slots can exclude, for ids like agents/actor-00042."""


def exclusion_slot_cost(
    slots: int, policy_namespace: str = "agent-budgets", policy_name: str = "agent-budgets"
) -> SlotCost:
    """Measure one slot count with the real rule compiler and counter-key model."""
    budgets = BudgetsConfig.model_validate({"default": {"tokens": 500, "per": "Day"}})
    specs = compile_budget_rules(budgets, slots).specs()
    [applied] = rules_for_actor(policy_namespace, policy_name, specs, actor_header_value(SLOT_SAMPLE_ACTOR))
    members = [f"agents/actor-{n:05d}" for n in range(200 * slots)]
    chunks = pack_actors(members)
    capacity = sum(len(chunk) for chunk in chunks[:slots])
    return SlotCost(
        slots=slots,
        route_bytes=sum(rate_limit_domains(policy_namespace, policy_name, specs).values()),
        counter_key_bytes=len(applied.counter_key(SAMPLE_WINDOW_START)),
        members_capacity=capacity,
    )


SLOT_COUNTS = (8, 16, 32, 64, 127)
ACTORS = 10_000
PROVIDERS = 2
"""The model names column assumes two providers (their clusters are an allowance of the message)."""
SUSPENDED_SAMPLE = 100


def table() -> str:
    """The Markdown table: one row per slot count."""
    lines = [
        "| exclusionSlots | rate-limit bytes per model route (no class) | default counter key | "
        f"keys of {ACTORS:,} default actors, one window | class members it can exclude |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for slots in SLOT_COUNTS:
        cost = exclusion_slot_cost(slots)
        lines.append(
            f"| {slots} | {cost.route_bytes:,} B | {cost.counter_key_bytes:,} B | "
            f"{cost.counter_key_bytes * ACTORS / 1_000_000:.1f} MB | about {cost.members_capacity:,} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class Example:
    """One example configuration: what it is, and its compiled rules in its policy's namespace."""

    name: str
    rules: BudgetRules
    namespace: str = PROJECT


def _tokens(amount: int, per: str) -> LimitSpec:
    return LimitSpec("tokens", amount, per)


def _usd(amount: str, per: str) -> LimitSpec:
    return LimitSpec("usd", Decimal(amount), per)


def _stack_example(stack: str) -> Example:
    """The stack file as the program validates and compiles it (secrets count as set: none is read here)."""
    validated = validate_stack(load_stack(ROOT, stack).raw, lambda key: (True, True))
    return Example(f"the {stack} stack (`Pulumi.{stack}.yaml`)", validated.rules, validated.settings.gateway.namespace)


def _classes(count: int, size: int, limits: tuple[LimitSpec, ...]) -> list[BudgetSpec]:
    actors = [f"agents/agent-{n:05d}" for n in range(count * size)]
    return [
        BudgetSpec(f"class-{c:03d}", limits, tuple(actors[c * size : (c + 1) * size]), f"budgets.classes[{c}]")
        for c in range(count)
    ]


def examples() -> list[Example]:
    """The stacks of this repository, then budgets that show how limits, classes and members add up."""
    three = (_tokens(600, "Hour"), _tokens(5_000, "Day"), _usd("5", "Month"))
    two = (_tokens(100_000, "Day"), _usd("50", "Month"))
    return [
        _stack_example("dev"),
        _stack_example("prod"),
        Example(
            "the default budget with three limits (tokens per Hour and Day, usd per Month)",
            compile_rules(BudgetSpec("default", three), [], exclusion_slots=32, limit_slots=3),
        ),
        Example(
            f"{ACTORS:,} actors in 250 classes of 40, one limit each",
            compile_rules(BudgetSpec("default", two[:1]), _classes(250, 40, two[:1]), exclusion_slots=127),
        ),
        Example(
            f"{ACTORS:,} actors in 125 classes of 80, two limits each (tokens per Day, usd per Month)",
            compile_rules(BudgetSpec("default", two), _classes(125, 80, two), exclusion_slots=127, limit_slots=2),
        ),
    ]


def route_bytes(example: Example) -> int:
    """The rate-limit bytes the example's rules add to each model route."""
    return sum(rate_limit_domains(example.namespace, BUDGET_POLICY_NAME, example.rules.specs()).values())


def examples_table() -> str:
    """The Markdown table of the examples: budgets, limits, rules, bytes per model route, model names that fit."""
    limit = message_size_bytes(EXTENSION_MESSAGE_LIMIT_DEFAULT)
    assert limit is not None
    lines = [
        "| example | budgets | limits | rules (with reserved slots) | exclusionSlots | rate-limit bytes per model "
        f"route | model names within {EXTENSION_MESSAGE_LIMIT_DEFAULT} (our default) | within 4Mi (gRPC's, "
        "when unset) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for example in examples():
        rules = example.rules
        budgets = len({(rule.budget_index, rule.pool_index) for rule in rules.limit_rules})  # budgets and pools
        size = route_bytes(example)
        lines.append(
            f"| {example.name} | {budgets:,} | {len(rules.limit_rules):,} | {len(rules.rules):,} | "
            f"{rules.exclusion_slots} | {size:,} B | {model_names_that_fit(size, limit, PROVIDERS):,} | "
            f"{model_names_that_fit(size, GRPC_DEFAULT_MAX_MESSAGE, PROVIDERS):,} |"
        )
    return "\n".join(lines)


def suspension_bytes_per_actor() -> int:
    """What one more suspended actor adds to every Envoy route, for ids like agents/actor-0001 (the average
    over SUSPENDED_SAMPLE actors beyond the first, whose rule and default action cost a little more)."""
    actors = [f"agents/actor-{n:04d}" for n in range(SUSPENDED_SAMPLE + 1)]
    first = authorization_route_bytes(suspension_authorization(actors[:1], JWT_PROVIDER_NAME))
    many = authorization_route_bytes(suspension_authorization(actors, JWT_PROVIDER_NAME))
    return round((many - first) / SUSPENDED_SAMPLE)


def suspension_line() -> str:
    """The sentence docs/message-size.md holds about suspensions."""
    return (
        f"Each suspended actor adds about {suspension_bytes_per_actor():,} bytes to every Envoy route, for ids "
        "like `agents/actor-0001`."
    )


def blocks() -> dict[str, str]:
    """Every GENERATED block of docs/message-size.md, by name."""
    return {
        "exclusion-slot-table": table(),
        "message-size-examples": examples_table(),
        "suspension-cost": suspension_line(),
    }


def main(argv: list[str] | None = None) -> int:
    """Print the exclusion-slot table, or with --examples the examples and the cost of a suspension."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", action="store_true", help="the examples table and the suspension cost")
    args = parser.parse_args(argv)
    print(f"{examples_table()}\n\n{suspension_line()}" if args.examples else table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
