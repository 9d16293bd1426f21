"""The in-cluster mock model: our own OpenAI-compatible server, reporting a fixed token count."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.apps.v1 import Deployment
from pulumi_kubernetes.core.v1 import ConfigMap, Service

from components.k8s import custom_resource
from core.manifests import (
    MOCK_MODEL_NAME,
    common_labels,
    mock_model_deployment_spec,
    mock_model_service_spec,
    provider_backend_manifest,
    provider_secret_name,
)
from core.settings import Provider, StackSettings

SERVER_SOURCE = Path(__file__).resolve().parents[1] / "mock_model" / "server.py"


class MockModel(pulumi.ComponentResource):
    """ConfigMap with the server, Deployment on python:3.12-alpine, Service, and the mock's Backend."""

    config_map: ConfigMap
    deployment: Deployment
    service: Service
    backend: CustomResource

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        provider: Provider,
        key_secret: Sequence[pulumi.Resource] = (),
        gateway_crds: Sequence[pulumi.Resource] = (),
        namespace: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("agent-budgets:models:MockModel", name, None, opts)
        source = SERVER_SOURCE.read_text(encoding="utf-8")
        ns = settings.gateway.namespace
        child = pulumi.ResourceOptions(parent=self, depends_on=list(namespace))
        metadata = {"name": MOCK_MODEL_NAME, "namespace": ns, "labels": common_labels()}
        self.config_map = ConfigMap(f"{name}-server", metadata=metadata, data={"server.py": source}, opts=child)
        self.deployment = Deployment(
            f"{name}-deployment",
            metadata=metadata,
            spec=mock_model_deployment_spec(settings, source, provider_secret_name(provider)),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*namespace, self.config_map, *key_secret]),
        )
        self.service = Service(f"{name}-service", metadata=metadata, spec=mock_model_service_spec(), opts=child)
        self.backend = custom_resource(provider_backend_manifest(settings, provider), self, [*gateway_crds, *namespace])
        self.register_outputs({"service": f"{MOCK_MODEL_NAME}.{ns}.svc.cluster.local"})
