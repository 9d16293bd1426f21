"""Validate custom resources against the pinned upstream CRD schemas, CEL rules included.

Why this exists: a plain OpenAPI validator ignores the structural-schema extensions and every
`x-kubernetes-validations` CEL rule, and the API server silently prunes unknown fields. Both hide
bugs until `pulumi up` meets a real cluster. This module replays what the API server does on
create (prune check -> defaults -> OpenAPI schema -> CEL) so unit tests catch them offline.

Public API: `crd_root`, `load_catalog`, `CrdCatalog`, `ValidationReport`, `CEL_STATS`,
`summary_lines`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import datetime
import functools
import hashlib
import ipaddress
import itertools
import json
import os
import re
import string
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import lark
import re2
import yaml
from celpy import celtypes
from celpy.evaluation import CELEvalError, base_functions
from jsonschema.exceptions import ValidationError

from rig import cache
from tests.support.ci import skip_or_fail

ENV_VAR = "AGENT_BUDGETS_CRDS"
REPO_ROOT = Path(__file__).resolve().parents[2]

Path_ = tuple[str | int, ...]


# --------------------------------------------------------------------------------------------
# Where the CRDs live
# --------------------------------------------------------------------------------------------


def crd_root() -> Path:
    """Folder holding the pinned CRD YAML files.

    `$AGENT_BUDGETS_CRDS` wins (a relative value is taken from the repo root, which is where
    `make` runs). Otherwise `<repo>/../shared/crds`, falling back to `<repo>/.crds` (what
    `make crds` writes) when only that one exists.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        p = Path(env).expanduser()
        return p if p.is_absolute() else REPO_ROOT / p
    shared = REPO_ROOT.parent / "shared" / "crds"
    local = REPO_ROOT / ".crds"
    if not shared.is_dir() and local.is_dir():
        return local
    return shared


MODULE_CRDS: dict[str, tuple[str, str, str]] = {
    "gateway.envoyproxy.io_envoyextensionpolicies.yaml": (
        "github.com/envoyproxy/gateway@v1.9.0",
        "charts/gateway-helm/charts/crds/crds/generated",
        "92f4dfdd67be4b242511381d6175f517782e655233fdf5b5e28a400ea5601f79",
    ),
}
"""CRDs the program needs beyond the shared folder, read from the upstream Go module in the module cache that
`make tools` fills (Envoy Gateway's, for egctl): file → (module@version, folder in the module, SHA-256, the same
as scripts/crds.sha256 records). The module zip is checked by the go command against the checksum database."""


def module_crd_documents() -> list[dict[str, Any]]:
    """The MODULE_CRDS documents found in the module cache, each checked against its recorded digest (`make tools`
    runs before the suite, so none is missing on CI)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    docs: list[dict[str, Any]] = []
    for name, (module, folder, digest) in MODULE_CRDS.items():
        path = cache.module_cache() / module / folder / name
        if not path.is_file():  # no Go here: an object of that kind then fails validation naming `make tools`
            continue
        text = path.read_bytes()
        if hashlib.sha256(text).hexdigest() != digest:
            raise AssertionError(f"{path} is not the pinned file (SHA-256 differs from {digest})")
        for doc in yaml.load_all(text.decode("utf-8"), Loader=loader):
            if isinstance(doc, dict):
                doc["_source"] = f"{module}/{folder}/{name}"
                docs.append(doc)
    return docs


_CATALOGS: dict[Path, CrdCatalog] = {}


def load_catalog() -> CrdCatalog:
    """The catalog for `crd_root()`, parsed once per session.

    Call from a test or fixture: a missing folder skips the test locally (with the hint to run
    `make crds`) but fails it when `$CI` is set, so CI can never go green without the schemas.
    """
    root = crd_root()
    cached = _CATALOGS.get(root)
    if cached is not None:
        return cached
    if not root.is_dir() or not any(not p.name.startswith(".") for p in root.glob("*/*.yaml")):
        msg = (
            f"CRD schemas not found at {root}: run `make crds` to fetch the pinned upstream CRD files "
            f"(then export {ENV_VAR}=<the folder it prints>)"
        )
        skip_or_fail(msg)
    catalog = CrdCatalog.from_dir(root, extra=module_crd_documents())
    _CATALOGS[root] = catalog
    return catalog


# --------------------------------------------------------------------------------------------
# Reports and session statistics
# --------------------------------------------------------------------------------------------


@dataclass
class ValidationReport:
    """Outcome of validating one object. `errors` empty means the API server would accept it."""

    subject: str = ""
    errors: list[str] = field(default_factory=list)
    cel_evaluated: int = 0
    cel_unsupported: list[str] = field(default_factory=list)
    cel_skipped_transition: int = 0
    warnings: list[str] = field(default_factory=list)
    # Rule texts that evaluated to false (or hit a runtime error the API server would also hit).
    cel_failed_rules: list[str] = field(default_factory=list)
    # "path=value" for every schema default applied before the schema and CEL checks.
    defaults_applied: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing would be rejected (unsupported rules are reported separately)."""
        return not self.errors

    def __str__(self) -> str:
        lines = [f"{self.subject}: {len(self.errors)} error(s), CEL {self.cel_evaluated} evaluated"]
        lines += [f"  ERROR {e}" for e in self.errors]
        lines += [f"  UNSUPPORTED {u}" for u in self.cel_unsupported]
        lines += [f"  WARNING {w}" for w in self.warnings]
        return "\n".join(lines)


@dataclass
class CelStats:
    """Running totals across the session, for the terminal summary."""

    objects: int = 0
    evaluated: int = 0
    unsupported: int = 0
    skipped_transition: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    unsupported_rules: dict[str, str] = field(default_factory=dict)

    def add(self, kind: str, report: ValidationReport, unsupported: Mapping[str, str]) -> None:
        """Fold one object's report into the totals."""
        self.objects += 1
        self.kinds[kind] += 1
        self.evaluated += report.cel_evaluated
        self.unsupported += len(report.cel_unsupported)
        self.skipped_transition += report.cel_skipped_transition
        for rule, reason in unsupported.items():
            self.unsupported_rules.setdefault(rule, reason)

    def as_plain(self) -> dict[str, Any]:
        """The totals as plain data, for a pytest-xdist worker to hand to the controller (`merge`)."""
        return {
            "objects": self.objects,
            "evaluated": self.evaluated,
            "unsupported": self.unsupported,
            "skipped_transition": self.skipped_transition,
            "kinds": dict(self.kinds),
            "unsupported_rules": dict(self.unsupported_rules),
        }

    def merge(self, other: Mapping[str, Any]) -> None:
        """Add another process's totals (`as_plain`), so that `make test` sums what every worker validated."""
        self.objects += other["objects"]
        self.evaluated += other["evaluated"]
        self.unsupported += other["unsupported"]
        self.skipped_transition += other["skipped_transition"]
        self.kinds.update(other["kinds"])
        for rule, reason in other["unsupported_rules"].items():
            self.unsupported_rules.setdefault(rule, reason)


CEL_STATS = CelStats()


CRD_PROJECTS = {"envoy-gateway": "Envoy Gateway", "ai-gateway": "Agent Router"}
_VERSION_DIR = re.compile(r"^(envoy-gateway|ai-gateway)-(v\d+\.\d+\.\d+\S*)$")


def crd_versions(root: Path) -> dict[str, list[str]]:
    """Which upstream versions the CRD folder holds, from its `<project>-<tag>` folder names
    (scripts/fetch-crds.sh and the shared copy name them that way)."""
    found: dict[str, list[str]] = {name: [] for name in CRD_PROJECTS.values()}
    if root.is_dir():
        for child in sorted(root.iterdir()):
            match = _VERSION_DIR.match(child.name)
            if match and child.is_dir():
                found[CRD_PROJECTS[match.group(1)]].append(match.group(2))
    return found


def deployed_versions() -> dict[str, str]:
    """The versions the program deploys by default (core.settings.PlatformSettings)."""
    from core.settings import PlatformSettings

    platform = PlatformSettings()
    return {"Envoy Gateway": platform.envoy_gateway_version, "Agent Router": platform.agent_router_version}


def versions_line(validated: Mapping[str, list[str]], deployed: Mapping[str, str]) -> str:
    """Name the versions the schemas came from, and say so when the program deploys others."""
    named = " and ".join(f"{project} {', '.join(tags) or '(unknown version)'}" for project, tags in validated.items())
    differ = [f"{project} {tag}" for project, tag in deployed.items() if [tag] != list(validated.get(project, []))]
    if not differ:
        return f"CRD versions: validated against {named}, the versions the program deploys by default"
    return (
        f"CRD versions: validated against {named}; the program deploys {' and '.join(differ)} by default, whose "
        f"CRDs were not used here (`make crds` fetches them; then export {ENV_VAR}=.crds)"
    )


def summary_lines() -> list[str]:
    """Lines for the pytest terminal summary; empty when no object was validated this session."""
    s = CEL_STATS
    if not s.objects:
        return []
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(s.kinds.items()))
    lines = [
        f"CRD schema: {s.objects} objects validated ({kinds}); CEL rules: {s.evaluated} evaluated, "
        f"{s.unsupported} could not be evaluated (unsupported), {s.skipped_transition} transition rules skipped",
        versions_line(crd_versions(crd_root()), deployed_versions()),
    ]
    for rule, reason in sorted(s.unsupported_rules.items()):
        lines.append(f"  unsupported CEL rule: {_shorten(rule, 200)} -- {reason}")
    return lines


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------

_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _fmt_path(path: Iterable[str | int]) -> str:
    """`spec.rules[0].name` style path, like the API server prints it."""
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        elif _IDENT_RE.match(p):
            out += f".{p}" if out else p
        else:
            out += f"[{json.dumps(p)}]"
    return out or "<root>"


def _shorten(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _q(value: Any) -> str:
    """Short JSON rendering of an offending value."""
    try:
        rendered = json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        rendered = repr(value)
    return _shorten(rendered, 100)


def _canonical(value: Any) -> str:
    """Stable identity for set / list-map uniqueness (keeps true and 1 apart)."""
    return json.dumps(value, sort_keys=True, default=str)


@functools.lru_cache(maxsize=4096)
def _re2(pattern: str) -> Any:
    """RE2 compile with a cache; Go (and so the API server) uses RE2 semantics, not Python `re`."""
    return re2.compile(pattern)


# --------------------------------------------------------------------------------------------
# Kubernetes CEL library on top of cel-python
# --------------------------------------------------------------------------------------------
#
# cel-python resolves functions by name only, with a method's receiver as first argument, so
# each entry below dispatches on argument types itself. Invalid *values* (a bad IP string, an
# out-of-range substring) return a CELEvalError tagged with _RUNTIME: the API server would
# reject the object too. Wrong *types* raise TypeError, which cel-python reports as "no such
# overload" and we count as unsupported (a library gap, not a verdict on the object).

_RUNTIME = "runtime error: "


def _fail(msg: str) -> CELEvalError:
    return CELEvalError(_RUNTIME + msg)


def _want_str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected string, got {type(v).__name__}")
    return v


def _want_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"expected int, got {type(v).__name__}")
    return int(v)


def _want_list(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise TypeError(f"expected list, got {type(v).__name__}")
    return v


@dataclass(frozen=True)
class _Namespace:
    """Receiver for namespaced functions such as `format.dns1123Label()` or `optional.none()`."""

    name: str


_NS_FORMAT = _Namespace("format")
_NS_OPTIONAL = _Namespace("optional")
_NS_SETS = _Namespace("sets")
_NS_STRINGS = _Namespace("strings")
_NS_IP = _Namespace("ip")


@dataclass(frozen=True)
class _Optional:
    """CEL optional; equals only another optional (as in cel-go, so `opt == null` is false)."""

    present: bool
    val: Any = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Optional):
            return False
        return self.present == other.present and (not self.present or self.val == other.val)

    def __hash__(self) -> int:
        return hash((self.present, str(self.val)))


_NONE = _Optional(False)


# ---- strings extension ----------------------------------------------------------------------

_TO_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_TO_UPPER = str.maketrans(string.ascii_lowercase, string.ascii_uppercase)


def _lower_ascii(s: Any) -> Any:
    return celtypes.StringType(_want_str(s).translate(_TO_LOWER))


def _upper_ascii(s: Any) -> Any:
    return celtypes.StringType(_want_str(s).translate(_TO_UPPER))


def _char_at(s: Any, i: Any) -> Any:
    text, idx = _want_str(s), _want_int(i)
    if idx < 0 or idx > len(text):
        return _fail(f"index out of range: {idx}")
    return celtypes.StringType(text[idx : idx + 1])


def _index_of(target: Any, item: Any, start: Any = None) -> Any:
    if isinstance(target, list):
        for i, x in enumerate(target):
            if x == item:
                return celtypes.IntType(i)
        return celtypes.IntType(-1)
    text, sub = _want_str(target), _want_str(item)
    offset = 0 if start is None else _want_int(start)
    if offset < 0 or offset > len(text):
        return _fail(f"index out of range: {offset}")
    return celtypes.IntType(text.find(sub, offset))


def _last_index_of(target: Any, item: Any, start: Any = None) -> Any:
    if isinstance(target, list):
        for i in range(len(target) - 1, -1, -1):
            if target[i] == item:
                return celtypes.IntType(i)
        return celtypes.IntType(-1)
    text, sub = _want_str(target), _want_str(item)
    if start is None:
        return celtypes.IntType(text.rfind(sub))
    offset = _want_int(start)
    if offset < 0 or offset >= max(len(text), 1):
        return _fail(f"index out of range: {offset}")
    return celtypes.IntType(text.rfind(sub, 0, offset + len(sub)))


def _replace(s: Any, old: Any, new: Any, n: Any = None) -> Any:
    count = -1 if n is None else _want_int(n)
    return celtypes.StringType(_want_str(s).replace(_want_str(old), _want_str(new), count))


def _split(s: Any, sep: Any, n: Any = None) -> Any:
    text, separator = _want_str(s), _want_str(sep)
    limit = -1 if n is None else _want_int(n)
    if limit == 0:
        return celtypes.ListType([])
    if separator == "":
        parts = list(text)
        if 0 < limit < len(parts):
            parts = [*parts[: limit - 1], "".join(parts[limit - 1 :])]
    else:
        parts = text.split(separator) if limit < 0 else text.split(separator, limit - 1)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _substring(s: Any, start: Any, end: Any = None) -> Any:
    text = _want_str(s)
    lo = _want_int(start)
    hi = len(text) if end is None else _want_int(end)
    if lo < 0 or lo > len(text) or hi < lo or hi > len(text):
        return _fail(f"substring({lo}, {hi}) out of range for a string of length {len(text)}")
    return celtypes.StringType(text[lo:hi])


def _trim(s: Any) -> Any:
    return celtypes.StringType(_want_str(s).strip())


def _join(lst: Any, sep: Any = None) -> Any:
    items = _want_list(lst)
    return celtypes.StringType(("" if sep is None else _want_str(sep)).join(_want_str(x) for x in items))


def _reverse(x: Any) -> Any:
    if isinstance(x, list):
        return celtypes.ListType(list(reversed(x)))
    return celtypes.StringType(_want_str(x)[::-1])


def _quote(ns: Any, s: Any) -> Any:
    if ns is not _NS_STRINGS:
        raise TypeError("quote() is strings.quote()")
    return celtypes.StringType(json.dumps(_want_str(s), ensure_ascii=False))


# ---- lists library ---------------------------------------------------------------------------


def _is_sorted(lst: Any) -> Any:
    items = _want_list(lst)
    return celtypes.BoolType(all(a <= b for a, b in itertools.pairwise(items)))


def _sum(lst: Any) -> Any:
    items = _want_list(lst)
    if not items:
        return celtypes.IntType(0)
    total = items[0]
    for x in items[1:]:
        total = total + x
    return total


def _min(lst: Any, *more: Any) -> Any:
    items = [lst, *more] if more else _want_list(lst)
    if not items:
        return _fail("min called on an empty list")
    return min(items)


def _max(lst: Any, *more: Any) -> Any:
    items = [lst, *more] if more else _want_list(lst)
    if not items:
        return _fail("max called on an empty list")
    return max(items)


def _slice(lst: Any, start: Any, end: Any) -> Any:
    items, lo, hi = _want_list(lst), _want_int(start), _want_int(end)
    if lo < 0 or hi < lo or hi > len(items):
        return _fail(f"slice({lo}, {hi}) out of range")
    return celtypes.ListType(items[lo:hi])


def _flatten(lst: Any, depth: Any = None) -> Any:
    levels = 1 if depth is None else _want_int(depth)

    def flat(items: list[Any], level: int) -> list[Any]:
        out: list[Any] = []
        for x in items:
            if isinstance(x, list) and level > 0:
                out.extend(flat(x, level - 1))
            else:
                out.append(x)
        return out

    return celtypes.ListType(flat(_want_list(lst), levels))


def _distinct(lst: Any) -> Any:
    out: list[Any] = []
    for x in _want_list(lst):
        if x not in out:
            out.append(x)
    return celtypes.ListType(out)


def _sort(lst: Any) -> Any:
    return celtypes.ListType(sorted(_want_list(lst)))


# ---- sets library (sets.contains / sets.equivalent / sets.intersects) -------------------------


def _contains(a: Any, b: Any, *rest: Any) -> Any:
    if a is _NS_SETS:
        container, items = _want_list(b), _want_list(rest[0])
        return celtypes.BoolType(all(x in container for x in items))
    return base_functions["contains"](a, b)


def _equivalent(ns: Any, a: Any, b: Any) -> Any:
    if ns is not _NS_SETS:
        raise TypeError("equivalent() is sets.equivalent()")
    la, lb = _want_list(a), _want_list(b)
    return celtypes.BoolType(all(x in lb for x in la) and all(x in la for x in lb))


def _intersects(ns: Any, a: Any, b: Any) -> Any:
    if ns is not _NS_SETS:
        raise TypeError("intersects() is sets.intersects()")
    lb = _want_list(b)
    return celtypes.BoolType(any(x in lb for x in _want_list(a)))


