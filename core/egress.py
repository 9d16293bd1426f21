"""Substrate egress policies as plain data: build, validate, normalise and diff.

An actor's egress policy is a Substrate ateapi object (not a Kubernetes object), one per actor,
addressed by ``<atespace>/<actor>`` and always named ``default``. This module holds only pure
functions over dicts and lists, with no Pulumi import, so that the dynamic provider, the
component and the tests share one definition of:

* the policy document sent to ``kubectl ate`` (protojson field names, lowerCamel);
* the client-side checks of Substrate's documented constraints, each message naming the bad
  value and the fix;
* the model-provider host check (actors reach models only through the gateway);
* the normalised form of rules used for diffs (lowercase hostnames, ports after defaults,
  sorted audiences, ``expirationSeconds`` as an integer whatever the CLI printed) and its fingerprint;
* the shards: which of the 64 stable shards an actor belongs to, a shard's inputs, its diff, and the
  plan of calls an update makes (create, write, keep or delete, per actor);
* which cluster the policies live on (kube context and kubeconfig identity).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from fnmatch import fnmatchcase
from typing import Any

from core.kubeconfig import is_contents as kubeconfig_is_contents
from core.kubeconfig import server_of

# --- fixed values -------------------------------------------------------------------------------

GATEWAY_HOSTNAME = "agent-router.envoy-gateway-system.svc.cluster.local"
"""The model gateway's fixed Service name: the one host every actor may call over plain HTTP."""
DEFAULT_GATEWAY_PORT = 80
DEFAULT_AUDIENCES: tuple[str, ...] = ("agent-router",)
DEFAULT_EXPIRATION_SECONDS = 900
DEFAULT_KUBECTL = "kubectl"
DEFAULT_TIMEOUT_SECONDS = 30
EXTRA_HOSTNAME_PORT = 443
"""Each extra hostname becomes a ``tlsPassthrough`` rule on this port: no decryption, no effects."""

POLICY_NAME = "default"
AUTH_HEADER = "Authorization"
AUTH_PREFIX = "Bearer "

# Substrate's documented limits (reference: apivalidation/egress_policy.go).
MAX_RULES = 256
MAX_HOSTNAMES_PER_RULE = 256
MAX_PORTS = 16
MAX_REPLACE_HEADERS = 16
MIN_AUDIENCES, MAX_AUDIENCES = 1, 16
MAX_AUDIENCE_LENGTH = 512
MIN_EXPIRATION_SECONDS, MAX_EXPIRATION_SECONDS = 300, 3600
MAX_HOSTNAME_LENGTH = 253
MAX_LABEL_LENGTH = 63

RULE_KINDS = ("http", "https", "tlsPassthrough")
_KIND_ALIASES = {
    "http": "http",
    "https": "https",
    "tlsPassthrough": "tlsPassthrough",
    "tls_passthrough": "tlsPassthrough",
}
_DEFAULT_PORTS = {"http": 80, "https": 443}

WELL_KNOWN_PROVIDER_HOSTS: tuple[str, ...] = (
    # Hosted LLM APIs an actor must never reach directly. Patterns: ``*`` as a whole left-most
    # label covers one or more labels; ``*`` elsewhere, or inside a label, covers one label only.
    "api.openai.com",
    "api.anthropic.com",
    "generativelanguage.googleapis.com",
    "aiplatform.googleapis.com",
    "*-aiplatform.googleapis.com",
    "*.openai.azure.com",
    "*.services.ai.azure.com",
    "*.models.ai.azure.com",
    "models.inference.ai.azure.com",
    "bedrock-runtime.*.amazonaws.com",
    "bedrock-runtime-fips.*.amazonaws.com",
    "bedrock-agent-runtime.*.amazonaws.com",
    "api.mistral.ai",
    "api.cohere.com",
    "api.cohere.ai",
    "api.groq.com",
    "api.together.xyz",
    "api.together.ai",
    "openrouter.ai",
    "api.deepseek.com",
    "api.x.ai",
    "api.perplexity.ai",
    "api.fireworks.ai",
    "api.deepinfra.com",
    "api.cerebras.ai",
    "api.ai21.com",
    "api-inference.huggingface.co",
    "router.huggingface.co",
    "api.replicate.com",
    "dashscope.aliyuncs.com",
    "dashscope-intl.aliyuncs.com",
    "api.moonshot.ai",
    "api.moonshot.cn",
    "open.bigmodel.cn",
    "api.router.tetrate.ai",
)

_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_TOKEN_RE = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_DNS_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class EgressConfigError(ValueError):
    """A configuration that Substrate would reject, or that this project forbids."""

    def __init__(self, problems: Sequence[Problem | str]) -> None:
        self.problems = [p if isinstance(p, Problem) else Problem("", p) for p in problems]
        lines = "\n".join(f"  - {p.message}" for p in self.problems)
        super().__init__(f"invalid egress policy configuration:\n{lines}")


@dataclass(frozen=True)
class Problem:
    """One validation failure: the input it concerns (may be empty) and a message naming the fix."""

    field: str
    message: str

    def __str__(self) -> str:
        return self.message


# --- inputs of one actor's policy ---------------------------------------------------------------


