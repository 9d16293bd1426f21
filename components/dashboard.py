"""The Grafana dashboard as a ConfigMap that Grafana's dashboard sidecar loads, when `monitoring.dashboard` is on.

The dashboard itself is built by `core.dashboard` (pure, with grafana-foundation-sdk). A ConfigMap is a core
kind, so the resource needs no CRD; it waits for the gateway namespace when it lives there (another
`monitoring.dashboardNamespace` must already exist).
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
from pulumi_kubernetes.core.v1 import ConfigMap

from core.budget_rules import BudgetRules
from core.dashboard import CONFIG_MAP_NAME, DASHBOARD_UID, dashboard_config_map_data, dashboard_namespace
from core.manifests import common_labels
from core.settings import StackSettings


class Dashboard(pulumi.ComponentResource):
    """The budgets' Grafana dashboard in a ConfigMap labelled for the sidecar (`monitoring.dashboardLabels`)."""

    config_map: ConfigMap

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        rules: BudgetRules,
        namespace: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("agent-budgets:monitoring:Dashboard", name, None, opts)
        target = dashboard_namespace(settings)
        waits_for = list(namespace) if target == settings.gateway.namespace else []
        metadata = {
            "name": CONFIG_MAP_NAME,
            "namespace": target,
            "labels": {**common_labels(), **settings.monitoring.dashboard_labels},
        }
        self.config_map = ConfigMap(
            f"{name}-config-map",
            metadata=metadata,
            data=dashboard_config_map_data(settings, rules),
            opts=pulumi.ResourceOptions(parent=self, depends_on=waits_for),
        )
        self.register_outputs({"configMap": f"{target}/{CONFIG_MAP_NAME}", "uid": DASHBOARD_UID})