# ---- regex library ------------------------------------------------------------------------------


def _compiled(pattern: Any) -> Any:
    try:
        return _re2(_want_str(pattern))
    except re2.error as exc:
        return _fail(f"invalid regular expression {pattern!r}: {exc}")


def _matches(text: Any, pattern: Any) -> Any:
    rx = _compiled(pattern)
    if isinstance(rx, CELEvalError):
        return rx
    return celtypes.BoolType(rx.search(_want_str(text)) is not None)


def _find(text: Any, pattern: Any) -> Any:
    rx = _compiled(pattern)
    if isinstance(rx, CELEvalError):
        return rx
    m = rx.search(_want_str(text))
    return celtypes.StringType(m.group(0) if m else "")


def _find_all(text: Any, pattern: Any, n: Any = None) -> Any:
    rx = _compiled(pattern)
    if isinstance(rx, CELEvalError):
        return rx
    limit = -1 if n is None else _want_int(n)
    found = [celtypes.StringType(m.group(0)) for m in rx.finditer(_want_str(text))]
    return celtypes.ListType(found if limit < 0 else found[:limit])


# ---- duration (Go time.ParseDuration) ------------------------------------------------------------

_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNIT_NS = {
    "ns": 1,
    "us": 10**3,
    "µs": 10**3,
    "μs": 10**3,
    "ms": 10**6,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}


def _parse_go_duration(text: str) -> datetime.timedelta | None:
    """Go's duration grammar; cel-python's own parser accepts `d` and rejects a bare `0`."""
    s = text
    sign = 1
    if s and s[0] in "+-":
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return datetime.timedelta(0)
    if not s:
        return None
    total = Fraction(0)
    pos = 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if not m or m.group(1) in ("", "."):
            return None
        total += Fraction(m.group(1)) * _DURATION_UNIT_NS[m.group(2)]
        pos = m.end()
    return datetime.timedelta(microseconds=float(sign * total / 1000))


def _duration(value: Any) -> Any:
    if isinstance(value, datetime.timedelta):
        return celtypes.DurationType(value)
    parsed = _parse_go_duration(_want_str(value))
    if parsed is None:
        return _fail(f"invalid duration {value!r}")
    return celtypes.DurationType(parsed)


# ---- IP and CIDR library -----------------------------------------------------------------------


@dataclass(frozen=True)
class _IP:
    addr: ipaddress.IPv4Address | ipaddress.IPv6Address

    def __str__(self) -> str:
        return str(self.addr)


@dataclass(frozen=True)
class _CIDR:
    iface: ipaddress.IPv4Interface | ipaddress.IPv6Interface

    def __str__(self) -> str:
        return str(self.iface)


def _parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """Kubernetes rules: no zones, no IPv4-mapped IPv6, no leading zeros in IPv4 octets."""
    if "%" in text:
        return None
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return None
    return addr


