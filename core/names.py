"""Kubernetes name grammars, as the API server checks them (k8s.io/apimachinery v0.36.3,
pkg/util/validation/validation.go and pkg/api/validate/content/{dns,kube}.go): every namespace, object name,
label and data key the program takes from configuration is checked with these, so the rules are stated once.

Go's `regexp` anchors `$` at the end of the text; Python's `$` also matches before a final newline, so every
pattern here ends in `\\Z` (a value with a trailing newline is no name, as the API server says too).
"""

from __future__ import annotations

import re

_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL = re.compile(rf"^{_DNS1123_LABEL}\Z")
"""`IsDNS1123Label`'s pattern (`dns1123LabelFmt`)."""
DNS_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*\Z")
"""`IsDNS1123Subdomain`'s pattern (`dns1123SubdomainFmt`)."""
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
"""`IsDNS1035Label`'s pattern: a Service name (`ValidateServiceName` is `NameIsDNS1035Label`)."""
DNS_LABEL_MAX = 63
"""`IsDNS1123Label`: at most 63 characters."""
_BOUNDED_LABEL = "[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
LABEL_PAIR = re.compile(rf"{_BOUNDED_LABEL}/{_BOUNDED_LABEL}")
"""Two DNS-1123 labels of at most 63 characters joined by `/` (`fullmatch` it): a Substrate actor
`<atespace>/<name>` in one match, which every actor of a large fleet goes through."""
DNS_SUBDOMAIN_MAX = 253
"""`IsDNS1123Subdomain`: at most 253 characters."""
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
"""content/kube.go `labelKeyFmt`: the name part of a label key; a label value is this or empty."""
LABEL_NAME_MAX = 63
"""`labelKeyMaxLength` and `LabelValueMaxLength`."""
_CONFIG_MAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+\Z")
"""`IsConfigMapKey`'s pattern (`configMapKeyFmt`): keys of a ConfigMap's or a Secret's data."""


def is_dns_label(value: str) -> bool:
    """True for an RFC 1123 label of at most 63 characters (namespaces, Substrate names)."""
    return len(value) <= DNS_LABEL_MAX and bool(DNS_LABEL.match(value))


def is_dns_subdomain(value: str) -> bool:
    """True for an RFC 1123 subdomain of at most 253 characters (most object names, StorageClass names)."""
    return len(value) <= DNS_SUBDOMAIN_MAX and bool(DNS_SUBDOMAIN.match(value))


def is_dns1035_label(value: str) -> bool:
    """True for an RFC 1035 label of at most 63 characters: starts with a letter (Service names)."""
    return len(value) <= DNS_LABEL_MAX and bool(DNS1035_LABEL.match(value))


def label_key_problem(key: str) -> str | None:
    """Why `key` is no label key (`IsQualifiedName`: an optional DNS-subdomain prefix and `/`, then a name of
    1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit), or None."""
    parts = key.split("/")
    if len(parts) > 2:
        return f"label key {key!r} holds more than one '/': write an optional DNS-subdomain prefix, '/', and a name"
    if len(parts) == 2 and not is_dns_subdomain(parts[0]):
        return f"label key {key!r} has a prefix that is not a DNS subdomain such as example.com"
    name = parts[-1]
    if len(name) > LABEL_NAME_MAX or not _LABEL_NAME.match(name):
        return (
            f"label key {key!r} is not a Kubernetes label name (1-63 letters, digits, '-', '_' or '.', starting and "
            "ending with a letter or digit)"
        )
    return None


def is_label_value(value: str) -> bool:
    """`IsValidLabelValue`: empty, or 1-63 letters, digits, '-', '_' or '.' starting and ending with a letter or
    digit."""
    return value == "" or (len(value) <= LABEL_NAME_MAX and bool(_LABEL_NAME.match(value)))


def is_config_map_key(key: str) -> bool:
    """`IsConfigMapKey`: letters, digits, '-', '_' or '.', at most 253 characters, neither `.` nor starting with
    `..` (`hasChDirPrefix`)."""
    if len(key) > DNS_SUBDOMAIN_MAX or key == "." or key.startswith(".."):
        return False
    return bool(_CONFIG_MAP_KEY.match(key))
