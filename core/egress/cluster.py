"""Which cluster the egress policies live on: the kube context and what the kubeconfig names."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from core.kubeconfig import is_contents as kubeconfig_is_contents
from core.kubeconfig import server_of


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