def _parse_cidr(text: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface | None:
    if "/" not in text or "%" in text:
        return None
    addr, _, prefix = text.partition("/")
    if _parse_ip(addr) is None or not prefix.isdigit() or (len(prefix) > 1 and prefix[0] == "0"):
        return None
    try:
        return ipaddress.ip_interface(text)
    except ValueError:
        return None


def _ip(value: Any, *rest: Any) -> Any:
    if value is _NS_IP:  # ip.isCanonical is routed separately; nothing else lives under ip.
        raise TypeError("unknown ip.* function")
    if isinstance(value, _CIDR):
        return _IP(value.iface.ip)
    addr = _parse_ip(_want_str(value))
    if addr is None:
        return _fail(f"IP Address {value!r} parse error")
    return _IP(addr)


def _is_ip(value: Any) -> Any:
    return celtypes.BoolType(_parse_ip(_want_str(value)) is not None)


def _is_canonical(ns: Any, value: Any) -> Any:
    if ns is not _NS_IP:
        raise TypeError("isCanonical() is ip.isCanonical()")
    addr = _parse_ip(_want_str(value))
    if addr is None:
        return _fail(f"IP Address {value!r} parse error")
    return celtypes.BoolType(str(addr) == value)


def _want_ip(v: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if not isinstance(v, _IP):
        raise TypeError("expected net.IP")
    return v.addr


def _family(v: Any) -> Any:
    return celtypes.IntType(_want_ip(v).version)


def _is_unspecified(v: Any) -> Any:
    return celtypes.BoolType(_want_ip(v).is_unspecified)


def _is_loopback(v: Any) -> Any:
    return celtypes.BoolType(_want_ip(v).is_loopback)


def _is_link_local_multicast(v: Any) -> Any:
    a = _want_ip(v)
    net = ipaddress.ip_network("224.0.0.0/24" if a.version == 4 else "ff02::/16")
    return celtypes.BoolType(a in net)


def _is_link_local_unicast(v: Any) -> Any:
    a = _want_ip(v)
    return celtypes.BoolType(a.is_link_local and not a.is_multicast)


def _is_global_unicast(v: Any) -> Any:
    a = _want_ip(v)
    broadcast = a.version == 4 and a == ipaddress.IPv4Address("255.255.255.255")
    return celtypes.BoolType(not (a.is_unspecified or a.is_loopback or a.is_multicast or a.is_link_local or broadcast))


def _cidr(value: Any) -> Any:
    iface = _parse_cidr(_want_str(value))
    if iface is None:
        return _fail(f"network address {value!r} parse error")
    return _CIDR(iface)


def _is_cidr(value: Any) -> Any:
    return celtypes.BoolType(_parse_cidr(_want_str(value)) is not None)


def _want_cidr(v: Any) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    if not isinstance(v, _CIDR):
        raise TypeError("expected net.IPPrefix")
    return v.iface


def _contains_ip(c: Any, other: Any) -> Any:
    net = _want_cidr(c).network
    if isinstance(other, str):
        addr = _parse_ip(other)
        if addr is None:
            return _fail(f"IP Address {other!r} parse error")
    else:
        addr = _want_ip(other)
    return celtypes.BoolType(addr.version == net.version and addr in net)


def _contains_cidr(c: Any, other: Any) -> Any:
    net = _want_cidr(c).network
    if isinstance(other, str):
        iface = _parse_cidr(other)
        if iface is None:
            return _fail(f"network address {other!r} parse error")
    else:
        iface = _want_cidr(other)
    sub = iface.network
    return celtypes.BoolType(sub.version == net.version and sub.subnet_of(net))  # type: ignore[arg-type]


def _prefix_length(c: Any) -> Any:
    return celtypes.IntType(_want_cidr(c).network.prefixlen)


def _masked(c: Any) -> Any:
    net = _want_cidr(c).network
    return _CIDR(ipaddress.ip_interface(str(net)))


# ---- URL library (Go url.ParseRequestURI semantics, approximately) ----------------------------

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(.*)$", re.S)
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_HOST_CHARS = re.compile(r"^[A-Za-z0-9.\-_~!$&'()*+,;=%]*$")


@dataclass(frozen=True)
class _URL:
    scheme: str
    host: str
    path: str
    query: str

    def __str__(self) -> str:
        auth = f"//{self.host}" if self.host else ""
        q = f"?{self.query}" if self.query else ""
        return f"{self.scheme + ':' if self.scheme else ''}{auth}{self.path}{q}"


def _parse_url(text: str) -> _URL | None:
    """Absolute URI or absolute path only, as Kubernetes' isURL/url() demand."""
    if not text or any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        return None
    scheme = ""
    rest = text
    if not text.startswith("/"):
        m = _SCHEME_RE.match(text)
        if not m:
            return None
        scheme, rest = m.group(1), m.group(2)
        if not rest.startswith("/"):
            return None
    rest, _, query = rest.partition("?")
    host = ""
    path = rest
    if scheme and rest.startswith("//"):
        authority, slash, tail = rest[2:].partition("/")
        path = slash + tail
        host = authority.rpartition("@")[2]
        if host.startswith("["):
            close = host.find("]")
            if close < 0:
                return None
            with contextlib.suppress(ValueError):
                ipaddress.IPv6Address(host[1:close].split("%")[0])
            after = host[close + 1 :]
            if after and not re.fullmatch(r":[0-9]*", after):
                return None
        else:
            name, colon, port = host.rpartition(":") if ":" in host else (host, "", "")
            if colon and not port.isdigit() and port != "":
                return None
            if not _HOST_CHARS.match(name):
                return None
    if _BAD_PERCENT.search(path) or _BAD_PERCENT.search(host):
        return None
    return _URL(scheme, host, path, query)


def _url(value: Any) -> Any:
    parsed = _parse_url(_want_str(value))
    if parsed is None:
        return _fail(f"URL parse error during conversion from string: {value!r}")
    return parsed


def _is_url(value: Any) -> Any:
    return celtypes.BoolType(_parse_url(_want_str(value)) is not None)


def _want_url(v: Any) -> _URL:
    if not isinstance(v, _URL):
        raise TypeError("expected URL")
    return v


def _get_scheme(u: Any) -> Any:
    return celtypes.StringType(_want_url(u).scheme)


def _get_host(u: Any) -> Any:
    return celtypes.StringType(_want_url(u).host)


def _split_host(host: str) -> tuple[str, str]:
    if host.startswith("["):
        close = host.find("]")
        return host[1:close], host[close + 2 :] if host[close + 1 : close + 2] == ":" else ""
    if ":" in host:
        name, _, port = host.rpartition(":")
        return name, port
    return host, ""


def _get_hostname(u: Any) -> Any:
    return celtypes.StringType(_split_host(_want_url(u).host)[0])


def _get_port(u: Any) -> Any:
    return celtypes.StringType(_split_host(_want_url(u).host)[1])


def _get_escaped_path(u: Any) -> Any:
    return celtypes.StringType(urllib.parse.quote(_want_url(u).path, safe="/:@!$&'()*+,;=-._~%"))


def _get_query(u: Any) -> Any:
    parsed = urllib.parse.parse_qs(_want_url(u).query, keep_blank_values=True)
    return celtypes.MapType(
        {celtypes.StringType(k): celtypes.ListType([celtypes.StringType(x) for x in v]) for k, v in parsed.items()}
    )


# ---- quantity library ----------------------------------------------------------------------------

_QTY_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_QTY_SCALE: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_INT64 = (-(2**63), 2**63 - 1)
_INT32 = (-(2**31), 2**31 - 1)


@dataclass(frozen=True)
class _Quantity:
    value: Fraction
    text: str

    def __str__(self) -> str:
        return self.text


def _parse_quantity(text: str) -> Fraction | None:
    m = _QTY_RE.match(text)
    if not m:
        return None
    number, suffix = Fraction(m.group(1)), m.group(2) or ""
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return number * Fraction(10) ** int(suffix[1:])
    return number * _QTY_SCALE[suffix]


def _quantity(value: Any) -> Any:
    parsed = _parse_quantity(_want_str(value))
    if parsed is None:
        return _fail(f"quantities must match the regular expression: {value!r}")
    return _Quantity(parsed, str(value))


def _is_quantity(value: Any) -> Any:
    return celtypes.BoolType(_parse_quantity(_want_str(value)) is not None)


def _qval(v: Any) -> Fraction:
    if isinstance(v, _Quantity):
        return v.value
    return Fraction(_want_int(v))


def _sign(q: Any) -> Any:
    v = _qval(q)
    return celtypes.IntType((v > 0) - (v < 0))


def _is_integer(q: Any) -> Any:
    v = _qval(q)
    return celtypes.BoolType(v.denominator == 1 and _INT64[0] <= v <= _INT64[1])


def _as_integer(q: Any) -> Any:
    v = _qval(q)
    if v.denominator != 1 or not _INT64[0] <= v <= _INT64[1]:
        return _fail("cannot convert value to integer")
    return celtypes.IntType(int(v))


def _as_approximate_float(q: Any) -> Any:
    return celtypes.DoubleType(float(_qval(q)))


def _add(q: Any, other: Any) -> Any:
    total = _qval(q) + _qval(other)
    return _Quantity(total, str(float(total)))


def _sub(q: Any, other: Any) -> Any:
    total = _qval(q) - _qval(other)
    return _Quantity(total, str(float(total)))


def _compare_to(q: Any, other: Any) -> Any:
    a, b = _qval(q), _qval(other)
    return celtypes.IntType((a > b) - (a < b))


def _is_less_than(q: Any, other: Any) -> Any:
    return celtypes.BoolType(_qval(q) < _qval(other))


def _is_greater_than(q: Any, other: Any) -> Any:
    return celtypes.BoolType(_qval(q) > _qval(other))


# ---- format library (format.dns1123Label().validate(x) etc.) -------------------------------

_DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_QUALIFIED_NAME_PART = r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
_LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
_UUID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _check_regex(value: str, pattern: str, max_len: int, what: str) -> list[str]:
    errs = []
    if len(value) > max_len:
        errs.append(f"must be no more than {max_len} characters")
    if not _re2(pattern).search(value):
        errs.append(f"a {what} must match the regex '{pattern}'")
    return errs


def _check_qualified_name(value: str) -> list[str]:
    """Label keys and other qualified names: optional DNS-subdomain prefix, then a 63-char name."""
    prefix, slash, name = value.rpartition("/")
    errs: list[str] = []
    if slash:
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += _check_regex(prefix, _DNS1123_SUBDOMAIN, 253, "DNS-1123 subdomain prefix")
    if not name:
        errs.append("name part must be non-empty")
    else:
        errs += _check_regex(name, _QUALIFIED_NAME_PART, 63, "qualified name")
    return errs


def _check_date(value: str) -> list[str]:
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return ["must be a date in the form YYYY-MM-DD"]
    return [] if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value) else ["must be a date in the form YYYY-MM-DD"]


def _check_datetime(value: str) -> list[str]:
    if not _RFC3339.match(value):
        return ["must be an RFC 3339 date-time"]
    try:
        datetime.datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00").replace(" ", "T"))
    except ValueError:
        return ["must be an RFC 3339 date-time"]
    return []


def _check_byte(value: str) -> list[str]:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return ["must be base64 encoded"]
    return []


def _prefix_masked(value: str) -> str:
    """`...Prefix` formats accept a trailing dash (generateName style)."""
    return value[:-1] + "a" if value.endswith("-") else value


_FORMAT_CHECKS: dict[str, Callable[[str], list[str]]] = {
    "dns1123Label": lambda v: _check_regex(v, _DNS1123_LABEL, 63, "lowercase RFC 1123 label"),
    "dns1123Subdomain": lambda v: _check_regex(v, _DNS1123_SUBDOMAIN, 253, "lowercase RFC 1123 subdomain"),
    "dns1035Label": lambda v: _check_regex(v, _DNS1035_LABEL, 63, "DNS-1035 label"),
    "qualifiedName": _check_qualified_name,
    "dns1123LabelPrefix": lambda v: _check_regex(_prefix_masked(v), _DNS1123_LABEL, 63, "RFC 1123 label"),
    "dns1123SubdomainPrefix": lambda v: _check_regex(_prefix_masked(v), _DNS1123_SUBDOMAIN, 253, "RFC 1123 subdomain"),
    "dns1035LabelPrefix": lambda v: _check_regex(_prefix_masked(v), _DNS1035_LABEL, 63, "DNS-1035 label"),
    "labelValue": lambda v: _check_regex(v, _LABEL_VALUE, 63, "label value"),
    "uri": lambda v: [] if _parse_url(v) is not None else ["must be a valid URI"],
    "uuid": lambda v: _check_regex(v, _UUID, 36, "UUID"),
    "byte": _check_byte,
    "date": _check_date,
    "datetime": _check_datetime,
}


@dataclass(frozen=True)
class _Format:
    name: str


def _format_factory(name: str) -> Callable[[Any], Any]:
    def factory(ns: Any) -> Any:
        if ns is not _NS_FORMAT:
            raise TypeError(f"{name}() is format.{name}()")
        return _Format(name)

    return factory


def _named(ns: Any, name: Any) -> Any:
    if ns is not _NS_FORMAT:
        raise TypeError("named() is format.named()")
    key = _want_str(name)
    return _Optional(True, _Format(key)) if key in _FORMAT_CHECKS else _NONE


def _validate_format(fmt: Any, value: Any) -> Any:
    if not isinstance(fmt, _Format):
        raise TypeError("validate() needs a format")
    errs = _FORMAT_CHECKS[fmt.name](_want_str(value))
    if not errs:
        return _NONE
    return _Optional(True, celtypes.ListType([celtypes.StringType(e) for e in errs]))


# ---- optional library --------------------------------------------------------------------------


def _opt_of(ns: Any, value: Any) -> Any:
    if ns is not _NS_OPTIONAL:
        raise TypeError("of() is optional.of()")
    return _Optional(True, value)


def _opt_none(ns: Any) -> Any:
    if ns is not _NS_OPTIONAL:
        raise TypeError("none() is optional.none()")
    return _NONE


def _opt_of_non_zero(ns: Any, value: Any) -> Any:
    if ns is not _NS_OPTIONAL:
        raise TypeError("ofNonZeroValue() is optional.ofNonZeroValue()")
    zero = value is None or (not isinstance(value, _Optional) and not value)
    return _NONE if zero else _Optional(True, value)


def _has_value(opt: Any) -> Any:
    if not isinstance(opt, _Optional):
        raise TypeError("hasValue() needs an optional")
    return celtypes.BoolType(opt.present)


def _value(opt: Any) -> Any:
    if not isinstance(opt, _Optional):
        raise TypeError("value() needs an optional")
    return opt.val if opt.present else _fail("optional.none() dereference")


def _or_value(opt: Any, default: Any) -> Any:
    if not isinstance(opt, _Optional):
        raise TypeError("orValue() needs an optional")
    return opt.val if opt.present else default


# ---- logical operators: keep the first error when both operands fail -------------------------
# cel-python turns `error || error` (and an erroring ternary condition) into "no matching
# overload", which would hide a genuine runtime error (e.g. "no such key") behind a library gap.


def _logical_or(x: Any, y: Any) -> Any:
    if isinstance(x, CELEvalError) and isinstance(y, CELEvalError):
        return x
    return celtypes.logical_or(x, y)


def _logical_and(x: Any, y: Any) -> Any:
    if isinstance(x, CELEvalError) and isinstance(y, CELEvalError):
        return x
    return celtypes.logical_and(x, y)


def _conditional(cond: Any, x: Any, y: Any) -> Any:
    if isinstance(cond, CELEvalError):
        return cond
    return celtypes.logical_condition(cond, x, y)


# ---- registry --------------------------------------------------------------------------------------

K8S_CEL_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "_||_": _logical_or,
    "_&&_": _logical_and,
    "_?_:_": _conditional,
    # strings
    "lowerAscii": _lower_ascii,
    "upperAscii": _upper_ascii,
    "charAt": _char_at,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "replace": _replace,
    "split": _split,
    "substring": _substring,
    "trim": _trim,
    "join": _join,
    "reverse": _reverse,
    "quote": _quote,
    # lists and sets
    "isSorted": _is_sorted,
    "sum": _sum,
    "min": _min,
    "max": _max,
    "slice": _slice,
    "flatten": _flatten,
    "distinct": _distinct,
    "sort": _sort,
    "contains": _contains,
    "equivalent": _equivalent,
    "intersects": _intersects,
    # regex
    "matches": _matches,
    "find": _find,
    "findAll": _find_all,
    # time
    "duration": _duration,
    # IP / CIDR
    "ip": _ip,
    "isIP": _is_ip,
    "isCanonical": _is_canonical,
    "family": _family,
    "isUnspecified": _is_unspecified,
    "isLoopback": _is_loopback,
    "isLinkLocalMulticast": _is_link_local_multicast,
    "isLinkLocalUnicast": _is_link_local_unicast,
    "isGlobalUnicast": _is_global_unicast,
    "cidr": _cidr,
    "isCIDR": _is_cidr,
    "containsIP": _contains_ip,
    "containsCIDR": _contains_cidr,
    "prefixLength": _prefix_length,
    "masked": _masked,
    # URL
    "url": _url,
    "isURL": _is_url,
    "getScheme": _get_scheme,
    "getHost": _get_host,
    "getHostname": _get_hostname,
    "getPort": _get_port,
    "getEscapedPath": _get_escaped_path,
    "getQuery": _get_query,
    # quantity
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "sign": _sign,
    "isInteger": _is_integer,
    "asInteger": _as_integer,
    "asApproximateFloat": _as_approximate_float,
    "add": _add,
    "sub": _sub,
    "compareTo": _compare_to,
    "isLessThan": _is_less_than,
    "isGreaterThan": _is_greater_than,
    # format
    "named": _named,
    "validate": _validate_format,
    **{name: _format_factory(name) for name in _FORMAT_CHECKS},
    # optional
    "of": _opt_of,
    "none": _opt_none,
    "ofNonZeroValue": _opt_of_non_zero,
    "hasValue": _has_value,
    "value": _value,
    "orValue": _or_value,
}