@dataclass(frozen=True)
class PolicyInputs:
    """Everything one actor's policy needs, as plain values (a shard holds these for each of its actors)."""

    atespace: str
    actor: str
    kube_context: str
    substrate_ref: str
    gateway_hostname: str = GATEWAY_HOSTNAME
    gateway_port: int = DEFAULT_GATEWAY_PORT
    audiences: tuple[str, ...] = DEFAULT_AUDIENCES
    expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS
    extra_hostnames: tuple[str, ...] = ()
    provider_hosts: tuple[str, ...] = ()
    kubectl: str = DEFAULT_KUBECTL
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> PolicyInputs:
        """Read resource properties (numbers may arrive as floats), applying the defaults."""

        def text(key: str, default: str = "") -> str:
            value = props.get(key)
            return default if value is None else str(value)

        def number(key: str, default: int) -> Any:
            value = props.get(key)
            return default if value is None else as_int(value)

        def strings(key: str, default: Iterable[str]) -> tuple[str, ...]:
            value = props.get(key)
            if value is None:
                return tuple(default)
            if isinstance(value, str):
                return (value,)
            return tuple(str(v) for v in value)

        return cls(
            atespace=text("atespace"),
            actor=text("actor"),
            kube_context=text("kube_context"),
            substrate_ref=text("substrate_ref"),
            gateway_hostname=text("gateway_hostname", GATEWAY_HOSTNAME),
            gateway_port=number("gateway_port", DEFAULT_GATEWAY_PORT),
            audiences=strings("audiences", DEFAULT_AUDIENCES),
            expiration_seconds=number("expiration_seconds", DEFAULT_EXPIRATION_SECONDS),
            extra_hostnames=strings("extra_hostnames", ()),
            provider_hosts=strings("provider_hosts", ()),
            kubectl=text("kubectl", DEFAULT_KUBECTL),
            timeout_seconds=number("timeout_seconds", DEFAULT_TIMEOUT_SECONDS),
        )

    def to_props(self) -> dict[str, Any]:
        """The resource properties (lists, not tuples), the inverse of :meth:`from_props`."""
        return {
            "atespace": self.atespace,
            "actor": self.actor,
            "kube_context": self.kube_context,
            "substrate_ref": self.substrate_ref,
            "gateway_hostname": self.gateway_hostname,
            "gateway_port": self.gateway_port,
            "audiences": list(self.audiences),
            "expiration_seconds": self.expiration_seconds,
            "extra_hostnames": list(self.extra_hostnames),
            "provider_hosts": list(self.provider_hosts),
            "kubectl": self.kubectl,
            "timeout_seconds": self.timeout_seconds,
        }

    @property
    def ref(self) -> str:
        return f"{self.atespace}/{self.actor}"


# --- building -----------------------------------------------------------------------------------


def build_rules(inputs: PolicyInputs) -> list[dict[str, Any]]:
    """The rules of an actor's policy: the one ``http`` rule with the JWT effect, then one
    ``tlsPassthrough`` rule (port 443, no effects) per extra hostname, in configured order."""
    rules: list[dict[str, Any]] = [
        {
            "http": {
                "hostnames": [inputs.gateway_hostname],
                "ports": {"numbers": [inputs.gateway_port]},
                "effects": {
                    "replaceHeaders": [
                        {
                            "header": AUTH_HEADER,
                            "prefix": AUTH_PREFIX,
                            "actorJwt": {
                                "audiences": list(inputs.audiences),
                                "expirationSeconds": inputs.expiration_seconds,
                            },
                        }
                    ]
                },
            }
        }
    ]
    for host in inputs.extra_hostnames:
        rules.append({"tlsPassthrough": {"hostnames": [host], "ports": {"numbers": [EXTRA_HOSTNAME_PORT]}}})
    return rules


def build_policy(inputs: PolicyInputs, *, uid: str | None = None, version: Any = None) -> dict[str, Any]:
    """The manifest for ``kubectl ate create|update egress-policy -f -``. ``uid`` and ``version`` are
    the preconditions an update must carry (from a fresh ``get``)."""
    metadata: dict[str, Any] = {"atespace": inputs.atespace, "name": POLICY_NAME}
    if uid is not None:
        metadata["uid"] = uid
    if version is not None:
        metadata["version"] = version
    return {"metadata": metadata, "rules": build_rules(inputs)}


# --- small helpers ------------------------------------------------------------------------------


