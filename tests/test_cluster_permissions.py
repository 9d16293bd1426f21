"""The permissions table of docs/deploy.md covers every Kubernetes object the program creates, named as the API
server names it.

The table is generated (scripts/cluster_permissions.py, `make docs`) and tests/test_generated_docs.py fails while
the committed block differs from the generator. These tests check the page itself against the program: every object
the program registers under mocks for the three stacks is in a row of the committed page with the right resource
name, namespace and stack, and each custom kind's resource name and scope are the pinned CRDs' (`spec.names.plural`,
`spec.scope`: Envoy Gateway v1.9.0, Agent Router v1.1.0, prometheus-operator v0.93.0).

Broken once to see them fail: a row deleted from the page (the `secrets` row of `agent-budgets-redis`) failed the
first test naming that object; `plural` returning the kind's lowercase name plus `s` failed the first test and the
plural tests on `envoyproxys` and `gatewayclasss`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts import cluster_permissions
from tests.support.crds import load_catalog

ROOT = Path(__file__).resolve().parents[1]
_ROW = re.compile(
    r"^\| (?P<group>.+?) \| `(?P<resource>[a-z]+)` \((?P<kind>\w+)\) \| (?P<where>.+?) \| (?P<verbs>\w+) \| "
    r"(?P<stacks>.+?) \|$"
)


@pytest.fixture(scope="module")
def runs() -> dict:
    return cluster_permissions.program_runs()


def page_rows() -> dict[tuple[str, str, str], tuple[str, str]]:
    """(group, resource, namespace) → (verbs, needed by) of the committed table in docs/deploy.md."""
    text = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    block = text.split("<!-- GENERATED:cluster-permissions -->", 1)[1].split("<!-- /GENERATED:cluster-permissions -->")[
        0
    ]
    found = {}
    for line in block.splitlines():
        match = _ROW.match(line)
        if not match:
            continue
        group = "" if match["group"].startswith("core") else match["group"].strip("`")
        namespace = "" if match["where"] == "cluster-scoped" else match["where"].strip("`")
        found[(group, match["resource"], namespace)] = (match["verbs"], match["stacks"])
    return found


def test_every_object_the_program_creates_is_in_the_page(runs):
    rows = page_rows()
    assert len(rows) >= 20, f"the table was not read: {rows}"
    missing = []
    for stack, resources in runs.items():
        for group, kind, namespace in cluster_permissions.kubernetes_objects(resources):
            key = (group, cluster_permissions.plural(kind), namespace)
            needed_by = rows.get(key, ("", ""))[1]
            if key not in rows or (needed_by != "always" and stack not in needed_by.split(", ")):
                missing.append(f"{stack}: {kind} in {namespace or 'the cluster'}")
    assert missing == [], "objects the program creates that docs/deploy.md does not list:\n" + "\n".join(missing)


def test_the_rows_name_the_stacks_that_need_them():
    rows = page_rows()
    assert rows[("rbac.authorization.k8s.io", "clusterrolebindings", "")] == ("manage", "full")
    assert rows[("apps", "statefulsets", "agent-budgets-redis")] == ("manage", "in-cluster Redis")
    assert rows[("", "pods", "agent-budgets-redis")] == ("read", "in-cluster Redis")
    assert rows[("", "endpoints", "agent-budgets-redis")] == ("read", "in-cluster Redis")
    assert rows[("gateway.envoyproxy.io", "backendtrafficpolicies", "agent-budgets")] == ("manage", "always")
    assert rows[("", "namespaces", "")] == ("manage", "always")


def test_custom_kinds_are_named_and_scoped_as_their_crds_say():
    catalog = load_catalog()
    checked = 0
    for (group, resource, namespace), _ in page_rows().items():
        if "." not in group or (group.endswith(".k8s.io") and group != "gateway.networking.k8s.io"):
            continue
        kinds = [versions for (crd_group, _), versions in catalog._crds.items() if crd_group == group]
        crd = next(
            (next(iter(v.values())) for v in kinds if next(iter(v.values())).plural == resource),
            None,
        )
        assert crd is not None, f"no pinned CRD of group {group} serves {resource}"
        assert (crd.scope == "Cluster") == (namespace == ""), f"{resource}: CRD scope {crd.scope}, page {namespace!r}"
        checked += 1
    assert checked >= 12


@pytest.mark.parametrize(
    ("kind", "resource"),
    [
        ("GatewayClass", "gatewayclasses"),
        ("EnvoyProxy", "envoyproxies"),
        ("BackendTLSPolicy", "backendtlspolicies"),
        ("NetworkPolicy", "networkpolicies"),
        ("ClusterRoleBinding", "clusterrolebindings"),
        ("Secret", "secrets"),
        ("Endpoints", "endpoints"),
    ],
)
def test_plural_follows_the_api_servers_names(kind, resource):
    assert cluster_permissions.plural(kind) == resource
