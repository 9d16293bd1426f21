"""Substrate's documented constraints on an egress policy, checked client-side before any ``kubectl ate``
call, each message naming the bad value and the fix (reference: ``apivalidation/egress_policy.go``)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from core.egress.document import (
    _DEFAULT_PORTS,
    POLICY_NAME,
    PolicyInputs,
    _get,
    _is_int,
    _rule_kind,
    as_int,
    build_policy,
)
from core.egress.problems import EgressConfigError, Problem
from core.egress.providers import provider_host_problems
from core.names import LABEL_PAIR

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

# Go's `$` is the end of the text; Python's also matches before a final newline, hence \Z.
_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
ACTOR_REF = LABEL_PAIR
"""A well-formed ``<atespace>/<name>`` (``fullmatch`` it): one match answers for the common case; a ref it
refuses gets the detailed checks and their messages."""
_TOKEN_RE = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_DNS_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")


def parse_actor_ref(ref: str) -> tuple[str, str]:
    """``"agents/actor-a"`` -> ``("agents", "actor-a")``; raises :class:`EgressConfigError`."""
    problems = actor_ref_problems(ref)
    if problems:
        raise EgressConfigError(problems)
    atespace, name = ref.split("/")
    return atespace, name


def actor_ref_problems(ref: Any) -> list[Problem]:
    """What is wrong with an actor ref (empty: nothing); checked once per actor, so the common case is one match."""
    if isinstance(ref, str) and ACTOR_REF.fullmatch(ref):
        return []
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
