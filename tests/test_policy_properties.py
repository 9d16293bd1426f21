"""The policy pack never fails with a traceback: property-based tests of every rule on malformed resources.

A preview runs the pack on every resource of the stack, whatever declared it, so a rule meets objects it did not
expect: fields missing, of another type, nested one level too deep or too shallow, values unknown during preview.
The resources are the ones the program registers for each stack file (as tests/test_policy_pack.py captures them,
seen through the engine's proxy), one of them mutated by tests/support/mutations.py, unknown values among the
replacements. Every rule, resource and stack alike, must end normally, reporting violations (non-empty text) or
none, as docs/policy-pack.md documents; an exception would fail the preview with the analyzer's traceback instead
of a message.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from pulumi_policy import ResourceValidationPolicy
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

from policy import rules
from tests.support.mutations import mutated
from tests.support.properties import examples, explore_deadline
from tests.test_policy_pack import STACKS, Captured, captured, validate


@st.composite
def malformed_stacks(draw: st.DrawFn) -> tuple[str, list[Captured], int]:
    """A stack's resources with one of them (its index is the third item) mutated 1 to 4 times."""
    stack = draw(st.sampled_from(STACKS))
    resources = captured(stack)
    index = draw(st.integers(min_value=0, max_value=len(resources) - 1))
    target = resources[index]
    done, target.inputs = draw(mutated(target.inputs, extra_values=st.just(UNKNOWN_STRING_VALUE)))
    note(f"stack {stack}; {target.type} {target.name}: {done}")
    return stack, resources, index


@settings(
    max_examples=examples(60),
    deadline=explore_deadline(10_000),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(malformed_stacks())
def test_every_rule_meets_malformed_resources_with_messages_only(malformed: tuple[str, list[Captured], int]) -> None:
    """A resource rule sees one resource at a time, so it meets the mutated one here; on the others it gives what
    it gives on the program's own resources, where tests/test_policy_pack.py requires no violation of every rule
    for every stack. A stack rule sees them all."""
    stack, resources, index = malformed
    for policy in rules.POLICIES:
        note(f"rule {policy.name}")
        seen = [resources[index]] if isinstance(policy, ResourceValidationPolicy) else resources
        violations = validate(policy, stack, seen)
        assert all(isinstance(message, str) and message.strip() for message in violations), violations
