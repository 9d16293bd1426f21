"""Monitoring: the PrometheusRule with two alerts per budget, when `monitoring.prometheusRules` is on.

The rule itself is built by `core.monitoring` (pure); its CRD belongs to the Prometheus Operator, which
the cluster must already run (this program does not install it), so the resource waits only for the
gateway namespace it lives in. The per-actor metric attribute is a Helm value of Agent Router
(`core.platform_values.agent_router_values`), not a resource here.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource

from components.k8s import custom_resource
from core.budget_rules import BudgetRules
from core.monitoring import prometheus_rule_manifest
from core.settings import StackSettings


class Monitoring(pulumi.ComponentResource):
    """The budget alerts as a PrometheusRule (monitoring.coreos.com/v1)."""

    prometheus_rule: CustomResource

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        rules: BudgetRules,
        namespace: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("agent-budgets:monitoring:Monitoring", name, None, opts)
        manifest = prometheus_rule_manifest(settings, rules, pulumi.get_stack())
        self.prometheus_rule = custom_resource(manifest, self, namespace)
        alerts = [rule["alert"] for group in manifest.spec["groups"] for rule in group["rules"]]
        self.register_outputs({"prometheusRule": f"{manifest.namespace}/{manifest.name}", "alerts": len(alerts)})
