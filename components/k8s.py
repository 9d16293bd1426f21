"""Small helpers shared by the components: turning a pure Manifest into a Pulumi resource."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource

from core.manifests import Manifest


def custom_resource(
    manifest: Manifest,
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource] = (),
) -> CustomResource:
    """Declare a custom resource from its manifest; it waits for the release that installs its CRD."""
    return CustomResource(
        manifest.resource_name,
        api_version=manifest.api_version,
        kind=manifest.kind,
        metadata=manifest.metadata(),
        spec=manifest.spec,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )
