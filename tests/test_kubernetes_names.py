"""The Kubernetes grammars the program checks configuration with, pinned to upstream's answers.

Image references (core.image_reference) are read as the kubelet reads them, by distribution/reference v0.6.0's
`ParseNormalizedNamed` with go-digest v1.0.0; the cases below are of the kinds its normalize_test.go and
reference_test.go decide (familiar names, registries with ports, IPv6 hosts, upper case, digests). Names (core.names)
are apimachinery v0.36.3's: Go's `$` ends the text, so a trailing newline is never part of a name.
"""

from __future__ import annotations

import pytest

from core.image_reference import image_reference_problem
from core.names import (
    is_config_map_key,
    is_dns1035_label,
    is_dns_label,
    is_dns_subdomain,
    is_label_value,
    label_key_problem,
)

SHA256 = "a" * 64

PARSED = [
    "redis:8.2.4-alpine3.22",
    "python:3.12-alpine",
    "library/debian",
    "docker.io/debian",
    "index.docker.io/library/debian",
    "localhost/debian",
    "LOCALREGISTRY/team/debian",  # upper case is allowed in the registry part only
    "127.0.0.1:5000/team/debian:1.0",
    "192.168.0.1",
    "[fc00::1]:5000/team/debian",
    "registry.example.com/a__b/c.d-e:tag_1.2-3",
    "docker.io/" + "1a" * 32,  # 64 hex digits are a repository once a registry is named
    f"redis@sha256:{SHA256}",
    f"redis:8@sha256:{SHA256}",
    f"redis@sha512:{'b' * 128}",
    "x:" + "t" * 128,
    "ghcr.io/" + "a" * 255,
]

REFUSED = [
    ("", "is empty"),
    ("redis:8\n", "holds U+000A"),
    (" redis", "holds U+0020"),
    ("Redis", "has upper-case letters in its repository name"),
    ("team/Debian", "has upper-case letters in its repository name"),
    ("https://registry.example.com/redis", "does not match the image reference grammar"),
    ("-redis", "does not match the image reference grammar"),
    ("team///redis", "does not match the image reference grammar"),
    ("[fc00::1]:5000", "does not match the image reference grammar"),
    ("fc00::1:5000/debian", "does not match the image reference grammar"),
    ("redis:", "does not match the image reference grammar"),
    ("redis:-8", "does not match the image reference grammar"),
    ("x:" + "t" * 129, "does not match the image reference grammar"),
    ("redis:\u0668", "does not match the image reference grammar"),  # Go's \w is ASCII
    ("1a" * 32, "is 64 hex digits, an image id"),
    ("ghcr.io/" + "a" * 256, "has a repository name of 256 characters"),
    ("a" * 250, "has a repository name of 258 characters"),  # familiar names count `library/`
    ("redis@sha256:abc", "does not match the image reference grammar"),  # fewer than 32 hex digits
    (f"redis@sha256:{'A' * 64}", "its sha256 digest must be 64 lowercase hex digits"),
    (f"redis@sha256:{'a' * 63}0a", "its sha256 digest must be 64 lowercase hex digits"),
    (f"redis@md5:{'a' * 32}", "its digest algorithm 'md5' is not one the kubelet verifies"),
]


@pytest.mark.parametrize("image", PARSED)
def test_references_the_kubelet_parses_are_accepted(image):
    assert image_reference_problem(image) is None


@pytest.mark.parametrize(("image", "reason"), REFUSED)
def test_references_the_kubelet_refuses_are_refused_with_the_reason(image, reason):
    problem = image_reference_problem(image)
    assert problem is not None and problem.startswith(reason), problem


def test_dns_names_end_where_the_text_ends():
    assert is_dns_label("agent-budgets") and not is_dns_label("agent-budgets\n") and not is_dns_label("a" * 64)
    assert is_dns_subdomain("a.b-c.d") and not is_dns_subdomain("a.b\n") and not is_dns_subdomain("a." * 127 + "ab")
    assert is_dns1035_label("redis") and not is_dns1035_label("1-redis") and not is_dns1035_label("redis\n")


def test_labels_and_data_keys_follow_apimachinery():
    assert label_key_problem("app.kubernetes.io/name") is None and label_key_problem("grafana_dashboard") is None
    assert "more than one '/'" in str(label_key_problem("a/b/c"))
    assert "prefix that is not a DNS subdomain" in str(label_key_problem("Example.com/x"))
    assert "not a Kubernetes label name" in str(label_key_problem("x" * 64))
    assert "not a Kubernetes label name" in str(label_key_problem("name\n"))
    assert is_label_value("") and is_label_value("1") and not is_label_value("1\n") and not is_label_value("-x")
    assert is_config_map_key("ca.crt") and not is_config_map_key("..data") and not is_config_map_key("a b")
