"""Budgets: the JWT SecurityPolicy that names the actor (when a JWT source is on), and the one policy holding every
budget rule."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource

from components.k8s import custom_resource
from core.budget_rules import BudgetRules
from core.manifests import budget_policy_manifest, jwt_policy_manifest
from core.settings import StackSettings


class Budgets(pulumi.ComponentResource):
    """SecurityPolicy (JWT → x-actor-id) and BackendTrafficPolicy (a bucket per actor).

    A stack of API keys alone has no JWT policy: its callers are named by the API-key listener's policy
    (components.api_keys).
    """

    jwt_policy: CustomResource | None
    budget_policy: CustomResource

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        rules: BudgetRules,
        crds: Sequence[pulumi.Resource] = (),
        jwks_sources: Sequence[pulumi.Resource] = (),
        rate_limit_store: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("agent-budgets:budgets:Budgets", name, None, opts)
        self.jwt_policy = None
        if settings.identity.jwt_sources:
            self.jwt_policy = custom_resource(jwt_policy_manifest(settings), self, [*crds, *jwks_sources])
        # Without the store, the rate-limit service cannot count: wait for it.
        self.budget_policy = custom_resource(budget_policy_manifest(settings, rules), self, [*crds, *rate_limit_store])
        self.register_outputs({"rules": rules.summary()})
