"""The node's own checks, each a verdict with the evidence it rests on, in the rig's report:

1. the node is Ready; a Deployment of two replicas becomes Available; a Job completes; a StatefulSet's claim binds
   (the default StorageClass) and its data outlives the pod;
2. a pod reaches another through a Service by its cluster DNS name, and through the Service's ClusterIP;
3. a name outside the cluster gets NXDOMAIN (CoreDNS forwards nothing), and a connection to an address outside the
   rig's ranges is dropped by the rig's rule (its counter rises) while the dead-end veth the default route points at
   sends nothing (no packet leaves).

The servers, the Job and the StatefulSet run the rig's busybox image; the clients run Python on the rig's Debian
base, because a static glibc program (Debian's busybox-static: its `wget` crashes, its `nc` cannot resolve a name)
has no resolver but the DNS code busybox's `nslookup` carries. Everything is in the namespace `rig-checks`, deleted
at the end.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from typing import Any

from rig import addons, catalog, isolation
from rig import layout as rig_layout
from rig.node import Node, pod_summary, wait_available
from rig.processes import StepError, wait_until

NAMESPACE = "rig-checks"
OUTSIDE_ADDRESS = "192.0.2.1"
"""TEST-NET-1 (RFC 5737): reserved for documentation, routed nowhere; the connection the drop rule must count."""
OUTSIDE_NAME = "example.com"
"""A name outside the cluster: CoreDNS answers it itself (NXDOMAIN), it never asks anyone."""


def _meta(name: str, **labels: str) -> dict[str, Any]:
    return {"name": name, "namespace": NAMESPACE, "labels": {addons.LABEL: addons.RIG, **labels}}


def _container(name: str, script: str, image: str = catalog.BUSYBOX_IMAGE, **extra: Any) -> dict[str, Any]:
    command = ["sh", "-c", script] if image == catalog.BUSYBOX_IMAGE else ["python", "-c", script]
    return {"name": name, "image": image, "imagePullPolicy": "IfNotPresent", "command": command, **extra}


def _job(name: str, script: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(name),
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [_container(name, script, image)]}},
        },
    }


HTTP_CLIENT = """
import sys, urllib.request
for label, url in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        print(label, urllib.request.urlopen(url, timeout=5).read().decode().strip())
    except OSError as error:
        print(label, "error", error)
"""
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
    print("connected")
except OSError as error:
    print("refused-or-dropped", type(error).__name__, error)
"""


def _python_job(name: str, script: str, *args: str) -> dict[str, Any]:
    job = _job(name, script, catalog.PYTHON_IMAGE)
    job["spec"]["template"]["spec"]["containers"][0]["command"] = ["python", "-c", script, *args]
    return job


def workloads() -> list[dict[str, Any]]:
    """The namespace, a two-replica web Deployment behind a Service, and a StatefulSet with a claim."""
    web_labels = {"app": "web"}
    serve = "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"
    keep = (
        '[ -f /data/token ] || cat /proc/sys/kernel/random/uuid > /data/token; echo "token $(cat /data/token)"; '
        "exec sleep 86400"
    )
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": {addons.LABEL: addons.RIG}},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta("web", **web_labels),
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": web_labels},
                "template": {
                    "metadata": {"labels": web_labels},
                    "spec": {
                        "containers": [
                            _container(
                                "web",
                                serve,
                                ports=[{"containerPort": 8080}],
                                readinessProbe={"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
                            )
                        ]
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta("web"),
            "spec": {"selector": web_labels, "ports": [{"port": 80, "targetPort": 8080}]},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": _meta("store"),
            "spec": {
                "serviceName": "store",
                "replicas": 1,
                "selector": {"matchLabels": {"app": "store"}},
                "template": {
                    "metadata": {"labels": {"app": "store"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [
                            _container("store", keep, volumeMounts=[{"name": "data", "mountPath": "/data"}])
                        ],
                    },
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}},
                    }
                ],
            },
        },
    ]


