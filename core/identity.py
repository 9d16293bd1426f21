"""Who an actor is: how a stack names it in `agent-budgets:actors`, which identity source vouches for it, and the
`x-actor-id` value the gateway gives its verified calls (the value every budget rule, suspension, counter key
and metric keys on).

* `substrate`: written `<atespace>/<name>`; `x-actor-id: actor/<atespace>/<name>`, copied by the JWT filter
  from the `sub` of Substrate's actor JWT.
* `kubernetes`: written `serviceaccount:<namespace>/<name>`; `x-actor-id:
  system:serviceaccount:<namespace>:<name>`, copied by the JWT filter from the `sub` of a projected
  service-account token.
* `apiKeys`: written `apikey:<name>`; `x-actor-id: apikey.<name>`, written by the API-key filter from the
  client id of the key it verified.

Facts behind the values, each checked in upstream source:

* Substrate mints `sub = "actor/<atespace>/<name>"` (agent-substrate/substrate cmd/ateapi, `MintActorJWT`;
  scripts/up.sh checks the pinned checkout for it).
* Kubernetes signs service-account tokens with `sub = MakeUsername(namespace, name)` =
  `system:serviceaccount:<namespace>:<name>` (kubernetes pkg/serviceaccount/claims.go @031075d1 `Claims`;
  staging/src/k8s.io/apiserver/pkg/authentication/serviceaccount/util.go `MakeUsername`). A namespace is a DNS
  label and a ServiceAccount name a DNS subdomain (k8s.io/apimachinery pkg/api/validation/generic.go
  `ValidateNamespaceName`, `ValidateServiceAccountName`).
* Envoy Gateway's `apiKeyAuth` reads an Opaque Secret whose every data key is a client id and whose value is
  that client's key (envoyproxy/gateway v1.9.0 api/v1alpha1/api_key_auth_types.go); Envoy's api_key_auth
  filter writes the client id of the key it found into `forwardClientIDHeader` with `setCopy`, replacing any
  value the client sent (envoy source/extensions/filters/http/api_key_auth/api_key_auth.cc @03503b34). A
  Secret data key may hold only `[-._a-zA-Z0-9]` (k8s.io/apimachinery validation.go `IsConfigMapKey`).

The three sets of values are disjoint whatever the names: a Substrate value starts with `actor/`, a Kubernetes
value starts with `system:` and holds no `/`, an API-key value starts with `apikey.` and can hold neither `/`
nor `:`. So no caller of one source can ever be counted, suspended or reported as an actor of another.
No value holds `_` either, the separator of envoyproxy/ratelimit's Redis keys (src/limiter/cache_key.go).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from core.names import DNS_LABEL_MAX, DNS_SUBDOMAIN_MAX, LABEL_PAIR, is_dns_label, is_dns_subdomain
from core.problems import short

SourceName = Literal["substrate", "kubernetes", "apiKeys"]
SUBSTRATE: SourceName = "substrate"
KUBERNETES: SourceName = "kubernetes"
API_KEYS: SourceName = "apiKeys"
SOURCES: tuple[SourceName, ...] = (SUBSTRATE, KUBERNETES, API_KEYS)
JWT_SOURCES: tuple[SourceName, ...] = (SUBSTRATE, KUBERNETES)
"""The sources whose callers present a JWT (one provider each in the JWT SecurityPolicy)."""

SERVICE_ACCOUNT_ID_PREFIX = "serviceaccount:"
API_KEY_ID_PREFIX = "apikey:"
SUBSTRATE_SUBJECT_PREFIX = "actor/"
SERVICE_ACCOUNT_SUBJECT_PREFIX = "system:serviceaccount:"
API_KEY_CLIENT_PREFIX = "apikey."

JWT_PROVIDER_NAMES: dict[SourceName, str] = {SUBSTRATE: "agent-substrate", KUBERNETES: "kubernetes-service-accounts"}
"""The JWT provider of each JWT source in the SecurityPolicy: authorization rules name it (`principal.jwt.provider`)
and Envoy keeps each verified token's payload under it (envoyproxy/gateway v1.9.0 internal/xds/translator/jwt.go
`payload_in_metadata`)."""

SOURCE_TITLES: dict[SourceName, str] = {
    SUBSTRATE: "a Substrate actor",
    KUBERNETES: "a Kubernetes service account",
    API_KEYS: "an API-key actor",
}

ACTOR_ID_FORMS = (
    "<atespace>/<name> (a Substrate actor), serviceaccount:<namespace>/<name> (a Kubernetes service account) or "
    "apikey:<name> (an API key)"
)


class ActorIdError(ValueError):
    """An actor id that names no actor of any source; the message says how to write it."""


@dataclass(frozen=True, order=True)
class ActorRef:
    """One actor: its source, its group (atespace or namespace; empty for an API key) and its name."""

    source: SourceName
    group: str
    name: str

    @property
    def actor_id(self) -> str:
        """How `agent-budgets:actors` writes it."""
        if self.source == SUBSTRATE:
            return f"{self.group}/{self.name}"
        if self.source == KUBERNETES:
            return f"{SERVICE_ACCOUNT_ID_PREFIX}{self.group}/{self.name}"
        return f"{API_KEY_ID_PREFIX}{self.name}"

    @property
    def value_prefix(self) -> str:
        """What every `x-actor-id` value of this source starts with."""
        return _VALUE_PREFIXES[self.source]

    @property
    def separator(self) -> str:
        """What stands between the group and the name in the `x-actor-id` value ('' without a group)."""
        return _SEPARATORS[self.source]

    @functools.cached_property
    def header_value(self) -> str:
        """The `x-actor-id` value of this actor's verified calls (worked out once: `parse_actor_id` keeps the
        ref of each id, and the budget layout and the spend report ask for every actor's value)."""
        return f"{self.value_prefix}{self.group}{self.separator}{self.name}"


