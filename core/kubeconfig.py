"""What a `kubernetes.kubeconfig` value is, and which cluster a kubeconfig names (pure: no file is read here).

`kubernetes.kubeconfig` holds either a file path or the kubeconfig's contents. The Pulumi Kubernetes provider
accepts both; kubectl and kubectl-ate take only a path (`--kubeconfig`). The egress-policy provider and the
spend report decide alike which one a value is (:func:`is_contents`), and the file helpers that turn contents
into a private temporary file live in `tools/kubeconfig.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml


def is_contents(kubeconfig: str) -> bool:
    """Whether a `kubernetes.kubeconfig` value holds a kubeconfig document rather than a file path.

    The Kubernetes provider takes either (pulumi-kubernetes `loadKubeconfig`: an existing file, an absolute
    path or one starting with "." is a path, anything else is contents). This decides from the value alone,
    so that every machine running the stack decides alike: a document always spans several lines (YAML) or
    is a JSON object; a path is one line.
    """
    stripped = kubeconfig.strip()
    return "\n" in stripped or stripped.startswith("{")


def server_of(document_text: str, kube_context: str) -> str:
    """The `server` of the cluster that `kube_context` (or, when empty, the current context) names in a
    kubeconfig document; `""` when the document is not a kubeconfig or does not say."""
    try:
        document = yaml.safe_load(document_text)
    except yaml.YAMLError:
        return ""
    if not isinstance(document, Mapping):
        return ""

    def named(section: str, name: Any) -> Mapping[str, Any]:
        for entry in document.get(section) or []:
            if isinstance(entry, Mapping) and entry.get("name") == name:
                body = entry.get(section[:-1])
                return body if isinstance(body, Mapping) else {}
        return {}

    context = named("contexts", kube_context or document.get("current-context"))
    server = named("clusters", context.get("cluster")).get("server")
    return server if isinstance(server, str) else ""