_NAMESPACE_VARS: dict[str, Any] = {
    "format": _NS_FORMAT,
    "optional": _NS_OPTIONAL,
    "sets": _NS_SETS,
    "strings": _NS_STRINGS,
    "ip": _NS_IP,
}
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter", "has", "dyn"})
_KNOWN_FUNCTIONS = frozenset(base_functions) | frozenset(K8S_CEL_FUNCTIONS)

# Kubernetes escapes property names that are CEL keywords or contain `.`, `-`, `/`, `__`.
_CEL_RESERVED = frozenset(
    {
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    }
)
_ESCAPE_TOKEN = re.compile(r"__|[./-]|[^A-Za-z0-9_./-]")


def escape_property_name(name: str) -> str | None:
    """Name under which CEL sees an object property (None: not accessible from CEL)."""
    if not name or name[0].isdigit():
        return None
    if name in _CEL_RESERVED:
        return f"__{name}__"
    ok = True

    def sub(m: re.Match[str]) -> str:
        nonlocal ok
        token = m.group(0)
        replacement = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}.get(token)
        if replacement is None:
            ok = False
            return ""
        return replacement

    escaped = _ESCAPE_TOKEN.sub(sub, name)
    return escaped if ok else None


# --------------------------------------------------------------------------------------------
# Compiled CEL rules
# --------------------------------------------------------------------------------------------


@functools.cache
def _cel_env() -> celpy.Environment:
    """Built on first use: creating cel-python's parser costs ~0.2 s, too much for every pytest start."""
    return celpy.Environment()


@dataclass
class _CompiledExpr:
    text: str
    program: Any = None
    error: str | None = None  # why it cannot be evaluated at all
    references_old_self: bool = False
    functions: frozenset[str] = frozenset()


def _referenced_functions(ast: lark.Tree) -> frozenset[str]:
    names: set[str] = set()
    for node in ast.iter_subtrees():
        if node.data == "member_dot_arg":
            names.add(str(node.children[1]))
        elif node.data in ("ident_arg", "dot_ident_arg"):
            names.add(str(node.children[0]))
    return frozenset(names - _MACROS)


@functools.cache
def _compile(text: str) -> _CompiledExpr:
    """Parse and bind one CEL expression once per session."""
    out = _CompiledExpr(text)
    try:
        ast = _cel_env().compile(text)
    except Exception as exc:  # cel-python raises several parser exception types
        out.error = f"cel-python cannot parse it: {_shorten(str(exc), 120)}"
        return out
    out.references_old_self = any(
        isinstance(tok, lark.Token) and tok.type == "IDENT" and tok.value == "oldSelf"
        for tok in ast.scan_values(lambda v: isinstance(v, lark.Token))
    )
    out.functions = _referenced_functions(ast)
    missing = sorted(out.functions - _KNOWN_FUNCTIONS)
    if missing:
        out.error = f"function(s) not implemented in this validator: {', '.join(missing)}"
        return out
    try:
        out.program = _cel_env().program(ast, functions=K8S_CEL_FUNCTIONS)
    except Exception as exc:
        out.error = f"cel-python cannot build it: {_shorten(str(exc), 120)}"
    return out


def _classify_eval_error(exc: BaseException) -> tuple[bool, str]:
    """(API server would reject too?, reason). Missing keys, bad indexes and bad values are real."""
    if not isinstance(exc, CELEvalError):
        return False, f"{type(exc).__name__}: {_shorten(str(exc), 160)}"
    msg = str(exc.args[0]) if exc.args else ""
    cause = exc.args[1] if len(exc.args) > 1 else None
    if msg.startswith(_RUNTIME):
        return True, msg[len(_RUNTIME) :]
    if msg.startswith("undeclared reference"):
        return False, _shorten(msg.split(" (in activation")[0], 160)
    if (cause is KeyError and msg.startswith("no such")) or cause in (IndexError, ZeroDivisionError):
        detail = exc.args[2] if len(exc.args) > 2 else ""
        return True, _shorten(f"{msg} {detail or ''}".strip(), 160)
    return False, _shorten(msg, 160)


def evaluate_cel(expr: str, self_value: Any, **variables: Any) -> Any:
    """Evaluate an expression against plain JSON-like data (for tests of the library itself)."""
    compiled = _compile(expr)
    if compiled.program is None:
        raise ValueError(compiled.error)
    activation = {**_NAMESPACE_VARS, "self": _plain_to_cel(self_value)}
    activation.update({k: _plain_to_cel(v) for k, v in variables.items()})
    return compiled.program.evaluate(activation)


# --------------------------------------------------------------------------------------------
# JSON -> CEL values (schema aware, as the API server types them)
# --------------------------------------------------------------------------------------------


def _plain_to_cel(v: Any) -> Any:
    if v is None or isinstance(v, (_Namespace, _Optional, _IP, _CIDR, _URL, _Quantity, _Format)):
        return v
    if isinstance(v, bool):
        return celtypes.BoolType(v)
    if isinstance(v, int):
        return celtypes.IntType(v)
    if isinstance(v, float):
        return celtypes.DoubleType(v)
    if isinstance(v, str):
        return celtypes.StringType(v)
    if isinstance(v, Mapping):
        return celtypes.MapType({celtypes.StringType(k): _plain_to_cel(x) for k, x in v.items()})
    if isinstance(v, (list, tuple)):
        return celtypes.ListType([_plain_to_cel(x) for x in v])
    raise TypeError(f"cannot convert {type(v).__name__} to CEL")


def _scalar_to_cel(v: Any, schema: Mapping[str, Any]) -> Any:
    if isinstance(v, bool):
        return celtypes.BoolType(v)
    if isinstance(v, (int, float)):
        if schema.get("type") == "number" or (isinstance(v, float) and not v.is_integer()):
            return celtypes.DoubleType(float(v))
        if not _INT64[0] <= v <= _INT64[1]:
            return celtypes.DoubleType(float(v))  # already a schema error; keep CEL going
        return celtypes.IntType(int(v))
    if isinstance(v, str):
        fmt = schema.get("format")
        if fmt == "byte":
            with contextlib.suppress(binascii.Error, ValueError):
                return celtypes.BytesType(base64.b64decode(v, validate=True))
        elif fmt == "date-time":
            with contextlib.suppress(Exception):
                return celtypes.TimestampType(v)
        elif fmt == "duration":
            parsed = _parse_go_duration(v)
            if parsed is not None:
                return celtypes.DurationType(parsed)
        return celtypes.StringType(v)
    return _plain_to_cel(v)