_VALUE_PREFIXES: dict[SourceName, str] = {
    SUBSTRATE: SUBSTRATE_SUBJECT_PREFIX,
    KUBERNETES: SERVICE_ACCOUNT_SUBJECT_PREFIX,
    API_KEYS: API_KEY_CLIENT_PREFIX,
}
_SEPARATORS: dict[SourceName, str] = {SUBSTRATE: "/", KUBERNETES: ":", API_KEYS: ""}


_PLACEHOLDER_GROUPS: dict[SourceName, str] = {SUBSTRATE: "<atespace>", KUBERNETES: "<namespace>", API_KEYS: ""}


def placeholder_ref(source: SourceName) -> ActorRef:
    """An actor of `source` with `<placeholders>` for its parts: how the pages and help texts spell each form."""
    return ActorRef(source, _PLACEHOLDER_GROUPS[source], "<name>")


def listed_forms() -> str:
    """Every source's form in `agent-budgets:actors`, in source order: `<atespace>/<name>`, ..."""
    return ", ".join(f"`{placeholder_ref(source).actor_id}`" for source in SOURCES)


def header_forms() -> str:
    """Every source's `x-actor-id` value, in source order: `actor/<atespace>/<name>`, ..."""
    return ", ".join(f"`{placeholder_ref(source).header_value}`" for source in SOURCES)


def _substrate(text: str) -> ActorRef | None:
    if LABEL_PAIR.fullmatch(text):
        atespace, name = text.split("/")
        return ActorRef(SUBSTRATE, atespace, name)
    return None


def _service_account(text: str) -> ActorRef:
    rest = text[len(SERVICE_ACCOUNT_ID_PREFIX) :]
    namespace, slash, name = rest.partition("/")
    if not slash or not is_dns_label(namespace) or not is_dns_subdomain(name):
        raise ActorIdError(
            f"{short(text)} is not a service-account actor: write serviceaccount:<namespace>/<name>, the namespace "
            f"a DNS label (at most {DNS_LABEL_MAX} lowercase letters, digits or '-') and the name a DNS subdomain (at "
            f"most {DNS_SUBDOMAIN_MAX}; '.' also allowed), e.g. serviceaccount:agents/research-bot"
        )
    return ActorRef(KUBERNETES, namespace, name)


