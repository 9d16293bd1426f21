"""Checks that need two or more keys, run even when other keys are wrong.

Every check reads the raw configuration through `ConfigView`, which fills in the defaults of keys a stack
leaves out, and skips only what it cannot judge: a class whose `actors` is not a list is not checked for
membership, but every other class still is. So one `pulumi preview` reports a bad `per` together with a
class member missing from `actors` and a route to a provider that does not exist.

To add a check: write `def check_x(view: ConfigView) -> Iterator[Problem]` (yield one Problem per finding,
keyed by the full path of the offending value) and append it to `CROSS_CHECKS`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from core import egress, money
from core.budget_rules import atespace_of
from core.config_messages import aliases, field_at, model_at
from core.identity import (
    API_KEYS,
    KUBERNETES,
    SOURCE_TITLES,
    SUBSTRATE,
    ActorIdError,
    ActorRef,
    SourceName,
    parse_actor_id,
)
from core.problems import PROJECT, Problem, short
from core.settings import (
    PROVIDER_DEFAULT_HOSTS,
    REDIS_EXTERNAL_ONLY,
    REDIS_IN_CLUSTER_ONLY,
    RedisSettings,
    StackSettings,
    redis_url_problem,
    version_tuple,
)

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "<missing>"})()


def _dump(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(by_alias=True, mode="json")
    if isinstance(value, list):
        return [_dump(item) for item in value]
    return value


@dataclass(frozen=True)
class ConfigView:
    """The configuration as written, with defaults where keys were left out, and which sections failed."""

    raw: Mapping[str, Any]
    failed: frozenset[str] = frozenset()
    _typed: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _remembered: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def remember(self, key: Any, compute: Callable[[], Any]) -> Any:
        """`compute()`, worked out once per view: several checks read the same list of every actor."""
        if key not in self._remembered:
            self._remembered[key] = compute()
        return self._remembered[key]

    def get(self, *path: str | int) -> Any:
        """The value at `path` (camelCase keys, list indexes), its default when left out, else MISSING."""
        node: Any = self.raw
        walked: list[str | int] = []
        for part in path:
            if isinstance(part, int):
                node = node[part] if isinstance(node, list) and 0 <= part < len(node) else MISSING
            elif isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, Mapping):
                info = field_at([*walked, part]) if model_at(walked) is not None else None
                node = (
                    MISSING
                    if info is None or info.is_required()
                    else _dump(info.get_default(call_default_factory=True))
                )
            else:
                node = MISSING
            walked.append(part)
        return node

    def entries(self, *path: str | int) -> list[tuple[int, Mapping[str, Any]]]:
        """The map entries of the list at `path`, with their index (other entries and non-lists: none)."""
        value = self.get(*path)
        if not isinstance(value, list):
            return []
        return [(index, entry) for index, entry in enumerate(value) if isinstance(entry, Mapping)]

    def strings(self, *path: str | int) -> list[tuple[int, str]] | None:
        """The strings of the list at `path` with their index, or None when `path` is not a list (read-only:
        the list is shared by every check that asks)."""

        def compute() -> list[tuple[int, str]] | None:
            value = self.get(*path)
            if not isinstance(value, list):
                return None
            return [(index, item) for index, item in enumerate(value) if isinstance(item, str)]

        return self.remember(("strings", path), compute)

    def typed(self, key: str) -> Any:
        """The validated value of top-level `key`, or None when that section has a field error."""
        if key in self.failed:
            return None
        if key not in self._typed:
            name = aliases(StackSettings)[key]
            info = StackSettings.model_fields[name]
            adapter: TypeAdapter[Any] = _adapter(name)
            raw = self.get(key)
            try:
                self._typed[key] = (
                    info.get_default(call_default_factory=True)
                    if raw is MISSING
                    else adapter.validate_python(raw, by_alias=True, by_name=False)
                )
            except ValidationError:
                self._typed[key] = None
        return self._typed[key]


@functools.cache
def _adapter(name: str) -> TypeAdapter[Any]:
    # Top-level fields carry no constraints of their own: their type holds every rule.
    return TypeAdapter(StackSettings.model_fields[name].annotation)


Check = Callable[[ConfigView], Iterator[Problem]]


def _name(entry: Mapping[str, Any]) -> Any:
    return entry.get("name")


def listing(names: list[str], most: int = 10) -> str:
    """Names for a message, each cut short and at most `most` of them: a message quotes the configuration, and a
    long list of long names would make every line of the report as long as the whole configuration."""
    shown = ", ".join(name if len(name) <= 80 else name[:77] + "..." for name in names[:most])
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return shown + more if shown else "none"


# ---------------------------------------------------------------------------------------------------------
# Actors and budgets


def _listed_actors(view: ConfigView) -> set[str] | None:
    """The actors of `actors`, or None when `actors` is not a list (its own error says so); read-only, shared."""

    def compute() -> set[str] | None:
        listed = view.strings("actors")
        return {actor for _, actor in listed} if listed is not None else None

    return view.remember("listed actors", compute)


def _repeated(items: Iterable[tuple[int, Any]]) -> dict[int, int]:
    """For each (index, value) whose value came before: index → the index where it first came."""
    first: dict[Any, int] = {}
    repeats: dict[int, int] = {}
    for index, value in items:
        if value in first:
            repeats[index] = first[value]
        else:
            first[value] = index
    return repeats


def check_actors_listed_once(view: ConfigView) -> Iterator[Problem]:
    """Each actor once: a second entry would be a second policy for the same actor in its shard."""
    actors = dict(view.strings("actors") or [])
    for index, first in _repeated(actors.items()).items():
        yield Problem(
            f"actors[{index}]", f"{short(actors[index])} is listed twice (also actors[{first}]): list each actor once"
        )


def _names_used_twice(view: ConfigView, path: tuple[str, ...], what: str) -> Iterator[Problem]:
    """One problem per entry of the list at `path` whose `name` an earlier entry already has."""
    names = {index: name for index, entry in view.entries(*path) if isinstance(name := _name(entry), str)}
    where, listed = ".".join(path), path[-1]
    for index, first in _repeated(names.items()).items():
        yield Problem(
            f"{where}[{index}].name",
            f"{short(names[index])} is used twice (also {listed}[{first}]): {what} names must be unique",
        )


def check_class_names_unique(view: ConfigView) -> Iterator[Problem]:
    """Class names are unique: they name the rule in outputs and documentation."""
    yield from _names_used_twice(view, ("budgets", "classes"), "class")


def check_class_members(view: ConfigView) -> Iterator[Problem]:
    """Every class member is in `actors`, and in at most one class (all matching rules apply)."""
    known = _listed_actors(view)
    owner: dict[str, str] = {}
    for class_index, entry in view.entries("budgets", "classes"):
        class_name = _name(entry) if isinstance(_name(entry), str) else f"classes[{class_index}]"
        for actor_index, actor in view.strings("budgets", "classes", class_index, "actors") or []:
            key = f"budgets.classes[{class_index}].actors[{actor_index}]"
            if known is not None and actor not in known:
                yield Problem(
                    key, f"{short(actor)} (class {short(class_name)}) is not in {PROJECT}:actors: add it there first"
                )
            if actor in owner:
                yield Problem(
                    key,
                    f"{short(actor)} is in class {short(owner[actor])} and class {short(class_name)}: an actor may be "
                    "in at most one class (every matching rule applies, so the smaller budget would win)",
                )
            else:
                owner[actor] = class_name


def check_pool_names_unique(view: ConfigView) -> Iterator[Problem]:
    """Pool names are unique: they name the pool's rules in outputs, alerts and the spend report."""
    yield from _names_used_twice(view, ("budgets", "pools"), "pool")