def _type_matches(value: Any, schema: Mapping[str, Any]) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, (int, str)) and not isinstance(value, bool)
    t = schema.get("type")
    if t is None:
        return True
    if t == "object":
        return isinstance(value, dict)
    if t == "array":
        return isinstance(value, list)
    if t == "string":
        return isinstance(value, str)
    if t == "boolean":
        return isinstance(value, bool)
    if t == "integer":
        return _is_integer_value(value)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return True


def _is_integer_value(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


# --------------------------------------------------------------------------------------------
# Structural schema -> jsonschema
# --------------------------------------------------------------------------------------------

_CLOSED = "x-agent-budgets-closed"  # allowed property names of an object that drops unknown fields
_META_KEYS = "x-agent-budgets-meta-keys"  # "labels" | "annotations": key/value checks of ObjectMeta

_OBJECT_META: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 253, "pattern": _DNS1123_SUBDOMAIN},
        "generateName": {"type": "string", "maxLength": 253},
        "namespace": {"type": "string", "maxLength": 63, "pattern": _DNS1123_LABEL},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}, _META_KEYS: "labels"},
        "annotations": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            _META_KEYS: "annotations",
        },
        "finalizers": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        "ownerReferences": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["apiVersion", "kind", "name", "uid"],
                "x-kubernetes-preserve-unknown-fields": True,
            },
        },
    },
    _CLOSED: ["annotations", "finalizers", "generateName", "labels", "name", "namespace", "ownerReferences"],
}

_STRUCTURE_KEYS = ("properties", "items", "additionalProperties", "allOf", "anyOf", "oneOf", "not")