def _api_key(text: str) -> ActorRef:
    name = text[len(API_KEY_ID_PREFIX) :]
    if not is_dns_label(name):
        raise ActorIdError(
            f"{short(text)} is not an API-key actor: write apikey:<name>, the name a DNS label (at most "
            f"{DNS_LABEL_MAX} lowercase letters, digits or '-'), e.g. apikey:ci-bot"
        )
    return ActorRef(API_KEYS, "", name)


def _hint(text: str) -> str:
    """How to write an id that looks like a header value or an unknown prefix."""
    if text.startswith(SUBSTRATE_SUBJECT_PREFIX):
        return f": that is a Substrate subject; write the actor as {short(text[len(SUBSTRATE_SUBJECT_PREFIX) :])}"
    if text.startswith(SERVICE_ACCOUNT_SUBJECT_PREFIX):
        namespace, _, name = text[len(SERVICE_ACCOUNT_SUBJECT_PREFIX) :].partition(":")
        written = f"{SERVICE_ACCOUNT_ID_PREFIX}{namespace}/{name}"
        return f": that is a service account's token subject; write the actor as {short(written)}"
    if text.startswith(API_KEY_CLIENT_PREFIX):
        name = text[len(API_KEY_CLIENT_PREFIX) :]
        return f": that is an API key's client id; write the actor as {short(API_KEY_ID_PREFIX + name)}"
    prefix, colon, _ = text.partition(":")
    if colon and "/" not in prefix:
        return f": {short(prefix + ':')} is not a source prefix (use serviceaccount: or apikey:)"
    return ""


@functools.lru_cache(maxsize=1 << 18)
def parse_actor_id(text: str) -> ActorRef:
    """The actor `text` names, or ActorIdError saying how to write it (one of `ACTOR_ID_FORMS`).

    Kept per id: validation, the egress settings, the budget layout and the spend report each ask about every
    actor, so a fleet's ids are parsed once (the ActorRef is frozen)."""
    if text.startswith(SERVICE_ACCOUNT_ID_PREFIX):
        return _service_account(text)
    if text.startswith(API_KEY_ID_PREFIX):
        return _api_key(text)
    found = _substrate(text)
    if found is not None:
        return found
    raise ActorIdError(
        f"{short(text)} is not an actor id{_hint(text)}. Write {ACTOR_ID_FORMS}; each part a DNS label of at most "
        f"{DNS_LABEL_MAX} lowercase letters, digits or '-' (a service-account name may also hold '.'), e.g. "
        "agents/actor-a"
    )


def actor_header_value(actor_id: str) -> str:
    """The `x-actor-id` value of the actor `actor_id` (a validated id: see `parse_actor_id`)."""
    return parse_actor_id(actor_id).header_value


def actor_source(actor_id: str) -> SourceName:
    """The identity source of the actor `actor_id`."""
    return parse_actor_id(actor_id).source


def parse_header_value(value: str) -> ActorRef | None:
    """The actor whose verified calls carry `x-actor-id: value`, or None when no source produces that value."""
    if value.startswith(SUBSTRATE_SUBJECT_PREFIX):
        return _substrate(value[len(SUBSTRATE_SUBJECT_PREFIX) :])
    if value.startswith(SERVICE_ACCOUNT_SUBJECT_PREFIX):
        namespace, colon, name = value[len(SERVICE_ACCOUNT_SUBJECT_PREFIX) :].partition(":")
        if colon and is_dns_label(namespace) and is_dns_subdomain(name):
            return ActorRef(KUBERNETES, namespace, name)
        return None
    if value.startswith(API_KEY_CLIENT_PREFIX):
        name = value[len(API_KEY_CLIENT_PREFIX) :]
        return ActorRef(API_KEYS, "", name) if is_dns_label(name) else None
    return None


def actors_of_source(actor_ids: Iterable[str], source: SourceName) -> list[str]:
    """The ids of `actor_ids` that name actors of `source`, in order."""
    return [actor for actor in actor_ids if actor_source(actor) == source]