def as_int(value: Any) -> Any:
    """``900``, ``900.0`` and ``"900"`` all become ``900``; anything else is returned unchanged."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        return int(value.strip())
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_actor_ref(ref: str) -> tuple[str, str]:
    """``"agents/actor-a"`` -> ``("agents", "actor-a")``; raises :class:`EgressConfigError`."""
    problems = actor_ref_problems(ref)
    if problems:
        raise EgressConfigError(problems)
    atespace, name = ref.split("/")
    return atespace, name


def actor_ref_problems(ref: Any) -> list[Problem]:
    if not isinstance(ref, str) or ref.count("/") != 1:
        return [Problem("actors", f'actor {ref!r} must be written "<atespace>/<name>", e.g. "agents/actor-a"')]
    atespace, name = ref.split("/")
    return _label_problems("atespace", atespace, f"actor {ref!r}") + _label_problems("actor", name, f"actor {ref!r}")


def _label_problems(field_name: str, value: Any, where: str) -> list[Problem]:
    what = "atespace" if field_name == "atespace" else "actor name"
    if not isinstance(value, str) or not value:
        return [Problem(field_name, f"{where}: the {what} is empty; give a DNS label such as 'agents'")]
    if len(value) > MAX_LABEL_LENGTH or not _LABEL_RE.match(value):
        return [
            Problem(
                field_name,
                f"{where}: the {what} {value!r} is not a DNS-1123 label (lowercase letters, digits "
                f"and '-', starting and ending with a letter or digit, at most {MAX_LABEL_LENGTH})",
            )
        ]
    return []


def hostname_problem(host: Any) -> str | None:
    """Why ``host`` is not a valid Substrate hostname pattern, with the fix; None if it is valid.

    Valid: a lowercase DNS-1123 subdomain without trailing dot, port, scheme or IP literal;
    ``*`` alone; or ``*.`` followed by such a name (wildcard only as the whole left-most label).
    """
    if not isinstance(host, str) or not host:
        return f"hostname {host!r} is empty; give a DNS name such as 'api.example.com'"
    if "://" in host:
        bare = host.split("://", 1)[1].split("/")[0]
        return f"hostname {host!r} has a scheme; give the host only, e.g. {bare!r}"
    if "/" in host:
        return f"hostname {host!r} has a path; give the host only, e.g. {host.split('/')[0]!r}"
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    else:
        return f"hostname {host!r} is an IP literal; Substrate rules take DNS names only"
    if ":" in host:
        bare = host.rsplit(":", 1)[0]
        return f"hostname {host!r} has a port; give the host only ({bare!r}) and set ports separately"
    if host.endswith("."):
        return f"hostname {host!r} ends with a dot; write {host.rstrip('.')!r}"
    if host != host.lower():
        return f"hostname {host!r} must be lowercase; write {host.lower()!r}"
    if host == "*":
        return None
    name = host[2:] if host.startswith("*.") else host
    if "*" in name:
        return (
            f"hostname {host!r} has a wildcard that is not the whole left-most label; "
            "write '*.example.com' (or '*' alone), not 'api.*.example.com' or '*x.example.com'"
        )
    if len(host) > MAX_HOSTNAME_LENGTH:
        return f"hostname {host!r} is longer than {MAX_HOSTNAME_LENGTH} characters"
    for label in name.split("."):
        if not label:
            return f"hostname {host!r} has an empty label (two dots in a row?)"
        if len(label) > MAX_LABEL_LENGTH:
            return f"hostname {host!r} has a label longer than {MAX_LABEL_LENGTH} characters: {label!r}"
        if not _LABEL_RE.match(label):
            return (
                f"hostname {host!r} is not a DNS-1123 name: label {label!r} may hold only lowercase "
                "letters, digits and '-', and must start and end with a letter or digit"
            )
    return None


# --- validation of a policy document ------------------------------------------------------------


def _rule_kind(rule: Any) -> tuple[str | None, Any, list[str]]:
    """(kind, body, problems) for one rule; kind is None when the rule is not exactly one kind."""
    if not isinstance(rule, Mapping):
        return None, None, [f"must be an object with one of {', '.join(RULE_KINDS)}, got {rule!r}"]
    keys = [k for k in rule if k in _KIND_ALIASES]
    unknown = [k for k in rule if k not in _KIND_ALIASES]
    problems = [f"has unknown field {k!r}; a rule holds exactly one of {', '.join(RULE_KINDS)}" for k in unknown]
    if len(keys) != 1:
        problems.append(
            f"must set exactly one of {', '.join(RULE_KINDS)}, but sets {', '.join(keys) if keys else 'none'}"
        )
        return None, None, problems
    return _KIND_ALIASES[keys[0]], rule[keys[0]], problems


def _get(body: Mapping[str, Any], camel: str, snake: str | None = None) -> Any:
    if camel in body:
        return body[camel]
    return body.get(snake) if snake else None


def _port_set(kind: str, ports: Any) -> frozenset[int] | None:
    """The ports a rule covers after defaults; None means all ports."""
    if ports is None:
        default = _DEFAULT_PORTS.get(kind)
        return frozenset([default]) if default else frozenset()
    if isinstance(ports, Mapping) and "all" in ports:
        return None
    numbers = ports.get("numbers") if isinstance(ports, Mapping) else None
    return frozenset(as_int(n) for n in (numbers or []) if _is_int(as_int(n)))


def policy_problems(policy: Any) -> list[Problem]:
    """Every documented Substrate constraint ``policy`` breaks (empty list: valid)."""
    if not isinstance(policy, Mapping):
        return [Problem("rules", f"the egress policy must be an object, got {policy!r}")]
    problems: list[Problem] = []
    metadata = policy.get("metadata")
    if isinstance(metadata, Mapping) and metadata.get("name", POLICY_NAME) != POLICY_NAME:
        problems.append(Problem("rules", f'metadata.name {metadata.get("name")!r} must be "{POLICY_NAME}"'))
    rules = policy.get("rules", [])
    if not isinstance(rules, list):
        return [*problems, Problem("rules", f"rules must be a list, got {rules!r}")]
    if len(rules) > MAX_RULES:
        problems.append(
            Problem(
                "extra_hostnames",
                f"the policy has {len(rules)} rules, more than Substrate's {MAX_RULES}; "
                f"list at most {MAX_RULES - 1} extra hostnames",
            )
        )
    seen: list[tuple[int, str, frozenset[int] | None]] = []  # (rule index, pattern, ports)
    for index, rule in enumerate(rules):
        kind, body, rule_problems = _rule_kind(rule)
        where = f"egress rule {index + 1}" + (f" ({kind})" if kind else "")
        problems.extend(Problem("rules", f"{where} {p}") for p in rule_problems)
        if kind is None:
            continue
        if not isinstance(body, Mapping):
            problems.append(Problem("rules", f"{where} must be an object, got {body!r}"))
            continue
        problems.extend(_rule_body_problems(kind, body, where))
        ports_covered = _port_set(kind, body.get("ports"))
        for host in body.get("hostnames") or []:
            for other_index, other_host, other_ports in seen:
                if other_host != host or other_index == index:
                    continue
                if ports_covered is None or other_ports is None or ports_covered & other_ports:
                    common = (
                        "all ports"
                        if ports_covered is None or other_ports is None
                        else "port " + ", ".join(str(p) for p in sorted(ports_covered & other_ports))
                    )
                    problems.append(
                        Problem(
                            "extra_hostnames",
                            f"{where} ties with egress rule {other_index + 1} on {host!r} ({common}); "
                            "list each hostname once, and not the gateway hostname",
                        )
                    )
            seen.append((index, host, ports_covered))
    return problems


def _rule_body_problems(kind: str, body: Mapping[str, Any], where: str) -> list[Problem]:
    problems: list[Problem] = []
    allowed = {"hostnames", "ports"} | ({"effects"} if kind != "tlsPassthrough" else set())
    for key in body:
        if key not in allowed:
            fix = "tlsPassthrough rules take no effects" if key == "effects" else "remove it"
            problems.append(Problem("rules", f"{where} has unsupported field {key!r}; {fix}"))
    hosts = body.get("hostnames")
    if not isinstance(hosts, list) or not hosts:
        problems.append(Problem("rules", f"{where} needs 1 to {MAX_HOSTNAMES_PER_RULE} hostnames, got {hosts!r}"))
        hosts = []
    elif len(hosts) > MAX_HOSTNAMES_PER_RULE:
        problems.append(Problem("rules", f"{where} has {len(hosts)} hostnames, more than {MAX_HOSTNAMES_PER_RULE}"))
    field_name = "gateway_hostname" if kind == "http" else "extra_hostnames"
    for host in hosts:
        reason = hostname_problem(host)
        if reason:
            problems.append(Problem(field_name, f"{where}: {reason}"))
    dupes = sorted({h for h in hosts if isinstance(h, str) and hosts.count(h) > 1})
    for host in dupes:
        problems.append(Problem(field_name, f"{where} lists hostname {host!r} more than once; list it once"))
    problems.extend(_ports_problems(kind, body.get("ports"), where))
    if "effects" in body and kind != "tlsPassthrough":
        problems.extend(_effects_problems(body["effects"], where))
    return problems


def _ports_problems(kind: str, ports: Any, where: str) -> list[Problem]:
    field_name = "gateway_port" if kind == "http" else "rules"
    if ports is None:
        if kind == "tlsPassthrough":
            return [Problem("rules", f"{where} needs ports: tlsPassthrough has no default port; e.g. [443]")]
        return []
    if not isinstance(ports, Mapping):
        return [Problem(field_name, f"{where}: ports must be an object with 'numbers' or 'all', got {ports!r}")]
    unknown = [k for k in ports if k not in ("numbers", "all")]
    if unknown or ("numbers" in ports) == ("all" in ports):
        return [Problem(field_name, f"{where}: ports must set exactly one of 'numbers' or 'all', got {dict(ports)!r}")]
    if "all" in ports:
        return []
    numbers = ports["numbers"]
    if not isinstance(numbers, list) or not numbers:
        return [Problem(field_name, f"{where}: ports.numbers must list 1 to {MAX_PORTS} ports, got {numbers!r}")]
    problems: list[Problem] = []
    if len(numbers) > MAX_PORTS:
        problems.append(Problem(field_name, f"{where}: {len(numbers)} ports is more than {MAX_PORTS}"))
    values = [as_int(n) for n in numbers]
    for raw, value in zip(numbers, values, strict=True):
        if not _is_int(value) or not 1 <= value <= 65535:
            problems.append(Problem(field_name, f"{where}: port {raw!r} must be an integer from 1 to 65535"))
    for value in sorted({v for v in values if _is_int(v) and values.count(v) > 1}):
        problems.append(Problem(field_name, f"{where}: port {value} is listed more than once"))
    return problems


def _effects_problems(effects: Any, where: str) -> list[Problem]:
    if not isinstance(effects, Mapping):
        return [Problem("rules", f"{where}: effects must be an object with replaceHeaders, got {effects!r}")]
    problems = [
        Problem("rules", f"{where}: effects has unknown field {k!r}")
        for k in effects
        if k not in ("replaceHeaders", "replace_headers")
    ]
    headers = _get(effects, "replaceHeaders", "replace_headers")
    if not isinstance(headers, list) or not headers:
        problems.append(
            Problem(
                "rules",
                f"{where}: effects needs 1 to {MAX_REPLACE_HEADERS} replaceHeaders entries, got {headers!r}",
            )
        )
        return problems
    if len(headers) > MAX_REPLACE_HEADERS:
        problems.append(Problem("rules", f"{where}: {len(headers)} replaceHeaders is more than {MAX_REPLACE_HEADERS}"))
    names: list[str] = []
    for entry in headers:
        problems.extend(_replace_header_problems(entry, where))
        if isinstance(entry, Mapping) and isinstance(entry.get("header"), str):
            names.append(entry["header"].lower())
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(
            Problem("rules", f"{where}: header {name!r} is replaced more than once (names are case-insensitive)")
        )
    return problems


def _replace_header_problems(entry: Any, where: str) -> list[Problem]:
    if not isinstance(entry, Mapping):
        return [Problem("rules", f"{where}: a replaceHeaders entry must be an object, got {entry!r}")]
    problems: list[Problem] = []
    header = entry.get("header")
    if not isinstance(header, str) or not _TOKEN_RE.match(header):
        problems.append(
            Problem(
                "rules",
                f"{where}: header name {header!r} is not an RFC 7230 token (letters, digits and "
                "!#$%&'*+-.^_`|~ only, no spaces or colons), e.g. 'Authorization'",
            )
        )
    prefix = entry.get("prefix", "")
    if not isinstance(prefix, str) or any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in prefix):
        problems.append(Problem("rules", f"{where}: prefix {prefix!r} may hold no control characters except tab"))
    jwt = _get(entry, "actorJwt", "actor_jwt")
    uri = _get(entry, "credentialUri", "credential_uri")
    if (jwt is None) == (uri is None):
        problems.append(
            Problem("rules", f"{where}: header {header!r} must set exactly one of actorJwt or credentialUri")
        )
    if jwt is not None:
        problems.extend(_actor_jwt_problems(jwt, where))
    if uri is not None:
        reason = credential_uri_problem(uri)
        if reason:
            problems.append(Problem("rules", f"{where}: {reason}"))
    return problems


def _actor_jwt_problems(jwt: Any, where: str) -> list[Problem]:
    if not isinstance(jwt, Mapping):
        return [Problem("rules", f"{where}: actorJwt must be an object, got {jwt!r}")]
    problems: list[Problem] = []
    audiences = jwt.get("audiences")
    if not isinstance(audiences, list) or not MIN_AUDIENCES <= len(audiences) <= MAX_AUDIENCES:
        count = len(audiences) if isinstance(audiences, list) else audiences
        problems.append(
            Problem(
                "audiences",
                f"{where}: actorJwt needs {MIN_AUDIENCES} to {MAX_AUDIENCES} audiences, got {count!r}; "
                "e.g. ['agent-router']",
            )
        )
        audiences = audiences if isinstance(audiences, list) else []
    for audience in audiences:
        if not isinstance(audience, str) or not 1 <= len(audience) <= MAX_AUDIENCE_LENGTH:
            shown = audience if not isinstance(audience, str) or len(audience) < 40 else audience[:40] + "..."
            problems.append(
                Problem(
                    "audiences",
                    f"{where}: audience {shown!r} must be a string of 1 to {MAX_AUDIENCE_LENGTH} characters",
                )
            )
    for audience in sorted({a for a in audiences if isinstance(a, str) and audiences.count(a) > 1}):
        problems.append(Problem("audiences", f"{where}: audience {audience!r} is listed more than once"))
    raw = _get(jwt, "expirationSeconds", "expiration_seconds")
    seconds = as_int(raw)
    if not _is_int(seconds) or not MIN_EXPIRATION_SECONDS <= seconds <= MAX_EXPIRATION_SECONDS:
        problems.append(
            Problem(
                "expiration_seconds",
                f"{where}: expirationSeconds {raw!r} must be an integer from {MIN_EXPIRATION_SECONDS} "
                f"to {MAX_EXPIRATION_SECONDS} (900 is the default)",
            )
        )
    return problems


def credential_uri_problem(uri: Any) -> str | None:
    """Why ``uri`` is not a valid ``ate-secret://<host>/<seg>/<seg>...`` URI; None if it is."""
    if not isinstance(uri, str) or not uri.startswith("ate-secret://"):
        return f"credentialUri {uri!r} must use the ate-secret:// scheme"
    if any(c in uri for c in "%?#"):
        return f"credentialUri {uri!r} may hold no percent-encoding, query or fragment"
    host, _, path = uri[len("ate-secret://") :].partition("/")
    if not _DNS_NAME_RE.match(host):
        return f"credentialUri {uri!r} needs a DNS host without port, e.g. ate-secret://k8s.io/..."
    segments = path.split("/") if path else []
    if len(segments) < 2 or any(not s for s in segments):
        return f"credentialUri {uri!r} needs at least 2 non-empty path segments"
    return None


