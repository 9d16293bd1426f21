"""What a single-node cluster needs beyond its control plane: the cluster's DNS (CoreDNS, answering cluster names
only) and a default StorageClass (the local-path provisioner, so a StatefulSet's claim binds). Written here as
plain objects; the permissions each needs are the ones its upstream reads and writes (CoreDNS v1.15.0
plugin/kubernetes; local-path-provisioner v0.0.30 provisioner.go and its deploy/ RBAC).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from rig import catalog, configs
from rig.layout import Layout
from rig.versions import GoPiece, load

DNS_NAMESPACE = "kube-system"
STORAGE_NAMESPACE = "local-path-storage"
STORAGE_CLASS = "local-path"
PROVISIONER_IMAGE = "docker.io/rancher/local-path-provisioner:{version}"
PROVISIONER_ACCOUNT = "local-path-provisioner-service-account"
"""The provisioner makes its helper pods under this service account unless told otherwise (v0.0.30 main.go
--service-account-name): the name its own manifests use."""
PROVISIONER = "rancher.io/local-path"
LABEL = "app.kubernetes.io/part-of"
RIG = "agent-budgets-rig"


def _version(name: str) -> str:
    piece = load().pieces[name]
    assert isinstance(piece, GoPiece)
    return piece.version


def _meta(name: str, namespace: str | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {LABEL: RIG, **labels}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def coredns(layout: Layout) -> list[dict[str, Any]]:
    """CoreDNS as the `kube-dns` Service at the rig's DNS address, with the rig's Corefile (no forward)."""
    labels = {"k8s-app": "kube-dns"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta("coredns", DNS_NAMESPACE)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta("system:coredns"),
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta("system:coredns"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": DNS_NAMESPACE}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta("coredns", DNS_NAMESPACE),
            "data": {"Corefile": configs.corefile()},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta("coredns", DNS_NAMESPACE, **labels),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "priorityClassName": "system-cluster-critical",
                        # The pod asks the kubelet's resolv.conf (the rig's, with no nameserver), never CoreDNS.
                        "dnsPolicy": "Default",
                        "containers": [
                            {
                                "name": "coredns",
                                "image": f"registry.k8s.io/coredns/coredns:{_version('coredns')}",
                                "imagePullPolicy": "IfNotPresent",
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "ports": [
                                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                ],
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                                    "readOnlyRootFilesystem": True,
                                },
                                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
                                "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 10},
                                "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta("kube-dns", DNS_NAMESPACE, **labels),
            "spec": {
                "selector": labels,
                "clusterIP": str(layout.ranges.dns_service_ip),
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                ],
            },
        },
    ]


def local_path_provisioner(layout: Layout) -> list[dict[str, Any]]:
    """The provisioner, its helper pod on the rig's busybox, its directory under the cluster's state, and the
    default StorageClass (WaitForFirstConsumer: the volume is made on the node the pod lands on)."""
    labels = {"app": "local-path-provisioner"}
    helper = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "helper-pod"},
        "spec": {
            "priorityClassName": "system-node-critical",
            "containers": [{"name": "helper-pod", "image": catalog.BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent"}],
        },
    }
    config = {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [str(layout.volumes)]}]}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(STORAGE_NAMESPACE)},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(PROVISIONER_ACCOUNT, STORAGE_NAMESPACE),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta("local-path-provisioner", STORAGE_NAMESPACE),
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods"],
                    "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta("local-path-provisioner", STORAGE_NAMESPACE),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "local-path-provisioner"},
            "subjects": [{"kind": "ServiceAccount", "name": PROVISIONER_ACCOUNT, "namespace": STORAGE_NAMESPACE}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta("local-path-provisioner"),
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["nodes", "persistentvolumeclaims", "configmaps", "pods", "pods/log"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": [""],
                    "resources": ["persistentvolumes"],
                    "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
                },
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
                {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get", "list", "watch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta("local-path-provisioner"),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "local-path-provisioner",
            },
            "subjects": [{"kind": "ServiceAccount", "name": PROVISIONER_ACCOUNT, "namespace": STORAGE_NAMESPACE}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta("local-path-config", STORAGE_NAMESPACE),
            "data": {
                "config.json": json.dumps(config, indent=2),
                "setup": 'set -eu\nmkdir -m 0777 -p "$VOL_DIR"\n',
                "teardown": 'set -eu\nrm -rf "$VOL_DIR"\n',
                "helperPod.yaml": yaml.safe_dump(helper, sort_keys=False),
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta("local-path-provisioner", STORAGE_NAMESPACE, **labels),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": PROVISIONER_ACCOUNT,
                        "containers": [
                            {
                                "name": "local-path-provisioner",
                                "image": PROVISIONER_IMAGE.format(version=_version("local-path-provisioner")),
                                "imagePullPolicy": "IfNotPresent",
                                "command": [
                                    "local-path-provisioner",
                                    "--debug",
                                    "start",
                                    "--config",
                                    "/etc/config/config.json",
                                ],
                                "env": [
                                    {
                                        "name": "POD_NAMESPACE",
                                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                                    },
                                    {"name": "CONFIG_MOUNT_PATH", "value": "/etc/config/"},
                                ],
                                "volumeMounts": [{"name": "config", "mountPath": "/etc/config/"}],
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": "local-path-config"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                **_meta(STORAGE_CLASS),
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            },
            "provisioner": PROVISIONER,
            "volumeBindingMode": "WaitForFirstConsumer",
            "reclaimPolicy": "Delete",
        },
    ]