def check_pool_members(view: ConfigView) -> Iterator[Problem]:
    """Every listed pool member is in `actors`, once per pool (an actor may be in several pools)."""
    known = _listed_actors(view)
    for pool_index, entry in view.entries("budgets", "pools"):
        pool_name = _name(entry) if isinstance(_name(entry), str) else f"pools[{pool_index}]"
        members = view.strings("budgets", "pools", pool_index, "members") or []
        repeats = _repeated(members)
        for member_index, actor in members:
            key = f"budgets.pools[{pool_index}].members[{member_index}]"
            if known is not None and actor not in known:
                yield Problem(key, f"{actor!r} (pool {pool_name!r}) is not in {PROJECT}:actors: add it there first")
            if member_index in repeats:
                yield Problem(key, f"{actor!r} is listed twice (also members[{repeats[member_index]}]): list it once")


def pool_warnings(view: ConfigView) -> list[Problem]:
    """Pools that are accepted but probably not what was meant: an atespace no listed actor is in (its
    actors may come later, or the name is misspelled), and members an atespace of the pool already holds."""
    listed_atespaces = {atespace_of(actor) for actor in _listed_actors(view) or set()}
    warnings: list[Problem] = []
    for pool_index, _ in view.entries("budgets", "pools"):
        atespaces = dict(view.strings("budgets", "pools", pool_index, "atespaces") or [])
        for atespace_index, atespace in atespaces.items():
            if atespace not in listed_atespaces:
                warnings.append(
                    Problem(
                        f"budgets.pools[{pool_index}].atespaces[{atespace_index}]",
                        f"no actor of {PROJECT}:actors is in atespace {atespace!r}: the pool will charge its actors "
                        "once they exist, but check the spelling",
                    )
                )
        whole = set(atespaces.values())
        for member_index, actor in view.strings("budgets", "pools", pool_index, "members") or []:
            if atespace_of(actor) in whole:
                warnings.append(
                    Problem(
                        f"budgets.pools[{pool_index}].members[{member_index}]",
                        f"{actor!r} is in the pool already through atespace {atespace_of(actor)!r}: this entry "
                        "changes nothing (remove it)",
                    )
                )
    return warnings