def run_job(node: Node, name: str, script: str, timeout: float = 120, job: dict[str, Any] | None = None) -> str:
    """Run a Job (busybox `sh -c script`, or the one given) to completion and answer its log."""
    node.apply([job or _job(name, script, catalog.BUSYBOX_IMAGE)])

    def done() -> str | None:
        out = node.kubectl("get", "job", name, "-n", NAMESPACE, "-o", "json", check=False)
        if not out.strip():
            return None
        conditions = {c["type"]: c["status"] for c in json.loads(out).get("status", {}).get("conditions", [])}
        if conditions.get("Complete") == "True":
            return "Complete"
        if conditions.get("Failed") == "True":
            raise StepError(f"job {name} failed: {node.kubectl('logs', '-n', NAMESPACE, f'job/{name}', check=False)}")
        return None

    try:
        wait_until(f"job {name}", done, timeout)
    except StepError as error:
        raise StepError(f"{error}; pods: {pod_summary(node, NAMESPACE)}") from None
    return node.kubectl("logs", "-n", NAMESPACE, f"job/{name}").strip()


def _drop_count() -> int:
    listing = subprocess.run(
        ["iptables", "-w", "-L", rig_layout.IPTABLES_CHAIN, "-v", "-x", "-n"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return isolation.dropped_packets(listing)


def _void_tx_packets() -> int:
    """What the dead-end veth has sent (`ip -s -j link`: /sys/class/net shows the machine's namespace, not ours)."""
    out = subprocess.run(
        ["ip", "-s", "-j", "link", "show", "dev", rig_layout.VOID], capture_output=True, text=True, check=True
    ).stdout
    stats = json.loads(out)[0]["stats64"]["tx"]
    return int(stats["packets"]) + int(stats.get("dropped", 0))


def check_workloads(node: Node) -> dict[str, Any]:
    evidence: dict[str, Any] = {}
    status = json.loads(node.kubectl("get", "node", rig_layout.NODE_NAME, "-o", "json"))["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    if ready["status"] != "True":
        raise StepError(f"node not Ready: {ready}")
    evidence["node"] = {
        "Ready": ready["status"],
        "addresses": status.get("addresses"),
        "kubelet": status["nodeInfo"]["kubeletVersion"],
        "runtime": status["nodeInfo"]["containerRuntimeVersion"],
        "kernel": status["nodeInfo"]["kernelVersion"],
    }
    node.apply(workloads())
    evidence["deployment"] = wait_available(node, "deployment", "web", NAMESPACE)
    available = json.loads(node.kubectl("get", "deployment", "web", "-n", NAMESPACE, "-o", "json"))["status"]
    if available.get("availableReplicas") != 2:
        raise StepError(f"deployment web: {available}")
    pods = json.loads(node.kubectl("get", "pods", "-n", NAMESPACE, "-l", "app=web", "-o", "json"))["items"]
    evidence["deployment_pods"] = sorted(f"{p['metadata']['name']} {p['status'].get('podIP')}" for p in pods)
    evidence["job"] = run_job(node, "once", "echo job ran in $(hostname)")
    evidence["statefulset"] = wait_available(node, "statefulset", "store", NAMESPACE)
    claim = json.loads(node.kubectl("get", "pvc", "data-store-0", "-n", NAMESPACE, "-o", "json"))
    if claim["status"].get("phase") != "Bound":
        raise StepError(f"claim data-store-0 is {claim['status'].get('phase')}")
    evidence["claim"] = (
        f"data-store-0 {claim['status']['phase']} to {claim['spec'].get('volumeName')} "
        f"({claim['spec'].get('storageClassName')})"
    )
    first = node.kubectl("logs", "-n", NAMESPACE, "store-0").strip()
    old_uid = json.loads(node.kubectl("get", "pod", "store-0", "-n", NAMESPACE, "-o", "json"))["metadata"]["uid"]
    node.kubectl("delete", "pod", "store-0", "-n", NAMESPACE, "--wait=true")

    def restarted() -> str | None:
        out = node.kubectl("get", "pod", "store-0", "-n", NAMESPACE, "-o", "json", check=False)
        if not out.strip():
            return None
        pod = json.loads(out)
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
        return pod["metadata"]["uid"] if ready and pod["metadata"]["uid"] != old_uid else None

    new_uid = wait_until("store-0 recreated", restarted, 120)
    second = node.kubectl("logs", "-n", NAMESPACE, "store-0").strip()
    if not first.startswith("token ") or first != second:
        raise StepError(f"the claim's data did not survive the pod: before {first!r}, after {second!r}")
    evidence["data_kept"] = {"before": first, "after": second, "pods": [old_uid, new_uid]}
    return evidence


def check_service_paths(node: Node) -> dict[str, Any]:
    service = json.loads(node.kubectl("get", "service", "web", "-n", NAMESPACE, "-o", "json"))
    cluster_ip = service["spec"]["clusterIP"]
    name = f"web.{NAMESPACE}.svc.{rig_layout.CLUSTER_DOMAIN}"
    job = _python_job("client", HTTP_CLIENT, "by-name", f"http://{name}/", "by-ip", f"http://{cluster_ip}/")
    log = run_job(node, "client", "", job=job)
    answers = dict(line.split(" ", 1) for line in log.splitlines() if " " in line)
    pods = {p.split()[0] for p in check_pods(node)}
    for key in ("by-name", "by-ip"):
        if answers.get(key, "").strip() not in pods:
            raise StepError(f"{key}: the answer {answers.get(key)!r} is no web pod ({sorted(pods)}); log: {log}")
    return {"service": f"{name} = {cluster_ip}", "answered_by": answers}


def check_pods(node: Node) -> list[str]:
    pods = json.loads(node.kubectl("get", "pods", "-n", NAMESPACE, "-l", "app=web", "-o", "json"))["items"]
    return [p["metadata"]["name"] for p in pods]


def check_isolation(node: Node) -> dict[str, Any]:
    lookup = run_job(node, "outside-name", f"nslookup {OUTSIDE_NAME} 2>&1; echo exit=$?")
    if "NXDOMAIN" not in lookup:
        raise StepError(f"nslookup {OUTSIDE_NAME} did not get NXDOMAIN: {lookup}")
    dropped_before, void_before = _drop_count(), _void_tx_packets()
    connect = run_job(node, "outside-address", "", job=_python_job("outside-address", CONNECT, OUTSIDE_ADDRESS, "80"))
    dropped_after, void_after = _drop_count(), _void_tx_packets()
    if "connected" in connect.split() or dropped_after <= dropped_before:
        raise StepError(
            f"a connection to {OUTSIDE_ADDRESS} was not dropped by the rule: {connect!r}, "
            f"drop counter {dropped_before} -> {dropped_after}"
        )
    if void_after != void_before:
        raise StepError(f"{rig_layout.VOID} sent {void_after - void_before} packets")
    return {
        "nslookup": lookup.splitlines()[-3:],
        "connection": connect.splitlines(),
        "drop_counter": [dropped_before, dropped_after],
        f"{rig_layout.VOID}_tx_packets": [void_before, void_after],
        "corefile_forward": "forward" in addons.configs.corefile(),
    }


CHECKS: list[tuple[str, Callable[[Node], dict[str, Any]]]] = [
    ("1 node Ready, Deployment Available, Job Complete, claim bound and kept", check_workloads),
    ("2 pod to pod through a Service by DNS name and ClusterIP", check_service_paths),
    ("3 NXDOMAIN outside the cluster, outside connection dropped and counted", check_isolation),
]


def run_node_checks(node: Node) -> list[dict[str, Any]]:
    """Every check, each printed with its verdict; a failing one does not stop the next."""
    results = []
    for name, check in CHECKS:
        began = time.monotonic()
        try:
            evidence = check(node)
            result = {"check": name, "ok": True, "evidence": evidence}
        except Exception as error:
            result = {"check": name, "ok": False, "error": f"{type(error).__name__}: {error}"}
        result["seconds"] = round(time.monotonic() - began, 1)
        node.say(f"  check {name}: {'PASS' if result['ok'] else 'FAIL'} ({result['seconds']} s)")
        results.append(result)
    node.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
    return results
