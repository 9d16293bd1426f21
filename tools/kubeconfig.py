"""The kubeconfig files handed to kubectl: one helper for the spend report and the egress-policy provider.

kubectl and kubectl-ate take `--kubeconfig` as a path only (client-go `tools/clientcmd` loading rules, which
kubectl-ate's `internal/ateclient/builder.go` uses as the explicit path). A `kubernetes.kubeconfig` holding
contents (core/kubeconfig.py `is_contents`) is written to a private temporary file for the length of one
operation; a path is passed on as written, with `~` expanded.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from core.kubeconfig import is_contents

TEMP_PREFIX = "agent-budgets-kubeconfig-"


def expand_path(kubeconfig: str) -> str:
    """A kubeconfig path as kubectl should get it: surrounding blanks dropped, `~` expanded."""
    return os.path.expanduser(kubeconfig.strip())


@contextmanager
def kubeconfig_file(kubeconfig: str | None) -> Iterator[str | None]:
    """The path to pass as `--kubeconfig`: None (no setting: kubectl reads `$KUBECONFIG` or `~/.kube/config`),
    the configured path, or a private temporary file holding the configured contents, removed when the block
    ends (`mkstemp` creates it readable and writable by this user only)."""
    if not kubeconfig:
        yield None
        return
    if not is_contents(kubeconfig):
        yield expand_path(kubeconfig)
        return
    descriptor, path = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".yaml")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(kubeconfig)
        yield path
    finally:
        with suppress(FileNotFoundError):
            os.remove(path)


def read_kubeconfig_file(kubeconfig: str) -> str | None:
    """The text of the kubeconfig file a path-valued setting names, or None when it cannot be read here."""
    try:
        with open(expand_path(kubeconfig), encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None