def check_limit_models(view: ConfigView) -> Iterator[Problem]:
    """Every model a limit names is one agents can call: a `models` name of some route. A name that only a
    `modelNameOverride` sends upstream, or that no route serves, never reaches the rate-limit filter's
    `x-ai-eg-model` (it holds the name the agent sent; an unknown name is refused with `route-not-found`
    before any rate limit), so such a limit would never count anything."""
    if not isinstance(view.get("routes"), list):
        return
    served = {
        model for index, _ in view.entries("routes") for _, model in view.strings("routes", index, "models") or []
    }
    overrides = {
        str(route.get("modelNameOverride")): index
        for index, route in view.entries("routes")
        if isinstance(route.get("modelNameOverride"), str)
    }
    for where, limit in _limit_entries(view):
        models = limit.get("models")
        if not isinstance(models, list):
            continue
        for position, model in enumerate(models):
            if not isinstance(model, str) or model in served:
                continue
            if model in overrides:
                route = overrides[model]
                reason = (
                    f"routes[{route}] sends calls upstream as {model!r} (modelNameOverride), but the rate limit sees "
                    f"the name the agent sent: count the names of routes[{route}].models instead"
                )
            else:
                reason = (
                    "no route serves it, so no call can carry it (Agent Router refuses an unknown model before any "
                    f"limit counts): use a name of {PROJECT}:routes[].models, spelled exactly as agents send it"
                )
            yield Problem(f"{where}.models[{position}]", f"{model!r}: {reason}")


def check_suspended_actors(view: ConfigView) -> Iterator[Problem]:
    """Every suspended actor is in `actors`, listed once: a suspension names an actor the gateway knows."""
    known = _listed_actors(view)
    suspended = view.strings("suspended") or []
    repeats = _repeated(suspended)
    for index, actor in suspended:
        key = f"suspended[{index}]"
        if known is not None and actor not in known:
            yield Problem(
                key,
                f"{short(actor)} is not in {PROJECT}:actors: only a listed actor can be suspended. Add it to actors, "
                "or remove it here (an actor that is not listed has no egress policy and cannot call the gateway)",
            )
        if index in repeats:
            yield Problem(key, f"{short(actor)} is listed twice (also suspended[{repeats[index]}]): list it once")