# --- model-provider hosts -----------------------------------------------------------------------


def provider_host_of(value: str) -> str:
    """A configured provider endpoint as a lowercase host: scheme, path and port are dropped."""
    host = value.strip().lower()
    if "://" in host:
        host = host.split("://", 1)[1]
    host = host.split("/", 1)[0]
    if host.startswith("["):  # IPv6 literal
        return host.split("]", 1)[0].lstrip("[")
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def _labels_meet(a: str, b: str) -> bool:
    """Can one label match both label patterns? ``*`` or a glob inside a label covers one label."""
    if a == b or a == "*" or b == "*":
        return True
    a_glob, b_glob = "*" in a, "*" in b
    if a_glob and b_glob:
        return True  # both are partial globs: assume they may meet
    if a_glob:
        return fnmatchcase(b, a)
    if b_glob:
        return fnmatchcase(a, b)
    return False


def patterns_overlap(a: str, b: str) -> bool:
    """True if some hostname matches both patterns.

    A ``*`` that is the whole left-most label covers one or more labels (``*.example.com`` matches
    ``a.example.com`` and ``a.b.example.com``, not ``example.com``); ``*`` alone matches any name;
    a ``*`` in any other label position, or inside a label, covers exactly one label or part of one.
    """
    ra, rb = a.lower().split(".")[::-1], b.lower().split(".")[::-1]
    for i in range(min(len(ra), len(rb))):
        if (ra[i] == "*" and i == len(ra) - 1) or (rb[i] == "*" and i == len(rb) - 1):
            return True  # a left-most wildcard absorbs the (non-empty) rest of the other name
        if not _labels_meet(ra[i], rb[i]):
            return False
    return len(ra) == len(rb)  # otherwise one name has labels the other cannot match