def _value_validation(schema: Any) -> Any:
    """allOf/anyOf/oneOf/not branches: value checks only, so never closed for unknown fields."""
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k != "description" and k not in _STRUCTURE_KEYS}
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: _value_validation(v) for k, v in schema["properties"].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(schema.get(key), dict):
            out[key] = _value_validation(schema[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            out[key] = [_value_validation(x) for x in schema[key]]
    return out


def _structural(schema: Mapping[str, Any], *, root: bool = False) -> dict[str, Any]:
    """Copy of a CRD schema node with the extensions turned into keywords our validator checks."""
    out: dict[str, Any] = {k: v for k, v in schema.items() if k != "description" and k not in _STRUCTURE_KEYS}
    props = schema.get("properties")
    if isinstance(props, dict):
        out["properties"] = {k: _structural(v) for k, v in props.items()}
    if isinstance(schema.get("items"), dict):
        out["items"] = _structural(schema["items"])
    ap = schema.get("additionalProperties")
    if ap is not None:
        out["additionalProperties"] = _structural(ap) if isinstance(ap, dict) else ap
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            out[key] = [_value_validation(x) for x in schema[key]]
    if isinstance(schema.get("not"), dict):
        out["not"] = _value_validation(schema["not"])

    if schema.get("x-kubernetes-embedded-resource"):
        embedded = out.setdefault("properties", {})
        embedded.setdefault("apiVersion", {"type": "string"})
        embedded.setdefault("kind", {"type": "string"})
        embedded.setdefault("metadata", _structural(_OBJECT_META))

    if root:
        meta = dict(_OBJECT_META)
        crd_meta = (props or {}).get("metadata") or {}
        if set(crd_meta) - {"type", "description"}:
            meta = {**meta, "allOf": [_value_validation(crd_meta)]}
        out.setdefault("properties", {})["metadata"] = meta

    is_object = schema.get("type") == "object" or isinstance(props, dict)
    if is_object and ap is None and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out[_CLOSED] = sorted((out.get("properties") or {}).keys())
    return out


def _kw_type(validator: Any, types: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if instance is None:
        if not schema.get("nullable"):
            yield ValidationError("Invalid value: null: field is not nullable (omit it instead)")
        return
    wanted = types if isinstance(types, list) else [types]
    if not any(validator.is_type(instance, t) for t in wanted):
        yield ValidationError(f"Invalid value: {_q(instance)}: must be of type {'|'.join(wanted)}")


def _kw_enum(validator: Any, enums: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if instance is None and schema.get("nullable"):
        return
    if not any(_canonical(instance) == _canonical(e) for e in enums):
        supported = ", ".join(_q(e) for e in enums)
        yield ValidationError(f"Unsupported value: {_q(instance)}: supported values: {supported}")


def _kw_required(validator: Any, required: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not isinstance(instance, dict):
        return
    for name in required:
        if name not in instance:
            yield ValidationError("Required value", path=[name])


def _kw_pattern(validator: Any, pattern: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not isinstance(instance, str):
        return
    try:
        rx = _re2(pattern)
    except re2.error as exc:
        yield ValidationError(f"schema pattern {pattern!r} is not valid RE2: {exc}")
        return
    if not rx.search(instance):
        yield ValidationError(f"Invalid value: {_q(instance)}: should match '{pattern}'")


def _int_range_check(lo: int, hi: int) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if _is_integer_value(v) and not lo <= v <= hi:
            return f"out of range for the format ({lo}..{hi})"
        return None

    return check


def _str_check(fn: Callable[[str], list[str]]) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if isinstance(v, str):
            errs = fn(v)
            return "; ".join(errs) if errs else None
        return None

    return check


def _ipv4_check(v: str) -> list[str]:
    try:
        ipaddress.IPv4Address(v)
    except ValueError:
        return ["must be a valid IPv4 address"]
    return []


def _ipv6_check(v: str) -> list[str]:
    try:
        ipaddress.IPv6Address(v)
    except ValueError:
        return ["must be a valid IPv6 address"]
    return []


def _uuid_check(v: str) -> list[str]:
    try:
        uuid.UUID(v)
    except ValueError:
        return ["must be a valid UUID"]
    return []


# Formats the API server checks; any other format (e.g. "password") is ignored, as there.
_FORMATS: dict[str, Callable[[Any], str | None]] = {
    "int32": _int_range_check(*_INT32),
    "int64": _int_range_check(*_INT64),
    "byte": _str_check(_check_byte),
    "date-time": _str_check(_check_datetime),
    "datetime": _str_check(_check_datetime),
    "date": _str_check(_check_date),
    "ipv4": _str_check(_ipv4_check),
    "ipv6": _str_check(_ipv6_check),
    "uuid": _str_check(_uuid_check),
    "cidr": _str_check(lambda v: [] if _parse_cidr(v) is not None else ["must be a valid CIDR"]),
    "uri": _str_check(lambda v: [] if _parse_url(v) is not None else ["must be a valid URI"]),
    "duration": _str_check(lambda v: [] if _parse_go_duration(v) is not None else ["must be a duration"]),
}


def _kw_format(validator: Any, fmt: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    check = _FORMATS.get(fmt)
    if check is None:
        return
    problem = check(instance)
    if problem:
        yield ValidationError(f"Invalid value: {_q(instance)}: {problem} (format {fmt})")


def _kw_int_or_string(
    validator: Any, enabled: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not enabled or "anyOf" in schema:  # an anyOf of integer|string already says it
        return
    if instance is None and schema.get("nullable"):
        return
    if isinstance(instance, bool) or not isinstance(instance, (int, str)):
        yield ValidationError(f"Invalid value: {_q(instance)}: must be an integer or a string")


def _kw_list_type(
    validator: Any, list_type: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not isinstance(instance, list) or list_type not in ("set", "map"):
        return
    keys = schema.get("x-kubernetes-list-map-keys") or []
    seen: set[str] = set()
    for i, item in enumerate(instance):
        if list_type == "set":
            ident: Any = item
        elif isinstance(item, dict):
            ident = {k: item.get(k) for k in keys}
        else:
            continue
        token = _canonical(ident)
        if token in seen:
            yield ValidationError(f"Duplicate value: {_q(ident)} (x-kubernetes-list-type: {list_type})", path=[i])
        seen.add(token)


def _kw_embedded(validator: Any, enabled: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not enabled or not isinstance(instance, dict):
        return
    for key in ("apiVersion", "kind"):
        if not instance.get(key):
            yield ValidationError("Required value (embedded resource)", path=[key])


def _kw_closed(validator: Any, allowed: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not isinstance(instance, dict):
        return
    for key in instance:
        if key not in allowed:
            yield ValidationError(
                f'unknown field "{key}" (not in the schema: the API server would silently drop it)', path=[key]
            )


def _kw_meta_keys(validator: Any, which: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not isinstance(instance, dict):
        return
    total = 0
    for key, value in instance.items():
        for problem in _check_qualified_name(key):
            yield ValidationError(f"Invalid value: {_q(key)}: {problem}", path=[key])
        if which == "labels" and isinstance(value, str):
            for problem in _check_regex(value, _LABEL_VALUE, 63, "label value"):
                yield ValidationError(f"Invalid value: {_q(value)}: {problem}", path=[key])
        total += len(key) + (len(value) if isinstance(value, str) else 0)
    if which == "annotations" and total > 256 * 1024:
        yield ValidationError(f"Too long: annotations total {total} bytes, must have at most 262144 bytes")


def _is_integer_type(checker: Any, instance: Any) -> bool:
    return _is_integer_value(instance)


_OWN_MESSAGES = frozenset(
    {
        "type",
        "enum",
        "required",
        "pattern",
        "format",
        "x-kubernetes-int-or-string",
        "x-kubernetes-list-type",
        "x-kubernetes-embedded-resource",
        _CLOSED,
        _META_KEYS,
    }
)

_K8sValidator = jsonschema.validators.extend(
    jsonschema.Draft4Validator,  # OpenAPI v3.0 keeps draft-4 exclusiveMinimum/exclusiveMaximum booleans
    validators={
        "type": _kw_type,
        "enum": _kw_enum,
        "required": _kw_required,
        "pattern": _kw_pattern,
        "format": _kw_format,
        "x-kubernetes-int-or-string": _kw_int_or_string,
        "x-kubernetes-list-type": _kw_list_type,
        "x-kubernetes-embedded-resource": _kw_embedded,
        _CLOSED: _kw_closed,
        _META_KEYS: _kw_meta_keys,
    },
    type_checker=jsonschema.Draft4Validator.TYPE_CHECKER.redefine("integer", _is_integer_type),
)


def _describe(err: ValidationError) -> str:
    """Kubernetes-flavoured wording for a jsonschema error."""
    kw, limit, inst = err.validator, err.validator_value, err.instance
    if kw in _OWN_MESSAGES:
        return err.message
    size = len(inst) if isinstance(inst, (str, list, dict)) else None
    if kw == "maxLength":
        return f"Too long: may not be longer than {limit} (got {size} characters)"
    if kw == "minLength":
        return f"Invalid value: {_q(inst)}: should be at least {limit} chars long"
    if kw == "maxItems":
        return f"Too many: {size}: must have at most {limit} items"
    if kw == "minItems":
        return f"Invalid value: {size} items: should have at least {limit} items"
    if kw == "maxProperties":
        return f"Too many: {size}: must have at most {limit} properties"
    if kw == "minProperties":
        return f"Invalid value: {size} properties: should have at least {limit} properties"
    if kw in ("maximum", "minimum"):
        excl = err.schema.get("exclusiveMaximum" if kw == "maximum" else "exclusiveMinimum")
        relation = {"maximum": "less than", "minimum": "greater than"}[kw]
        return f"Invalid value: {inst}: should be {relation}{'' if excl else ' or equal to'} {limit}"
    if kw in ("anyOf", "oneOf"):
        reasons = sorted({_describe(e) for e in err.context})[:3]
        return f"Invalid value: {_q(inst)}: must match {kw} the allowed schemas ({'; '.join(reasons)})"
    return _shorten(err.message, 200)


# --------------------------------------------------------------------------------------------
# Defaults (applied to a copy before the schema and CEL checks, as the API server does)
# --------------------------------------------------------------------------------------------


def _apply_defaults(
    value: Any, schema: Mapping[str, Any], path: Path_, applied: dict[Path_, Any], errors: list[str]
) -> None:
    if isinstance(value, dict):
        props = schema.get("properties")
        if isinstance(props, dict):
            for name, sub in props.items():
                if name in value and value[name] is None and not sub.get("nullable"):
                    errors.append(
                        f"{_fmt_path((*path, name))}: Invalid value: null: field is not nullable "
                        "(the API server would drop it; omit the key instead)"
                    )
                    del value[name]
                if name not in value and "default" in sub:
                    value[name] = copy.deepcopy(sub["default"])
                    applied[(*path, name)] = value[name]
            for name, child in value.items():
                if name in props:
                    _apply_defaults(child, props[name], (*path, name), applied, errors)
        ap = schema.get("additionalProperties")
        if isinstance(ap, dict):
            for key, child in value.items():
                _apply_defaults(child, ap, (*path, key), applied, errors)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, child in enumerate(value):
            _apply_defaults(child, schema["items"], (*path, i), applied, errors)


# --------------------------------------------------------------------------------------------
# The catalog
# --------------------------------------------------------------------------------------------


@dataclass
class CrdVersion:
    """One served version of one CRD, with its schema and validator built on first use."""

    group: str
    kind: str
    plural: str
    scope: str
    name: str
    served: bool
    deprecated: bool
    deprecation_warning: str | None
    raw_schema: dict[str, Any]
    source: str = ""
    status_subresource: bool = False
    _schema: dict[str, Any] | None = None
    _validator: Any = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.name}" if self.group else self.name

    @property
    def schema(self) -> dict[str, Any]:
        if self._schema is None:
            self._schema = _structural(self.raw_schema, root=True)
        return self._schema

    @property
    def validator(self) -> Any:
        if self._validator is None:
            self._validator = _K8sValidator(self.schema)
        return self._validator


@dataclass
class _Walk:
    """State of one CEL walk over one object."""

    report: ValidationReport
    applied: dict[Path_, Any]
    unsupported: dict[str, str] = field(default_factory=dict)


class CrdCatalog:
    """CRDs indexed by (group, kind); `validate` replays the API server's create-time checks."""

    def __init__(self, documents: Iterable[Mapping[str, Any]], *, source: str = "", record_stats: bool = True):
        self.source = source
        self.record_stats = record_stats
        self._crds: dict[tuple[str, str], dict[str, CrdVersion]] = {}
        for doc in documents:
            if not isinstance(doc, Mapping) or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            key = (spec["group"], spec["names"]["kind"])
            if key in self._crds:
                raise ValueError(f"CRD {key[1]}.{key[0]} is defined twice in {source}")
            versions: dict[str, CrdVersion] = {}
            for v in spec["versions"]:
                versions[v["name"]] = CrdVersion(
                    group=spec["group"],
                    kind=spec["names"]["kind"],
                    plural=spec["names"].get("plural", ""),
                    scope=spec.get("scope", "Namespaced"),
                    name=v["name"],
                    served=bool(v.get("served", True)),
                    deprecated=bool(v.get("deprecated", False)),
                    deprecation_warning=v.get("deprecationWarning"),
                    raw_schema=(v.get("schema") or {}).get("openAPIV3Schema") or {"type": "object"},
                    source=str(doc.get("_source", source)),
                    status_subresource="status" in (v.get("subresources") or {}),
                )
            self._crds[key] = versions

    @classmethod
    def from_dir(cls, root: Path, *, record_stats: bool = True, extra: Iterable[dict[str, Any]] = ()) -> CrdCatalog:
        """Parse every CRD document in every `*.yaml` under `root` (and the `extra` documents, of kinds the folder
        lacks: `module_crd_documents`)."""
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        docs: list[dict[str, Any]] = list(extra)
        for path in sorted(root.rglob("*.yaml")):
            if any(part.startswith(".") for part in path.relative_to(root).parts):
                continue  # e.g. the staging folder of an interrupted `make crds`
            with path.open(encoding="utf-8") as fh:
                for doc in yaml.load_all(fh, Loader=loader):
                    if isinstance(doc, dict):
                        doc["_source"] = str(path.relative_to(root))
                        docs.append(doc)
        return cls(docs, source=str(root), record_stats=record_stats)

    # ---- lookup ----

    def kinds(self) -> list[str]:
        """`group/version Kind` for every served version, for diagnostics."""
        return sorted(
            f"{v.api_version} {v.kind}" for versions in self._crds.values() for v in versions.values() if v.served
        )

    def covers(self, obj: Mapping[str, Any]) -> bool:
        """Whether the object's group and kind are in the catalog (core objects are not)."""
        group, _ = _split_api_version(str(obj.get("apiVersion", "")))
        return (group, str(obj.get("kind", ""))) in self._crds

    def version(self, api_version: str, kind: str) -> CrdVersion | None:
        group, ver = _split_api_version(api_version)
        return self._crds.get((group, kind), {}).get(ver)

    # ---- validation ----

    def defaulted(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of `obj` with the schema defaults applied, as the API server would store it."""
        crd = self.version(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        out = copy.deepcopy(dict(obj))
        if crd is not None:
            _apply_defaults(out, crd.schema, (), {}, [])
        return out

    def assert_valid(self, obj: Mapping[str, Any]) -> ValidationReport:
        """Validate and raise AssertionError listing every problem (for terse tests)."""
        report = self.validate(obj)
        if not report.ok:
            raise AssertionError(str(report))
        return report

    def validate(self, obj: Mapping[str, Any]) -> ValidationReport:
        """Schema (with structural extensions) and CEL validation of one object on create."""
        api_version = str(obj.get("apiVersion", ""))
        kind = str(obj.get("kind", ""))
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        name = f"{meta.get('namespace', '')}/{meta.get('name', meta.get('generateName', '?'))}".lstrip("/")
        report = ValidationReport(subject=f"{kind} {name} ({api_version})")
        walk = _Walk(report, {})
        found = self._validate_into(obj, api_version, kind, walk)
        if self.record_stats and found:
            CEL_STATS.add(kind or "?", report, walk.unsupported)
        return report

    def _validate_into(self, obj: Mapping[str, Any], api_version: str, kind: str, walk: _Walk) -> bool:
        """Fill walk.report; False when no served CRD version matched (nothing was validated)."""
        report = walk.report
        group, ver = _split_api_version(api_version)
        versions = self._crds.get((group, kind))
        if not api_version or not kind:
            report.errors.append("<root>: apiVersion and kind are required")
            return False
        if versions is None:
            report.errors.append(
                f"<root>: no CRD for kind {kind} in group {group!r} in {self.source} (nor in the Go module cache "
                "`make tools` fills: tests/support/crds.py MODULE_CRDS)"
            )
            return False
        crd = versions.get(ver)
        if crd is None:
            report.errors.append(
                f"apiVersion: {api_version} is not a version of {kind} (known: {', '.join(sorted(versions))})"
            )
            return False
        if not crd.served:
            report.errors.append(f"apiVersion: {api_version} is not served for {kind}")
            return False
        if crd.deprecated:
            report.warnings.append(crd.deprecation_warning or f"{api_version} {kind} is deprecated")
        meta = obj.get("metadata")
        if crd.scope == "Cluster" and isinstance(meta, Mapping) and meta.get("namespace"):
            report.errors.append(f"metadata.namespace: {kind} is cluster-scoped; namespace must not be set")

        work = copy.deepcopy(dict(obj))
        _apply_defaults(work, crd.schema, (), walk.applied, report.errors)
        if "status" not in obj:  # status defaults (e.g. Gateway API's "Waiting for controller") are noise here
            work.pop("status", None)
            walk.applied = {p: v for p, v in walk.applied.items() if p[:1] != ("status",)}
        elif crd.status_subresource:
            report.warnings.append("status: ignored on create (the CRD has a status subresource)")
        report.defaults_applied = [f"{_fmt_path(p)}={_q(v)}" for p, v in walk.applied.items()]

        schema_errors = sorted(crd.validator.iter_errors(work), key=lambda e: _fmt_path(e.absolute_path))
        report.errors.extend(f"{_fmt_path(e.absolute_path)}: {_describe(e)}" for e in schema_errors)

        self._cel_node(work, crd.schema, (), walk, root=True)
        return True

    # ---- CEL ----

    def _cel_node(self, value: Any, schema: Mapping[str, Any], path: Path_, walk: _Walk, *, root: bool = False) -> Any:
        """Convert `value` to CEL bottom-up and evaluate the rules of every node on the way."""
        if value is None:
            return None
        if not _type_matches(value, schema):
            return _plain_to_cel(value)  # a schema error is already reported; rules would misfire
        if isinstance(value, dict):
            cel = self._cel_object(value, schema, path, walk, root=root)
        elif isinstance(value, list):
            items = schema.get("items")
            if isinstance(items, dict):
                cel = celtypes.ListType([self._cel_node(x, items, (*path, i), walk) for i, x in enumerate(value)])
            else:
                cel = _plain_to_cel(value)
        else:
            cel = _scalar_to_cel(value, schema)
        for rule in schema.get("x-kubernetes-validations") or ():
            self._eval_rule(rule, cel, path, walk)
        return cel

    def _cel_object(
        self, value: dict[str, Any], schema: Mapping[str, Any], path: Path_, walk: _Walk, *, root: bool
    ) -> Any:
        props = schema.get("properties")
        ap = schema.get("additionalProperties")
        out: dict[Any, Any] = {}
        if isinstance(props, dict):
            for key, child in value.items():
                sub = props.get(key)
                if sub is None:
                    continue  # unknown field: reported by the schema check, invisible to CEL
                if root and key == "metadata":
                    # At the root CEL sees only metadata.name and metadata.generateName.
                    visible = {k: child[k] for k in ("name", "generateName") if isinstance(child, dict) and k in child}
                    out[celtypes.StringType(key)] = _plain_to_cel(visible)
                    continue
                cel_child = self._cel_node(child, sub, (*path, key), walk)
                escaped = escape_property_name(key)
                if escaped is not None:
                    out[celtypes.StringType(escaped)] = cel_child
        elif isinstance(ap, dict):
            for key, child in value.items():
                out[celtypes.StringType(key)] = self._cel_node(child, ap, (*path, key), walk)
        else:
            return _plain_to_cel(value)
        return celtypes.MapType(out)

    def _eval_rule(self, rule: Mapping[str, Any], cel_self: Any, path: Path_, walk: _Walk) -> None:
        report = walk.report
        text = str(rule.get("rule", ""))
        compiled = _compile(text)
        where = _fmt_path(path)
        optional_old_self = bool(rule.get("optionalOldSelf"))
        if compiled.references_old_self and not optional_old_self:
            report.cel_skipped_transition += 1  # not applicable on create
            return
        if compiled.program is None:
            self._unsupported(walk, where, text, compiled.error or "cannot compile")
            return
        activation: dict[str, Any] = {**_NAMESPACE_VARS, "self": cel_self}
        if optional_old_self:
            activation["oldSelf"] = _NONE
        try:
            result = compiled.program.evaluate(activation)
        except Exception as exc:  # cel-python raises CELEvalError and, for library bugs, anything
            rejected, reason = _classify_eval_error(exc)
            if rejected:
                report.cel_evaluated += 1
                report.cel_failed_rules.append(text)
                report.errors.append(
                    f"{where}: Invalid value: {rule.get('message') or 'rule evaluation failed'} "
                    f"(evaluation error: {reason}) [CEL: {_shorten(text, 140)}]"
                )
            else:
                self._unsupported(walk, where, text, reason)
            return
        if not isinstance(result, (bool, celtypes.BoolType)):
            self._unsupported(walk, where, text, f"rule returned {type(result).__name__}, not bool")
            return
        report.cel_evaluated += 1
        if result:
            return
        report.cel_failed_rules.append(text)
        message = self._message(rule, activation) or f"failed rule: {text}"
        field_path = str(rule.get("fieldPath") or "")
        target = where + field_path if where != "<root>" else (field_path.lstrip(".") or where)
        defaults = [  # defaulted fields of this node that the rule reads: the usual surprise
            f"{p[-1]}={_q(v)}"
            for p, v in walk.applied.items()
            if len(p) == len(path) + 1
            and p[: len(path)] == path
            and isinstance(p[-1], str)
            and re.search(rf"\.{re.escape(p[-1])}\b", text)
        ]
        note = f" (schema defaults applied: {', '.join(defaults[:6])})" if defaults else ""
        reason = f" reason={rule['reason']}" if rule.get("reason") else ""
        report.errors.append(f"{target}: Invalid value: {message}{note}{reason} [CEL: {_shorten(text, 140)}]")

    @staticmethod
    def _message(rule: Mapping[str, Any], activation: Mapping[str, Any]) -> str:
        """messageExpression wins when it yields a non-empty single-line string; else message."""
        expr = rule.get("messageExpression")
        if expr:
            compiled = _compile(str(expr))
            if compiled.program is not None:
                try:
                    out = compiled.program.evaluate(dict(activation))
                except Exception:  # the API server falls back to message on any error
                    out = None
                if isinstance(out, str) and out.strip() and "\n" not in out:
                    return str(out)
        return str(rule.get("message") or "")

    @staticmethod
    def _unsupported(walk: _Walk, where: str, text: str, reason: str) -> None:
        walk.report.cel_unsupported.append(f"{where}: {_shorten(text, 160)} -- {reason}")
        walk.unsupported.setdefault(text, reason)

    # ---- catalog-wide checks ----

    def rules(self) -> Iterator[tuple[CrdVersion, str, Mapping[str, Any]]]:
        """Every (version, schema path, rule) in the catalog."""
        for versions in self._crds.values():
            for crd in versions.values():
                yield from ((crd, p, r) for p, r in _iter_rules(crd.raw_schema, ()))

    def unsupported_rules(self) -> dict[str, str]:
        """Rule text -> reason, for every rule this validator could never evaluate."""
        out: dict[str, str] = {}
        for _crd, _path, rule in self.rules():
            for key in ("rule", "messageExpression"):
                if rule.get(key):
                    compiled = _compile(str(rule[key]))
                    if compiled.error:
                        out[str(rule[key])] = compiled.error
        return out


def _iter_rules(schema: Mapping[str, Any], path: Path_) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for rule in schema.get("x-kubernetes-validations") or ():
        yield _fmt_path(path), rule
    for key, sub in (schema.get("properties") or {}).items():
        yield from _iter_rules(sub, (*path, key))
    if isinstance(schema.get("items"), dict):
        yield from _iter_rules(schema["items"], (*path, 0))
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _iter_rules(schema["additionalProperties"], (*path, "*"))


def _split_api_version(api_version: str) -> tuple[str, str]:
    group, slash, ver = api_version.rpartition("/")
    return (group, ver) if slash else ("", api_version)
