"""API keys: one generated key per `apikey:<name>` actor, kept only in a Kubernetes Secret, and the SecurityPolicy
that turns a verified key into that actor's `x-actor-id` on the API-key listener."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_random as random
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.core.v1 import Secret

from components.k8s import custom_resource
from core.identity import API_KEYS, parse_actor_id
from core.manifests import (
    ACTOR_ID_ANNOTATION,
    API_KEY_LENGTH,
    api_key_client_id,
    api_key_policy_manifest,
    api_key_secret_name,
    common_labels,
)
from core.settings import StackSettings


class ApiKeys(pulumi.ComponentResource):
    """Per API-key actor a `RandomPassword` and a Secret; the API-key listener's SecurityPolicy over them all.

    A key changes only when its actor's counter in `identity.apiKeys.rotations` does (the password's keepers), so a
    `pulumi up` never rotates a key by accident. `keys` holds each actor's key as a Pulumi secret, for the stack
    output; the keys appear nowhere else but in their Secrets.
    """

    keys: dict[str, pulumi.Output[str]]
    secrets: dict[str, Secret]
    policy: CustomResource

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        crds: Sequence[pulumi.Resource] = (),
        namespace: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("agent-budgets:identity:ApiKeys", name, None, opts)
        self.keys = {}
        self.secrets = {}
        rotations = settings.identity.api_keys.rotations
        for actor in settings.actors_of(API_KEYS):
            key_name = parse_actor_id(actor).name
            password = random.RandomPassword(
                f"{name}-{key_name}",
                length=API_KEY_LENGTH,
                special=False,
                keepers={"rotation": str(rotations.get(actor, 0))},
                opts=pulumi.ResourceOptions(parent=self),
            )
            key = pulumi.Output.secret(password.result)
            self.keys[actor] = key
            # Envoy Gateway reads every data key of the Secret as a client id, its value as that client's key.
            self.secrets[actor] = Secret(
                f"{name}-{key_name}-secret",
                metadata={
                    "name": api_key_secret_name(actor),
                    "namespace": settings.gateway.namespace,
                    "labels": common_labels(),
                    "annotations": {ACTOR_ID_ANNOTATION: actor},
                },
                type="Opaque",
                string_data={api_key_client_id(actor): key},
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(namespace)),
            )
        self.policy = custom_resource(
            api_key_policy_manifest(settings), self, [*crds, *namespace, *self.secrets.values()]
        )
        self.register_outputs({"actors": sorted(self.keys)})