def provider_host_problems(hostnames: Iterable[tuple[str, str]], provider_hosts: Iterable[str]) -> list[Problem]:
    """Each ``(field, hostname)`` an actor may reach that is, or whose wildcard covers, a model
    provider host (the configured ones plus :data:`WELL_KNOWN_PROVIDER_HOSTS`)."""
    providers: list[str] = []
    for host in [*provider_hosts, *WELL_KNOWN_PROVIDER_HOSTS]:
        normal = provider_host_of(host)
        if normal and normal not in providers:
            providers.append(normal)
    problems: list[Problem] = []
    for field_name, host in hostnames:
        if not isinstance(host, str) or not host:
            continue
        clashes = [p for p in providers if patterns_overlap(host, p)]
        if clashes:
            shown = ", ".join(repr(c) for c in clashes[:3]) + (" ..." if len(clashes) > 3 else "")
            extra = field_name == "extra_hostnames"
            what, where = ("extra hostname", "the extra hostnames") if extra else ("gateway hostname", "the config")
            problems.append(
                Problem(
                    field_name,
                    f"{what} {host!r} reaches model provider host {shown}: actors get no rule toward any "
                    f"model provider and call models only through {GATEWAY_HOSTNAME}; "
                    f"remove {host!r} from {where}",
                )
            )
    return problems


# --- everything checked for one actor's policy before any call --------------------------------------


def input_problems(inputs: PolicyInputs) -> list[Problem]:
    """All client-side checks for one actor's policy, run before ``kubectl ate`` is called."""
    problems: list[Problem] = []
    problems += _label_problems("atespace", inputs.atespace, f"actor {inputs.ref!r}")
    problems += _label_problems("actor", inputs.actor, f"actor {inputs.ref!r}")
    if not inputs.kube_context:
        problems.append(Problem("kube_context", "kube context is empty; name the kubeconfig context of the cluster"))
    if not inputs.kubectl:
        problems.append(Problem("kubectl", "kubectl path is empty; give 'kubectl' or a path to it"))
    if not inputs.substrate_ref:
        problems.append(
            Problem("substrate_ref", "substrate ref is empty; give the Substrate tag or commit the cluster runs")
        )
    if not _is_int(inputs.timeout_seconds) or inputs.timeout_seconds < 1:
        problems.append(
            Problem(
                "timeout_seconds",
                f"timeout {inputs.timeout_seconds!r} must be a whole number of seconds >= 1",
            )
        )
    if isinstance(inputs.gateway_hostname, str) and "*" in inputs.gateway_hostname:
        problems.append(
            Problem(
                "gateway_hostname",
                f"gateway hostname {inputs.gateway_hostname!r} must be an exact name, no wildcard",
            )
        )
    document_problems = policy_problems(build_policy(inputs))
    if not _is_int(inputs.gateway_port) or not 1 <= inputs.gateway_port <= 65535:
        problems.append(
            Problem("gateway_port", f"gateway port {inputs.gateway_port!r} must be an integer from 1 to 65535")
        )
        document_problems = [p for p in document_problems if p.field != "gateway_port"]
    problems += document_problems
    hosts = [("gateway_hostname", inputs.gateway_hostname)] + [("extra_hostnames", h) for h in inputs.extra_hostnames]
    problems += provider_host_problems(hosts, inputs.provider_hosts)
    return problems


def require_valid(inputs: PolicyInputs) -> None:
    problems = input_problems(inputs)
    if problems:
        raise EgressConfigError(problems)


# --- normalisation and diff ---------------------------------------------------------------------


def normalize_rules(rules: Any) -> list[Any]:
    """Rules in one canonical form, for comparison and for the resource's ``rules`` output.

    Accepts what this module builds and what ``kubectl ate get -o json`` prints (protojson:
    lowerCamel or proto names, int64 as strings, empty fields omitted). Rule order is kept (it may
    decide precedence); hostnames, ports, audiences and headers, which are sets, are sorted.
    """
    if not isinstance(rules, list):
        return []
    return [_normalize_rule(rule) for rule in rules]


