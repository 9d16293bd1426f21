"""Monitoring: the PrometheusRule with two alerts per budget and the USD recording rules, and the PodMonitors that
feed them, when `monitoring.prometheusRules` is on.

The rule is built by `core.monitoring` (its recording rules by `core.recording_rules`), the PodMonitors by
`core.monitors` (all pure); their CRDs belong to
the Prometheus Operator, which the cluster must already run (this program does not install it), so the
resources wait only for the gateway namespace they live in. The per-actor metric attribute is a Helm value of
Agent Router (`core.platform_values.agent_router_values`), not a resource here.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource

from components.k8s import custom_resource
from core.budget_rules import BudgetRules
from core.monitoring import prometheus_rule_manifest
from core.monitors import pod_monitor_manifests
from core.settings import StackSettings


class Monitoring(pulumi.ComponentResource):
    """The budget alerts and USD recording rules as a PrometheusRule, and PodMonitors for the series they read."""

    prometheus_rule: CustomResource
    pod_monitors: list[CustomResource]

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
        monitors = pod_monitor_manifests(settings)
        self.pod_monitors = [custom_resource(monitor, self, namespace) for monitor in monitors]
        every_rule = [rule for group in manifest.spec["groups"] for rule in group["rules"]]
        self.register_outputs(
            {
                "prometheusRule": f"{manifest.namespace}/{manifest.name}",
                "alerts": sum(1 for rule in every_rule if "alert" in rule),
                "recordingRules": sum(1 for rule in every_rule if "record" in rule),
                "podMonitors": [f"{monitor.namespace}/{monitor.name}" for monitor in monitors],
            }
        )
