"""Names and values of the dev stack: scripts/versions.env, the Pulumi program's fixed names, and the stack's
own configuration (Pulumi.<stack>.yaml, validated like the program validates it).

Two dev environments exist, picked by `IDENTITY` as `make up` picks them: `substrate` (the default: the probe
agents are Substrate actors, reached through Substrate's ingress) and `kubernetes` (its own kind cluster and
stack; the probe agents are plain pods, each calling with its service-account token or its API key). The stack's
`identity.sources` then say which checks apply (tests/e2e/conftest.py)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from core import platform_values as platform
from core.identity import API_KEYS, JWT_SOURCES, KUBERNETES, SUBSTRATE, actor_header_value
from core.manifests import (
    API_KEY_LISTENER,
    BUDGET_POLICY_NAME,
    JWT_LISTENER,
    JWT_POLICY_NAME,
    MOCK_MODEL_NAME,
    MOCK_MODEL_PORT,
)
from core.settings import (
    ENVOY_GATEWAY_NAMESPACE,
    GATEWAY_HOSTNAME,
    GATEWAY_SERVICE_NAME,
    GatewaySettings,
    IdentitySettings,
    RedisSettings,
    StackSettings,
    SubstrateSettings,
)
from core.validation import parse_settings
from tools.spend.stack import load_stack, raw_config

_GATEWAY = GatewaySettings()
_DEFAULT_STACK = StackSettings.model_validate({"budgets": {"default": {"tokens": 1, "per": "Day"}}})
_REDIS = RedisSettings()
_SUBSTRATE = SubstrateSettings()
_IDENTITY = IdentitySettings()
IDENTITY_ENV = "IDENTITY"
"""How `make up` and `make e2e` pick the dev environment: `substrate` (default) or `kubernetes`."""
IDENTITY_MODES = ("substrate", "kubernetes")

ROOT = Path(__file__).resolve().parents[3]
VERSIONS_ENV = ROOT / "scripts" / "versions.env"

_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def parse_env_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines as scripts/versions.env writes them: comments, blank lines, optional quotes."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            raise ValueError(f"line {number}: expected KEY=VALUE, got {raw!r}")
        key, value = match.groups()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif value[:1] in ("'", '"'):
            raise ValueError(f"line {number}: unbalanced quote in {raw!r}")
        values[key] = value
    return values


@dataclass(frozen=True)
class Settings:
    """Everything the checks need to find the dev stack."""

    root: Path = ROOT
    kube_context: str = "kind-agent-budgets"
    atespace: str = "agents"
    demo_actors: tuple[str, ...] = ("actor-a", "actor-b")
    noegress_actor: str = "actor-noegress"
    actor_template: str = "probe-agent"
    probe_image: str = "localhost:5001/agent-budgets-probe:dev"
    pulumi_stack: str = "dev"
    pulumi_passphrase: str = "agent-budgets-dev"
    # Fixed by the Pulumi program (its defaults, which Pulumi.dev.yaml keeps): one source, the program.
    gateway_namespace: str = ENVOY_GATEWAY_NAMESPACE
    gateway_service: str = GATEWAY_SERVICE_NAME
    gateway_port: int = _GATEWAY.port
    gateway_host: str = GATEWAY_HOSTNAME
    policy_namespace: str = _GATEWAY.namespace
    policy_name: str = BUDGET_POLICY_NAME
    jwt_policy_name: str = JWT_POLICY_NAME
    redis_namespace: str = _REDIS.namespace
    redis_statefulset: str = platform.REDIS_NAME
    redis_pod: str = f"{platform.REDIS_NAME}-0"
    redis_secret: str = platform.REDIS_AUTH_SECRET
    redis_secret_key: str = platform.PASSWORD_KEY
    mock_namespace: str = _GATEWAY.namespace
    mock_service: str = MOCK_MODEL_NAME
    mock_port: int = MOCK_MODEL_PORT
    # From Pulumi.<stack>.yaml and the mock's settings (load_settings): never restated here. The defaults are
    # the program's own (one model route on the mock, its token count, no budget yet).
    models: tuple[str, ...] = tuple(_DEFAULT_STACK.routes[0].models)
    tokens_per_call: int = _DEFAULT_STACK.mock_model.total_tokens
    default_tokens: int = 0
    default_per: str = "Day"
    fail_closed: bool = _DEFAULT_STACK.rate_limit.fail_closed
    # Substrate.
    issuer: str = _SUBSTRATE.issuer
    audience: str = _SUBSTRATE.audience
    substrate_namespace: str = "ate-system"
    ingress_service: str = "atenet-router"
    ingress_port: int = 80
    # Identity sources: which dev environment (IDENTITY), and what the stack accepts.
    identity: str = "substrate"
    sources: tuple[str, ...] = tuple(_IDENTITY.sources)
    kubernetes_issuer: str = _IDENTITY.kubernetes.issuer
    kubernetes_audience: str = _IDENTITY.kubernetes.audience
    api_key_port: int = _IDENTITY.api_keys.port
    api_key_headers: tuple[str, ...] = tuple(_IDENTITY.api_keys.headers)
    # The Substrate-free environment's agents: plain pods in one namespace, each as its own service account.
    agent_namespace: str = "agents"
    api_key_agent: str = "actor-key"
    unlisted_agent: str = "actor-unlisted"

    @property
    def domain(self) -> str:
        """The rate-limit domain of the shared rules: <policy namespace>/<policy name>."""
        return f"{self.policy_namespace}/{self.policy_name}"

    @property
    def kubectl_ate(self) -> Path:
        return self.root / "build" / "bin" / "kubectl-ate"

    @property
    def on_substrate(self) -> bool:
        """Whether the probe agents are Substrate actors (else plain pods of the Substrate-free environment)."""
        return self.identity == "substrate"

    @property
    def listeners(self) -> tuple[tuple[str, int], ...]:
        """The Gateway's listeners as (name, port), as the program gives them for the stack's sources
        (core.manifests `gateway_listeners`): `http` with a JWT source, `apikeys` with API keys. Each is a port of the
        gateway Service (envoyproxy/gateway v1.9.0 internal/gatewayapi/listener.go: the service port is the
        listener's port)."""
        found: list[tuple[str, int]] = []
        if any(source in self.sources for source in JWT_SOURCES):
            found.append((JWT_LISTENER, self.gateway_port))
        if API_KEYS in self.sources:
            found.append((API_KEY_LISTENER, self.api_key_port))
        return tuple(found)

    @property
    def listed_agents(self) -> tuple[str, ...]:
        """The probe agents that are actors of the stack, each of which must answer before any check runs: the
        agents the checks call, of whichever source (conftest's `agents` fixture hands out the first ones)."""
        if self.on_substrate:
            return self.demo_actors if SUBSTRATE in self.sources else ()
        service_accounts = self.demo_actors if KUBERNETES in self.sources else ()
        return (*service_accounts, *((self.api_key_agent,) if API_KEYS in self.sources else ()))

    @property
    def all_actors(self) -> tuple[str, ...]:
        """Every probe agent the checks may call or count, listed in the stack or not."""
        if self.on_substrate:
            return (*self.demo_actors, self.noegress_actor)
        # `make up IDENTITY=kubernetes` runs the service-account agents only for a stack that accepts service
        # accounts, and the API-key agent only for one with API keys (scripts/up.sh `agent-pods`).
        unlisted = (self.unlisted_agent,) if KUBERNETES in self.sources else ()
        return (*self.listed_agents, *unlisted)

    @property
    def make_up(self) -> str:
        """The command that brings up this run's dev environment."""
        return "make up" if self.on_substrate else "make up IDENTITY=kubernetes"

    def actor_id(self, actor: str) -> str:
        """How `agent-budgets:actors` writes the probe agent `actor` (core.identity)."""
        if self.on_substrate:
            return f"{self.atespace}/{actor}"
        if actor == self.api_key_agent:
            return f"apikey:{actor}"
        return f"serviceaccount:{self.agent_namespace}/{actor}"

    def subject(self, actor: str) -> str:
        """The `x-actor-id` value of the probe agent `actor`'s verified calls."""
        return actor_header_value(self.actor_id(actor))

    def target(self, actor: str) -> str:
        """The ate-target-actor header value that routes ingress to an actor."""
        return f"{self.atespace}/{actor}"

    @property
    def token_issuer(self) -> str:
        """The issuer a forged token claims: Substrate's, or the cluster's where agents use service accounts."""
        return self.issuer if SUBSTRATE in self.sources else self.kubernetes_issuer

    @property
    def token_audience(self) -> str:
        return self.audience if SUBSTRATE in self.sources else self.kubernetes_audience


def read_stack_file(text: str) -> StackSettings:
    """The stack's validated settings from the text of `Pulumi.<stack>.yaml`, read as the spend report reads
    it (tools/spend/stack.py) and checked with `core.validation.parse_settings`."""
    return parse_settings(raw_config({}, yaml.safe_load(text) or {})[0])


def stack_values(stack: StackSettings) -> dict[str, object]:
    """What the checks need from the stack's settings: every model name, the mock's tokens per call, the
    default budget, the fail mode and the identity sources."""
    first = stack.budgets.default.limit_list()[0]  # the checks meter tokens: the default's first limit
    return {
        "models": tuple(model for route in stack.routes for model in route.models),
        "tokens_per_call": stack.mock_model.total_tokens,
        "default_tokens": first.tokens or 0,
        "default_per": first.per,
        "fail_closed": stack.rate_limit.fail_closed,
        "sources": tuple(stack.identity.sources),
        "kubernetes_issuer": stack.identity.kubernetes.issuer,
        "kubernetes_audience": stack.identity.kubernetes.audience,
        "api_key_port": stack.identity.api_keys.port,
        "api_key_headers": tuple(stack.identity.api_keys.headers),
        "gateway_port": stack.gateway.port,
    }


def identity_mode(environ: Mapping[str, str]) -> str:
    """`IDENTITY` as `make` passes it: `substrate` (default) or `kubernetes`; anything else is an error."""
    mode = environ.get(IDENTITY_ENV) or "substrate"
    if mode not in IDENTITY_MODES:
        raise ValueError(f"{IDENTITY_ENV}={mode!r}: use substrate (the default) or kubernetes")
    return mode


def stack_name(values: Mapping[str, str], identity: str) -> str:
    """The dev stack of an identity mode (scripts/versions.env, as scripts/lib.sh picks it)."""
    if identity == "kubernetes":
        return values.get("KUBERNETES_PULUMI_STACK", "dev-kubernetes")
    return values.get("PULUMI_STACK", Settings.pulumi_stack)


def settings_from_env(
    values: dict[str, str], root: Path = ROOT, stack: StackSettings | None = None, identity: str = "substrate"
) -> Settings:
    defaults = Settings(root=root)
    repo = values.get("PROBE_IMAGE_REPO", "localhost:5001/agent-budgets-probe")
    tag = values.get("PROBE_IMAGE_TAG", "dev")
    on_kubernetes = identity == "kubernetes"
    actor_key = "SERVICE_ACCOUNT_AGENTS" if on_kubernetes else "DEMO_ACTORS"
    actors = tuple(values.get(actor_key, " ".join(defaults.demo_actors)).split())
    if on_kubernetes:
        context = values.get("KUBERNETES_KUBE_CONTEXT", "kind-agent-budgets-kubernetes")
    else:
        context = values.get("KUBE_CONTEXT", defaults.kube_context)
    return Settings(
        root=root,
        kube_context=context,
        atespace=values.get("ATESPACE", defaults.atespace),
        demo_actors=actors,
        noegress_actor=values.get("NOEGRESS_ACTOR", defaults.noegress_actor),
        actor_template=values.get("ACTOR_TEMPLATE", defaults.actor_template),
        probe_image=f"{repo}:{tag}",
        pulumi_stack=stack_name(values, identity),
        pulumi_passphrase=values.get("PULUMI_DEV_PASSPHRASE", defaults.pulumi_passphrase),
        identity=identity,
        agent_namespace=values.get("AGENT_NAMESPACE", defaults.agent_namespace),
        api_key_agent=values.get("API_KEY_AGENT", defaults.api_key_agent),
        unlisted_agent=values.get("UNLISTED_AGENT", defaults.unlisted_agent),
        **(stack_values(stack) if stack is not None else {}),
    )


def load_settings(root: Path = ROOT, environ: Mapping[str, str] | None = None) -> Settings:
    """scripts/versions.env for names, Pulumi.<stack>.yaml (validated like the program does) for values; the
    stack is the one of `IDENTITY` (environ, default os.environ)."""
    identity = identity_mode(os.environ if environ is None else environ)
    values = parse_env_file((root / "scripts" / "versions.env").read_text(encoding="utf-8"))
    stack = parse_settings(load_stack(root, stack_name(values, identity)).raw)
    return settings_from_env(values, root, stack, identity)