def _normalize_rule(rule: Any) -> Any:
    kind, body, _ = _rule_kind(rule)
    if kind is None or not isinstance(body, Mapping):
        return rule  # unrecognised: kept verbatim so that it compares unequal to what we build
    out: dict[str, Any] = {
        "hostnames": sorted((h.lower() if isinstance(h, str) else h for h in body.get("hostnames") or []), key=str)
    }
    ports = body.get("ports")
    if isinstance(ports, Mapping) and "all" in ports:
        out["ports"] = {"all": {}}
    else:
        numbers = ports.get("numbers") if isinstance(ports, Mapping) else None
        if numbers:
            out["ports"] = {"numbers": sorted((as_int(n) for n in numbers), key=_sort_key)}
        else:
            default = _DEFAULT_PORTS.get(kind)
            out["ports"] = {"numbers": [default] if default else []}
    effects = body.get("effects")
    headers = _get(effects, "replaceHeaders", "replace_headers") if isinstance(effects, Mapping) else None
    if headers:
        out["effects"] = {
            "replaceHeaders": sorted(
                (_normalize_header(h) for h in headers), key=lambda h: str(h.get("header", "")).lower()
            )
        }
    return {kind: out}


def _sort_key(value: Any) -> tuple[int, int, str]:
    return (0, value, "") if _is_int(value) else (1, 0, str(value))


def _normalize_header(entry: Any) -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        return {"header": entry}
    out: dict[str, Any] = {"header": entry.get("header", ""), "prefix": entry.get("prefix") or ""}
    jwt = _get(entry, "actorJwt", "actor_jwt")
    if isinstance(jwt, Mapping):
        out["actorJwt"] = {
            "audiences": sorted(str(a) for a in jwt.get("audiences") or []),
            "expirationSeconds": as_int(_get(jwt, "expirationSeconds", "expiration_seconds")),
        }
    uri = _get(entry, "credentialUri", "credential_uri")
    if uri is not None:
        out["credentialUri"] = uri
    return out


def desired_rules(inputs: PolicyInputs) -> list[Any]:
    """The normalised rules ``inputs`` asks for."""
    return normalize_rules(build_rules(inputs))