# ---------------------------------------------------------------------------------------------------------
# Identity sources


def _sources(view: ConfigView) -> list[str] | None:
    """The enabled identity sources, or None when `identity.sources` is not a list (its own error says so)."""
    sources = view.get("identity", "sources")
    return [source for source in sources if isinstance(source, str)] if isinstance(sources, list) else None


def _parsed(actor: str) -> ActorRef | None:
    try:
        return parse_actor_id(actor)
    except ActorIdError:
        return None  # the field's own error says how to write it


def check_actor_sources(view: ConfigView) -> Iterator[Problem]:
    """Every actor is of an enabled identity source: one problem per source that is missing, at its first actor."""
    sources = _sources(view)
    if sources is None:
        return
    missing: dict[SourceName, list[tuple[int, str]]] = {}
    for index, actor in view.strings("actors") or []:
        ref = _parsed(actor)
        if ref is not None and ref.source not in sources:
            missing.setdefault(ref.source, []).append((index, actor))
    for source, found in missing.items():
        index, actor = found[0]
        more = f" and {len(found) - 1} more actor(s) of that source" if len(found) > 1 else ""
        yield Problem(
            f"actors[{index}]",
            f"{short(actor)}{more} is {SOURCE_TITLES[source]}, but {PROJECT}:identity.sources is "
            f"[{', '.join(sources)}]: add {source} to identity.sources (docs/identity.md), or remove the actor",
        )


def check_api_key_rotations(view: ConfigView) -> Iterator[Problem]:
    """A rotation counter belongs to an API-key actor of `actors` (a counter for nobody would rotate nothing)."""
    rotations = view.get("identity", "apiKeys", "rotations")
    if not isinstance(rotations, Mapping):
        return
    known = _listed_actors(view)
    for actor in rotations:
        ref = _parsed(actor) if isinstance(actor, str) else None
        key = f"identity.apiKeys.rotations.{actor}"
        if ref is not None and ref.source != API_KEYS:
            yield Problem(key, f"{short(actor)} is {SOURCE_TITLES[ref.source]}, which has no key to rotate: remove it")
        elif ref is not None and known is not None and actor not in known:
            yield Problem(
                key,
                f"{short(actor)} is not in {PROJECT}:actors, so it has no key to rotate: add it there, or remove it",
            )


def check_identity_settings(view: ConfigView) -> Iterator[Problem]:
    """The settings of each enabled source fit together: a JWKS URL for `publicUrl`, issuers that tell the JWT
    sources apart, and an API-key listener on a port of its own."""
    sources = _sources(view) or []
    written = view.raw.get("identity")
    kubernetes = written.get("kubernetes") if isinstance(written, Mapping) else None
    jwks = view.get("identity", "kubernetes", "jwks")
    uri_written = isinstance(kubernetes, Mapping) and kubernetes.get("jwksUri") is not None
    if KUBERNETES in sources and jwks == "publicUrl" and not uri_written:
        yield Problem(
            "identity.kubernetes.jwksUri",
            "is missing, but identity.kubernetes.jwks is publicUrl: set it to your cluster issuer's public JWKS URL "
            "(the jwks_uri of `kubectl get --raw /.well-known/openid-configuration`)",
        )
    if uri_written and jwks != "publicUrl":
        yield Problem(
            "identity.kubernetes.jwksUri",
            f"applies only to identity.kubernetes.jwks: publicUrl (it is {jwks!r}): remove it, or set jwks: publicUrl",
        )
    issuer = view.get("identity", "kubernetes", "issuer")
    if SUBSTRATE in sources and KUBERNETES in sources and issuer == view.get("substrate", "issuer"):
        yield Problem(
            "identity.kubernetes.issuer",
            f"is {short(issuer)}, the same as substrate.issuer: the gateway tells the two token sources apart by their "
            "issuer. Set it to the cluster's service-account issuer",
        )
    listed = [] if view.raw.get("actors", MISSING) is MISSING else view.strings("actors")
    has_key_actor = any((ref := _parsed(actor)) is not None and ref.source == API_KEYS for _, actor in listed or [])
    if API_KEYS in sources and listed is not None and not has_key_actor:
        yield Problem(
            "identity.sources",
            f"lists apiKeys, but {PROJECT}:actors holds no API-key actor: the API-key listener would hold no key "
            "and refuse every call. Add an actor apikey:<name> (e.g. apikey:ci-bot), or remove apiKeys from "
            "identity.sources",
        )
    port = view.get("identity", "apiKeys", "port")
    if API_KEYS in sources and (SUBSTRATE in sources or KUBERNETES in sources) and port == view.get("gateway", "port"):
        yield Problem(
            "identity.apiKeys.port",
            f"is {port}, the port of the JWT listener (gateway.port): API keys need a listener of their own, where "
            f"no JWT filter runs. Pick another port, e.g. {8081 if port != 8081 else 8082}",
        )