def rules_fingerprint(rules: Any) -> str:
    """A short, stable digest of rules after normalisation (``sha256:<16 hex>``).

    A shard records one per actor: the fingerprint of the rules it asks for (inputs) and of the rules
    last written or read (outputs). Equal fingerprints mean the policy needs no call; a preview lists
    the actors whose two fingerprints differ, which is how it names the policies that will change.
    """
    canonical = json.dumps(normalize_rules(rules), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


# --- where kubectl ate points -------------------------------------------------------------------


def cluster_identity(kubeconfig: str | None, kube_context: str, file_text: str | None = None) -> str:
    """What the egress policies' cluster is known by, besides the kube context name.

    ``""`` with no kubeconfig setting (kubectl reads ``$KUBECONFIG`` or ``~/.kube/config``, as the
    Kubernetes provider does); ``server:<url>`` read from the context's cluster entry of the kubeconfig
    contents, or of the file a path names (``file_text``, read by the caller where the program runs), so
    that new credentials for the same cluster are not a new target and a file edited to name another
    cluster is; ``path:<path>`` for a file that could not be read or does not say; ``contents:<digest>``
    for contents that do not say. A change of identity or context replaces the shards, deleting the old
    policies first (see :data:`SHARD_TARGET_KEYS` and :func:`target_change`).
    """
    if not kubeconfig:
        return ""
    if not kubeconfig_is_contents(kubeconfig):
        server = server_of(file_text, kube_context) if file_text is not None else ""
        return "server:" + server if server else "path:" + kubeconfig.strip()
    server = server_of(kubeconfig, kube_context)
    if server:
        return "server:" + server
    return "contents:" + hashlib.sha256(kubeconfig.encode()).hexdigest()[:16]


def unresolved_path(identity: str) -> bool:
    """A path-valued kubeconfig whose cluster was not known when the identity was taken."""
    return identity.startswith("path:")


def target_change(olds: Mapping[str, Any], news: Mapping[str, Any]) -> str:
    """How the recorded cluster identity moved: ``""`` (it did not), ``"replace"`` (another cluster: the
    shard is replaced, deleting first) or ``"record"`` (the same kubeconfig file, whose server was unknown
    on one side: recorded as the new identity without a replacement, e.g. a stack whose state predates
    reading the file's server)."""
    old, new = str(olds.get("cluster") or ""), str(news.get("cluster") or "")
    if old == new:
        return ""
    same_file = _kubeconfig_path(olds) is not None and _kubeconfig_path(olds) == _kubeconfig_path(news)
    if same_file and (unresolved_path(old) or unresolved_path(new)):
        return "record"
    return "replace"


def _kubeconfig_path(props: Mapping[str, Any]) -> str | None:
    value = props.get("kubeconfig")
    if not isinstance(value, str) or not value.strip() or kubeconfig_is_contents(value):
        return None
    return value.strip()


# --- shards: many actors' policies in one Pulumi resource -----------------------------------------

SHARD_COUNT = 64
"""Fixed for good: an actor's shard depends on its name alone, so adding or removing an actor touches one
shard and no actor ever moves between shards (a move would hand a live policy from one resource to
another within a single `pulumi up`, in an order Pulumi does not promise)."""
DEFAULT_CONCURRENCY = 8
MAX_CONCURRENCY = 32
ABSENT = "absent"
"""The live fingerprint of an actor whose policy a refresh did not find."""


def shard_of(actor_ref: str) -> int:
    """The shard (0 to ``SHARD_COUNT - 1``) of ``<atespace>/<name>``: a hash of the name, so stable."""
    digest = hashlib.sha256(actor_ref.encode()).digest()
    return int.from_bytes(digest[:8], "big") % SHARD_COUNT


def shard_resource_name(index: int) -> str:
    """``egress-shard-07``: the Pulumi name of shard 7 (stable: it depends on the index only)."""
    return f"egress-shard-{index:02d}"


def policy_resource_name(actor_ref: str) -> str:
    """``agents/actor-a`` -> ``egress-agents.actor-a``: the name versions before the shards gave each
    actor's own resource (``ActorEgressPolicy``); kept to describe the upgrade of existing stacks."""
    atespace, name = parse_actor_ref(actor_ref)
    return f"egress-{atespace}.{name}"


@dataclass(frozen=True)
class Recorded:
    """What a shard recorded about one actor's live policy: the preconditions of its next write."""

    uid: str
    version: str

    @classmethod
    def of(cls, uid: Any, version: Any) -> Recorded:
        """The record of a uid and version as any source gives them (state, ``kubectl ate`` output, legacy
        state): a version read back as a float (``4.0``) is the same record as ``"4"``."""
        return cls(str(uid), "" if version is None else str(as_int(version)))


@dataclass(frozen=True)
class ShardInputs:
    """Everything one ``EgressPolicyShard`` needs, as plain values (the dynamic resource's inputs).

    Every actor of a shard gets the same rules; only the actor differs. ``cluster`` is derived from
    ``kubeconfig`` and ``kube_context`` (:func:`cluster_identity`) when the props are written.
    """

    shard: int
    actors: tuple[str, ...]
    kube_context: str
    substrate_ref: str
    kubeconfig: str | None = None
    gateway_hostname: str = GATEWAY_HOSTNAME
    gateway_port: int = DEFAULT_GATEWAY_PORT
    audiences: tuple[str, ...] = DEFAULT_AUDIENCES
    expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS
    extra_hostnames: tuple[str, ...] = ()
    provider_hosts: tuple[str, ...] = ()
    kubectl: str = DEFAULT_KUBECTL
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    concurrency: int = DEFAULT_CONCURRENCY

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> ShardInputs:
        """Read resource properties (numbers may arrive as floats; ``actors`` as a map or a list)."""
        common = PolicyInputs.from_props(props)
        actors = props.get("actors")
        refs = sorted(actors) if isinstance(actors, Mapping) else sorted(str(a) for a in actors or [])
        kubeconfig = props.get("kubeconfig")
        shard = props.get("shard")
        concurrency = props.get("concurrency")
        return cls(
            shard=as_int(shard) if shard is not None else -1,
            actors=tuple(refs),
            kubeconfig=kubeconfig if isinstance(kubeconfig, str) and kubeconfig else None,
            **{key: getattr(common, key) for key in _POLICY_SETTINGS},
            concurrency=DEFAULT_CONCURRENCY if concurrency is None else as_int(concurrency),
        )

    def policy_inputs(self, actor_ref: str) -> PolicyInputs:
        """One actor's inputs: the actor, and every shared setting :class:`PolicyInputs` has, copied by name."""
        atespace, name = actor_ref.split("/", 1) if "/" in actor_ref else ("", actor_ref)
        return PolicyInputs(atespace=atespace, actor=name, **{key: getattr(self, key) for key in _POLICY_SETTINGS})

    def desired_rules(self) -> list[Any]:
        """The normalised rules every actor of the shard gets."""
        return desired_rules(self.policy_inputs("x/x"))

    def fingerprint(self) -> str:
        return rules_fingerprint(self.desired_rules())

    @property
    def cluster(self) -> str:
        return cluster_identity(self.kubeconfig, self.kube_context)

    def to_props(self) -> dict[str, Any]:
        """The resource properties: settings, ``cluster``, the rules, and ``actors`` as a map from each
        actor to the fingerprint of the rules it asks for (how a preview names the actors it changes)."""
        fingerprint = self.fingerprint()
        settings = {key: _setting(self, key) for key in SHARD_SETTING_KEYS}
        return {
            "shard": self.shard,
            "actors": {ref: fingerprint for ref in self.actors},
            "kube_context": self.kube_context,
            "cluster": self.cluster,
            **settings,
            "rules": self.desired_rules(),
        }


_POLICY_SETTINGS = tuple(f.name for f in fields(PolicyInputs) if f.name not in ("atespace", "actor"))
"""The settings every actor's :class:`PolicyInputs` takes from its shard (by field name)."""


def shard_problems(shard: ShardInputs) -> list[Problem]:
    """All client-side checks of one shard, run before any ``kubectl ate`` call."""
    problems: list[Problem] = []
    for ref in shard.actors:
        problems += actor_ref_problems(ref)
    sample = shard.policy_inputs(shard.actors[0] if shard.actors else "agents/x")
    problems += [p for p in input_problems(sample) if p.field not in ("atespace", "actor")]
    if not _is_int(shard.concurrency) or not 1 <= shard.concurrency <= MAX_CONCURRENCY:
        problems.append(
            Problem(
                "concurrency",
                f"concurrency {shard.concurrency!r} must be a whole number from 1 to {MAX_CONCURRENCY}",
            )
        )
    return problems


# --- what a shard change does ---------------------------------------------------------------------


@dataclass(frozen=True)
class DiffDecision:
    changes: bool
    replaces: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    delete_before_replace: bool = False
    actors: list[str] = field(default_factory=list)
    """The actors whose policy a deployment would create, write or delete."""


SHARD_TARGET_KEYS = ("kube_context", "cluster")
"""Inputs that say which cluster holds the policies: a change is a replacement that deletes the old
policies first (with the old kubeconfig and context), so none is left behind on the old cluster. A new
context may name the same cluster, so creating first would adopt the policies and the delete would
then remove them."""
SHARD_SETTING_KEYS = tuple(f.name for f in fields(ShardInputs) if f.name not in ("shard", "actors", *SHARD_TARGET_KEYS))
"""Inputs that change no target: every field of :class:`ShardInputs` but the shard, its actors and the
target, so a new field is compared by :func:`shard_diff` without being listed anywhere. A change is an
update: the rule settings rewrite the policies whose fingerprint moves; the others (kubectl path, timeout,
Substrate ref, concurrency, kubeconfig credentials) write nothing but must reach the outputs, which are all
that refresh and delete get."""


def live_fingerprints(outputs: Mapping[str, Any]) -> dict[str, str]:
    """``actors`` of a shard's outputs: each actor's live fingerprint (or :data:`ABSENT`)."""
    actors = outputs.get("actors")
    if not isinstance(actors, Mapping):
        return {}
    return {str(ref): str(value) for ref, value in actors.items()}


def recorded_policies(outputs: Mapping[str, Any]) -> dict[str, Recorded]:
    """``policies`` of a shard's outputs: the uid and version last seen for each actor's policy."""
    policies = outputs.get("policies")
    recorded: dict[str, Recorded] = {}
    if not isinstance(policies, Mapping):
        return recorded
    for ref, entry in policies.items():
        if isinstance(entry, Mapping) and entry.get("uid"):
            recorded[str(ref)] = Recorded.of(entry["uid"], entry.get("version"))
    return recorded


def shard_outputs(
    shard: ShardInputs, live: Mapping[str, str], records: Mapping[str, Recorded], cluster: str
) -> dict[str, Any]:
    """A shard's outputs, the format :func:`live_fingerprints` and :func:`recorded_policies` read: the
    inputs, the cluster identity, each actor's live fingerprint (or :data:`ABSENT`), and its recorded uid
    and version."""
    return {
        **shard.to_props(),
        "cluster": cluster,
        "actors": {ref: live.get(ref, ABSENT) for ref in sorted(live)},
        "policies": {ref: {"uid": r.uid, "version": r.version} for ref, r in sorted(records.items())},
    }


def _setting(inputs: ShardInputs, key: str) -> Any:
    value = getattr(inputs, key)
    return list(value) if isinstance(value, tuple) else value


def shard_diff(olds: Mapping[str, Any], news: Mapping[str, Any]) -> DiffDecision:
    """Compare a shard's previous outputs with its new inputs: a new target replaces (old policies
    deleted first); any other setting, or an actor added, removed or out of step, is an update."""
    old, new = ShardInputs.from_props(olds), ShardInputs.from_props(news)
    # The checked inputs carry the identity the provider resolved (a kubeconfig file's server); else derive it.
    cluster = target_change(olds, {**news, "cluster": news.get("cluster", new.cluster)})
    replaces = ["kube_context"] if str(olds.get("kube_context") or "") != new.kube_context else []
    replaces += ["cluster"] if cluster == "replace" else []
    reasons = [*replaces, *(["cluster"] if cluster == "record" else [])]
    reasons += [k for k in SHARD_SETTING_KEYS if _setting(old, k) != _setting(new, k)]
    live, desired = live_fingerprints(olds), new.fingerprint()
    recorded = recorded_policies(olds)
    actors = sorted(
        {ref for ref in new.actors if live.get(ref) != desired or ref not in recorded}
        | {ref for ref in live if ref not in new.actors}
    )
    if actors:
        reasons.append(f"actors ({len(actors)})")
    return DiffDecision(
        changes=bool(reasons),
        replaces=replaces,
        reasons=reasons,
        delete_before_replace=bool(replaces),
        actors=actors,
    )


@dataclass(frozen=True)
class ShardPlan:
    """What an update of one shard does for each actor (pure: no call is made here)."""

    create: list[str]
    """No record of a policy: create it (on AlreadyExists, adopt the existing one)."""
    write: dict[str, Recorded]
    """Recorded, but out of step: update with the recorded preconditions."""
    keep: dict[str, Recorded]
    """Live rules already equal the wanted ones: no call."""
    delete: dict[str, Recorded]
    """No longer in the shard: delete, guarded by the recorded uid and version."""

    @property
    def calls(self) -> int:
        """Processes the plan needs when nothing goes wrong (one per created, written or deleted actor)."""
        return len(self.create) + len(self.write) + len(self.delete)


def plan_shard(outputs: Mapping[str, Any], new: ShardInputs) -> ShardPlan:
    """Plan an update from the shard's previous outputs to ``new`` (see :class:`ShardPlan`)."""
    live, recorded, desired = live_fingerprints(outputs), recorded_policies(outputs), new.fingerprint()
    create: list[str] = []
    write: dict[str, Recorded] = {}
    keep: dict[str, Recorded] = {}
    for ref in new.actors:
        record = recorded.get(ref)
        if record is None or live.get(ref) in (None, ABSENT):
            create.append(ref)
        elif live.get(ref) == desired:
            keep[ref] = record
        else:
            write[ref] = record
    delete = {ref: record for ref, record in sorted(recorded.items()) if ref not in new.actors}
    return ShardPlan(create=create, write=write, keep=keep, delete=delete)


# ---------------------------------------------------------------------------------------------------------
# The settings shared by every actor's policy


@dataclass(frozen=True, kw_only=True)
class EgressPolicySettings:
    """Plain, already-validated configuration for every actor's egress policy."""

    actors: list[str]
    gateway_hostname: str = GATEWAY_HOSTNAME
    gateway_port: int = DEFAULT_GATEWAY_PORT
    audiences: list[str] = field(default_factory=lambda: list(DEFAULT_AUDIENCES))
    expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS
    extra_hostnames: list[str] = field(default_factory=list)
    provider_hosts: list[str] = field(default_factory=list)
    kube_context: str
    kubeconfig: str | None = None
    kubectl: str = DEFAULT_KUBECTL
    substrate_ref: str
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    concurrency: int = DEFAULT_CONCURRENCY

    def shard_inputs(self, index: int, actors: Sequence[str]) -> ShardInputs:
        """One shard's inputs: its actors, and every setting :class:`ShardInputs` has, copied by name."""
        settings = {key: getattr(self, key) for key in _SHARD_SETTINGS}
        settings = {key: tuple(value) if isinstance(value, list) else value for key, value in settings.items()}
        return ShardInputs(shard=index, actors=tuple(sorted(actors)), kubeconfig=self.kubeconfig or None, **settings)

    def shards(self) -> list[ShardInputs]:
        """One :class:`ShardInputs` per shard that holds at least one actor, by shard index."""
        members: dict[int, list[str]] = {}
        for ref in self.actors:
            members.setdefault(shard_of(ref), []).append(ref)
        return [self.shard_inputs(index, refs) for index, refs in sorted(members.items())]


_SHARD_SETTINGS = tuple(f.name for f in fields(ShardInputs) if f.name not in ("shard", "actors", "kubeconfig"))
"""The settings every shard's :class:`ShardInputs` takes from :class:`EgressPolicySettings` (by field name)."""


def settings_problems(settings: EgressPolicySettings) -> list[Problem]:
    """Every problem in ``settings``, reported once each (the shared part is checked once)."""
    problems: list[Problem] = []
    valid_refs: list[str] = []
    for ref in settings.actors:
        ref_problems = actor_ref_problems(ref)
        problems += ref_problems
        if ref_problems:
            continue
        if ref in valid_refs:
            problems.append(Problem("actors", f"actor {ref!r} is listed twice; list each actor once"))
            continue
        valid_refs.append(ref)
    # Everything but the actor names is the same for every actor: check it once.
    if valid_refs:
        sample = settings.shard_inputs(shard_of(valid_refs[0]), valid_refs[:1])
        problems += [p for p in shard_problems(sample) if p.field not in ("atespace", "actor", "actors")]
    return problems