def _budget_entries(view: ConfigView) -> list[tuple[str, Mapping[str, Any]]]:
    """(key, entry) of the default budget, every class and every pool, as written."""
    budgets: list[tuple[str, Mapping[str, Any]]] = []
    default = view.get("budgets", "default")
    if isinstance(default, Mapping):
        budgets.append(("budgets.default", default))
    budgets += [(f"budgets.classes[{index}]", entry) for index, entry in view.entries("budgets", "classes")]
    budgets += [(f"budgets.pools[{index}]", entry) for index, entry in view.entries("budgets", "pools")]
    return budgets


def _limit_entries(view: ConfigView) -> list[tuple[str, Mapping[str, Any]]]:
    """(key, limit) of every limit as written: a budget's own keys in the short form, else each of `limits`."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    for where, budget in _budget_entries(view):
        limits = budget.get("limits")
        if isinstance(limits, list):
            found += [(f"{where}.limits[{i}]", limit) for i, limit in enumerate(limits) if isinstance(limit, Mapping)]
        else:
            found.append((where, budget))
    return found


def _usd_limit_keys(view: ConfigView) -> list[str]:
    """The keys of every `usd` limit the stack wrote (short form or long form), in order."""
    return [f"{where}.usd" for where, limit in _limit_entries(view) if limit.get("usd") is not None]


def _billed_models(view: ConfigView) -> dict[str, str]:
    """Every name a route's calls are priced by → where it is written.

    Agent Router prices a call by the model name it sends upstream (core.money.billed_models): a route's
    `modelNameOverride` (`routes[i].modelNameOverride`) when it has one, else each of its `models`
    (`routes[i].models[j]`). A name no CEL string can hold is left out: its own field reports it.
    """
    billed: dict[str, str] = {}
    for index, route in view.entries("routes"):
        override = route.get("modelNameOverride")
        override = override if isinstance(override, str) else None
        served = view.strings("routes", index, "models") or []
        where = {override: f"routes[{index}].modelNameOverride"} if override else {}
        for position, model in served:
            where.setdefault(model, f"routes[{index}].models[{position}]")
        for name in money.billed_models([model for _, model in served], override):
            if money.cel_string_problem(name) is None:
                billed.setdefault(name, where[name])
    return billed


def _overridden_models(view: ConfigView) -> dict[str, tuple[int, str]]:
    """Model names agents send on a route with a `modelNameOverride` → (route index, the override)."""
    overridden: dict[str, tuple[int, str]] = {}
    for index, route in view.entries("routes"):
        override = route.get("modelNameOverride")
        if isinstance(override, str) and override:
            for _, model in view.strings("routes", index, "models") or []:
                overridden.setdefault(model, (index, override))
    return overridden


def check_route_models_priced(view: ConfigView) -> Iterator[Problem]:
    """With any `usd` limit, every name a route bills by has a price: an unpriced call would cost nothing."""
    usd_keys = _usd_limit_keys(view)
    prices = view.get("prices")
    if not usd_keys or not isinstance(prices, Mapping):
        return
    for model, where in _billed_models(view).items():
        if model in prices:
            continue
        if where.endswith(".modelNameOverride"):
            reason = (
                f"{where} sends every call of that route upstream as {short(model)}, and Agent Router prices a call by "
                "the model name it sends upstream, not the one the agent asked for"
            )
        else:
            reason = where
        yield Problem(
            "prices",
            f"has no price for model {short(model)} ({reason}), but {usd_keys[0]} is a budget in dollars: calls to it "
            f"would cost nothing. Add `{model}: {{input: <USD per 1M tokens>, output: <USD per 1M tokens>}}` "
            f"under {PROJECT}:prices",
        )


def price_warnings(view: ConfigView) -> list[Problem]:
    """Prices no route bills by: accepted (a route may come later), but said in every preview."""
    prices = view.get("prices")
    if not isinstance(prices, Mapping) or not isinstance(view.get("routes"), list):
        return []
    billed, overridden = _billed_models(view), _overridden_models(view)
    warnings: list[Problem] = []
    for model in prices:
        if model in billed:
            continue
        if model in overridden:
            index, override = overridden[model]
            message = (
                f"routes[{index}] sends {short(model)} upstream as {short(override)} (modelNameOverride), and calls "
                f"are priced by that name, so this price is never used: the price of {short(override)} applies"
            )
        else:
            message = (
                f"no route serves model {short(model)}, so this price is never used: check the spelling against "
                f"{PROJECT}:routes[].models (the names agents send), or remove it"
            )
        warnings.append(Problem(f"prices.{model}", message))
    return warnings


# ---------------------------------------------------------------------------------------------------------
# Providers and routes


def _provider_names(view: ConfigView) -> list[str] | None:
    providers = view.get("providers")
    if not isinstance(providers, list):
        return None
    return [name for _, entry in view.entries("providers") if isinstance(name := _name(entry), str)]


def check_providers(view: ConfigView) -> Iterator[Problem]:
    """Unique names; one mock at most; the mock has no remote settings; Anthropic needs Agent Router v1.2."""
    yield from _names_used_twice(view, ("providers",), "provider")
    mocks = 0
    for index, entry in view.entries("providers"):
        name = _name(entry)
        if entry.get("kind") == "mock":
            mocks += 1
            if mocks == 2:
                yield Problem(f"providers[{index}].kind", "a second mock provider: one in-cluster mock model is enough")
            remote = [key for key in ("hostname", "port", "apiKeyConfig") if entry.get(key) is not None]
            if remote:
                yield Problem(
                    f"providers[{index}]",
                    f"provider {short(name)} is kind mock: it runs in the cluster, so {', '.join(remote)} "
                    "do not apply (remove them)",
                )
        if entry.get("kind") == "anthropic":
            version = view.get("platform", "agentRouterVersion")
            try:
                too_old = isinstance(version, str) and version_tuple(version) < (1, 2, 0)
            except ValueError:
                too_old = False  # the version's own error is reported by its field
            if too_old:
                yield Problem(
                    f"providers[{index}].kind",
                    f"provider {short(name)} is anthropic, but Agent Router {version} cannot translate "
                    f"/v1/chat/completions to Anthropic's API: set {PROJECT}:platform.agentRouterVersion to "
                    "v1.2.0 or newer",
                )


def check_routes(view: ConfigView) -> Iterator[Problem]:
    """At least one route; unique names; each names a configured provider; each model on one route."""
    routes = view.get("routes")
    if isinstance(routes, list) and not routes:
        yield Problem(
            "routes",
            "is empty: declare at least one model route, e.g. [{name: mock, models: [mock-model], provider: mock}]",
        )
    yield from _names_used_twice(view, ("routes",), "route")
    providers = _provider_names(view)
    served_by: dict[str, str] = {}
    for index, entry in view.entries("routes"):
        name = _name(entry)
        provider = entry.get("provider")
        if providers is not None and isinstance(provider, str) and provider not in providers:
            yield Problem(
                f"routes[{index}].provider",
                f"{short(provider)} is not a configured provider (have {listing(providers)}): "
                f"add it to {PROJECT}:providers or fix the name",
            )
        for model_index, model in view.strings("routes", index, "models") or []:
            if model in served_by and served_by[model] != name:
                yield Problem(
                    f"routes[{index}].models[{model_index}]",
                    f"{short(model)} is already served by route {short(served_by[model])}: each model name belongs to "
                    "one route",
                )
            served_by.setdefault(model, name if isinstance(name, str) else f"routes[{index}]")


def check_extra_hostnames_reach_no_provider(view: ConfigView) -> Iterator[Problem]:
    """Actors reach models only through the gateway: no extra egress host may be (or cover) a provider."""
    provider_hosts = sorted(
        {
            host
            for _, entry in view.entries("providers")
            if isinstance(host := entry.get("hostname") or PROVIDER_DEFAULT_HOSTS.get(str(entry.get("kind"))), str)
        }
    )
    for index, host in view.strings("substrate", "egress", "extraHostnames") or []:
        if egress.hostname_problem(host):
            continue  # the field's own error says what is wrong with it
        clashes = egress.provider_host_problems([("extra_hostnames", host)], provider_hosts)
        if clashes:
            yield Problem(f"substrate.egress.extraHostnames[{index}]", clashes[0].message)


# ---------------------------------------------------------------------------------------------------------
# Rate-limit store and platform


def check_redis_mode(view: ConfigView) -> Iterator[Problem]:
    """External Redis needs a url (of its type's shape); in-cluster settings don't mix with external ones."""
    redis = view.raw.get("redis")  # what the stack wrote: defaults are never "set" by the user
    if not isinstance(redis, Mapping):
        return
    mode = redis.get("mode", "in-cluster")
    written = {key for key in redis if key != "mode"}
    if mode == "external":
        url = redis.get("url")
        if url is None:
            yield Problem(
                "redis.url",
                (
                    "mode is external but url is missing: set it to host:port (a comma-separated list for sentinel "
                    "or cluster)"
                ),
            )
        redis_type = redis.get("type", "single")
        if isinstance(url, str) and redis_type in ("single", "sentinel", "cluster"):
            problem = redis_url_problem(url, redis_type)
            if problem:
                yield Problem("redis.url", problem)
        if "tlsCaCertificate" in written and redis.get("tls") is not True:
            yield Problem(
                "redis.tlsCaCertificate",
                "is set but redis.tls is not true: the CA only verifies a TLS connection; set redis.tls: true",
            )
        if "sentinelPasswordConfig" in written and redis_type != "sentinel":
            yield Problem(
                "redis.sentinelPasswordConfig",
                f"applies only to type sentinel (type is {short(redis_type)}): remove it, or set redis.type: sentinel",
            )
        for name in REDIS_IN_CLUSTER_ONLY:
            key = aliases_of_redis()[name]
            if key in written:
                yield Problem(
                    f"redis.{key}",
                    "applies only to mode in-cluster: remove it (an external Redis is run, stored and protected by "
                    "its own operator)",
                )
    elif mode == "in-cluster":
        for name in REDIS_EXTERNAL_ONLY:
            key = aliases_of_redis()[name]
            if key in written:
                yield Problem(f"redis.{key}", "applies only to mode external: remove it, or set redis.mode: external")


@functools.cache
def aliases_of_redis() -> dict[str, str]:
    """Python field name → stack-file key of the Redis settings."""
    return {name: alias for alias, name in aliases(RedisSettings).items()}


def check_platform_versions(view: ConfigView) -> Iterator[Problem]:
    """Agent Router v1.2 needs Envoy Gateway v1.9.2; shared rules with a response cost need v1.9.0."""
    gateway_text = view.get("platform", "envoyGatewayVersion")
    router_text = view.get("platform", "agentRouterVersion")
    try:
        gateway = version_tuple(gateway_text) if isinstance(gateway_text, str) else None
    except ValueError:
        gateway = None
    try:
        router = version_tuple(router_text) if isinstance(router_text, str) else None
    except ValueError:
        router = None
    if gateway is not None and gateway < (1, 9, 0):
        yield Problem(
            "platform.envoyGatewayVersion",
            f"Envoy Gateway {gateway_text} is too old: shared rules with a response cost and 128 header matches "
            "need v1.9.0 or newer",
        )
    elif gateway is not None and router is not None and router >= (1, 2, 0) and gateway < (1, 9, 2):
        yield Problem(
            "platform.envoyGatewayVersion",
            f"Agent Router {router_text} needs Envoy Gateway v1.9.2 or newer, got {gateway_text}: raise "
            "envoyGatewayVersion",
        )


# ---------------------------------------------------------------------------------------------------------
# Monitoring


def dashboard_warnings(view: ConfigView) -> list[Problem]:
    """A dashboard without the PrometheusRule: accepted (a Prometheus the operator does not manage loads the
    same rules from a file), but its token and USD panels stay empty unless someone loads them."""
    if view.get("monitoring", "dashboard") is not True or view.get("monitoring", "prometheusRules") is not False:
        return []
    return [
        Problem(
            "monitoring.dashboard",
            "is true while monitoring.prometheusRules is false: the dashboard's token and USD panels read "
            "recording rules the program puts in the PrometheusRule. Set monitoring.prometheusRules: true (Prometheus "
            "Operator), or load `python -m tools.prometheus_files --stack <stack> rules` into your Prometheus",
        )
    ]


CROSS_CHECKS: tuple[Check, ...] = (
    check_actors_listed_once,
    check_actor_sources,
    check_api_key_rotations,
    check_identity_settings,
    check_class_names_unique,
    check_class_members,
    check_pool_names_unique,
    check_pool_members,
    check_limit_models,
    check_suspended_actors,
    check_route_models_priced,
    check_providers,
    check_routes,
    check_extra_hostnames_reach_no_provider,
    check_redis_mode,
    check_platform_versions,
)


def cross_key_problems(view: ConfigView) -> list[Problem]:
    """Every cross-key check over the view, in a fixed order."""
    return [problem for check in CROSS_CHECKS for problem in check(view)]


# ---------------------------------------------------------------------------------------------------------
# Warnings: accepted, but worth a line in every preview.


def no_actors_finding(view: ConfigView) -> tuple[list[Problem], list[Problem]]:
    """No Substrate actor while Substrate and its egress policies are on: refused, or (with allowNoActors) a warning.

    Every actor's egress policy is deleted by the next `pulumi up` in that case; a stack must say that it
    means it. A stack without the Substrate source manages no egress policy, so nothing is deleted.
    """
    actors = view.raw.get("actors", MISSING)
    enabled = view.get("substrate", "egress", "enabled")
    allowed = view.get("allowNoActors")
    sources = _sources(view)
    if enabled is not True or (sources is not None and SUBSTRATE not in sources):
        return [], []
    listed = view.strings("actors")
    if actors is not MISSING and listed is None:
        return [], []  # not a list: its own error says so
    if any((ref := _parsed(actor)) is None or ref.source == SUBSTRATE for _, actor in listed or []):
        return [], []
    written = "is not set" if actors is MISSING else ("is empty" if actors == [] else "holds no Substrate actor")
    if allowed is True:
        warning = Problem(
            "actors",
            f"{written} and allowNoActors is true: this stack manages no egress policy, so `pulumi up` deletes "
            "every actor egress policy it created before",
        )
        return [], [warning]
    error = Problem(
        "actors",
        f"{written} while egress policies are enabled: the next `pulumi up` would delete every actor's egress "
        f"policy. List the actors{', or drop substrate from identity.sources' if listed else ''}, or set "
        f"`{PROJECT}:allowNoActors: true` if that is what you want",
    )
    return [error], []
