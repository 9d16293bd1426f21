"""`make rig`'s node: a single-node Kubernetes cluster whose workloads are real processes in real containers.

Steps, one progress line each (rig/__main__.py runs them and writes the report):

1. the network namespace, its bridge, the dead-end veth the default route points at, the drop rule (rig/isolation.py);
2. certificates, kubeconfigs and the configuration files (rig/pki.py, rig/configs.py);
3. etcd, kube-apiserver, kube-controller-manager, kube-scheduler;
4. the registry, containerd (with runc), and the images pushed (rig/images.py, rig/catalog.py);
5. the kubelet and kube-proxy, until the node is Ready;
6. CoreDNS and the local-path provisioner (the default StorageClass), until each is Available.

Everything runs in the node's network namespace (this process enters it after step 1), from the binaries of
rig/versions.toml in the cache; every log lands in the run directory, and every failure names the log to read.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rig import cache, configs, isolation, pki, processes
from rig import layout as rig_layout
from rig.layout import Layout
from rig.processes import StepError

Say = Callable[[str], None]

NODE_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "kubectl",
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "runc",
    "registry",
    "coredns",
    "local-path-provisioner",
    "envoy-gateway",
    "ratelimit",
    "pulumi",
    "pulumi-resource-kubernetes",
    "pulumi-language-yaml",
)
"""Every binary of rig/versions.toml the rig runs: the node's, the images' and the engine's (rig.build builds them:
`make rig` asks it first)."""
DEBIAN_TOOLS = {
    "ip": "iproute2",
    "iptables": "iptables",
    "ip6tables": "iptables",
    "nsenter": "util-linux",
    "debootstrap": "debootstrap",
    "conntrack": "conntrack",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "/bin/busybox": "busybox-static",
    "gcc": "gcc",
}
"""What the node needs from Debian, and the package that brings it (rig/__main__.py installs what is missing)."""


@dataclass
class Node:
    """A running (or half-made) rig node: its layout, its run directory and the binaries it runs."""

    layout: Layout
    run: Path
    binaries: dict[str, Path]
    say: Say
    started: dict[str, processes.Started] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def logs(self) -> Path:
        return self.run / "logs"

    def kubectl(self, *args: str, input_text: str | None = None, check: bool = True, timeout: float = 120) -> str:
        """Run the rig's kubectl as the admin; a failure raises StepError with kubectl's own words."""
        argv = [str(self.binaries["kubectl"]), "--kubeconfig", str(self.layout.kubeconfig("admin")), *args]
        result = subprocess.run(argv, input=input_text, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise StepError(f"kubectl {' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")
        return result.stdout

    def apply(self, documents: Sequence[Mapping[str, Any]]) -> str:
        text = yaml.safe_dump_all([dict(document) for document in documents], sort_keys=False)
        return self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input_text=text)

    def start(
        self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> processes.Started:
        started = processes.start(name, argv, self.logs, self.layout.pids, env=env, cwd=cwd)
        self.started[name] = started
        return started


# --- locating the pieces ----------------------------------------------------------------------------------------


def find_binaries(names: Sequence[str] = NODE_BINARIES) -> tuple[dict[str, Path], list[str]]:
    """The built binaries by name, and the names not built (or built from other inputs than the versions file's)."""
    found: dict[str, Path] = {}
    missing: list[str] = []
    for name in names:
        path = cache.tool(name)
        if path is None:
            missing.append(name)
        else:
            found[name] = path
    return found, missing


def missing_debian_tools(tools: Mapping[str, str] = DEBIAN_TOOLS) -> dict[str, str]:
    """Tool -> package, for what is not on this machine."""
    return {
        tool: package
        for tool, package in tools.items()
        if not (Path(tool).exists() if tool.startswith("/") else shutil.which(tool))
    }


# --- step 1: the network namespace -----------------------------------------------------------------------------


def _run(argv: Sequence[str]) -> str:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StepError(f"{' '.join(argv)}: {result.stderr.strip() or f'exit {result.returncode}'}")
    return result.stdout


def make_network_namespace(layout: Layout) -> dict[str, Any]:
    """The namespace with loopback up, the bridge holding the node's address, the dead-end veth the default route
    points at,
    forwarding and bridge netfilter on (Services between pods on one bridge need both), and the drop rule. Then
    this process enters it."""
    ranges = layout.ranges
    ns = rig_layout.NETNS
    _run(["ip", "netns", "add", ns])
    _run(["ip", "-n", ns, "link", "set", "lo", "up"])
    _run(["ip", "-n", ns, "link", "add", rig_layout.BRIDGE, "type", "bridge"])
    _run(["ip", "-n", ns, "addr", "add", f"{ranges.node_ip}/{ranges.pods.prefixlen}", "dev", rig_layout.BRIDGE])
    _run(["ip", "-n", ns, "link", "set", rig_layout.BRIDGE, "up"])
    _run(["ip", "-n", ns, "link", "add", rig_layout.VOID, "type", "veth", "peer", "name", rig_layout.VOID_PEER])
    _run(["ip", "-n", ns, "link", "set", rig_layout.VOID, "up"])
    _run(["ip", "-n", ns, "route", "add", "default", "dev", rig_layout.VOID])
    processes.enter_network_namespace(layout.netns_path)
    sysctls = {
        "net/ipv4/ip_forward": "1",
        "net/bridge/bridge-nf-call-iptables": "1",
        "net/bridge/bridge-nf-call-ip6tables": "1",
        "net/ipv4/conf/all/route_localnet": "1",
    }
    set_sysctls = {}
    for key, value in sysctls.items():
        path = Path("/proc/sys") / key
        try:
            path.write_text(value, encoding="utf-8")
            set_sysctls[key.replace("/", ".")] = path.read_text(encoding="utf-8").strip()
        except OSError as error:
            raise StepError(f"sysctl {key}={value} in the node's namespace: {error.strerror}") from None
    rules = isolation.install_rules(ranges)
    for argv in rules.ipv4:
        _run(["iptables", *argv])
    for argv in rules.ipv6:
        _run(["ip6tables", *argv])
    links = _run(["ip", "-o", "link", "show"])
    return {
        "namespace": ns,
        "interfaces": sorted(line.split(":")[1].strip().split("@")[0] for line in links.splitlines()),
        "node_ip": str(ranges.node_ip),
        "default_route": _run(["ip", "route", "show", "default"]).strip(),
        "sysctls": set_sysctls,
        "drop_rule": _run(["iptables", "-w", "-S", rig_layout.IPTABLES_CHAIN]).strip().splitlines(),
    }


# --- step 2: certificates and configuration --------------------------------------------------------------------


def write_configuration(layout: Layout, binaries: Mapping[str, Path]) -> dict[str, Path]:
    """Every file the components read: PKI, kubeconfigs, containerd's config and hosts, CNI, kubelet, kube-proxy,
    the registry's config, the pods' resolv.conf."""
    for directory in (layout.config, layout.kubeconfigs, layout.cni_conf_dir, layout.cni_networks, layout.pod_logs):
        directory.mkdir(parents=True, exist_ok=True)
    layout.volumes.mkdir(parents=True, exist_ok=True)
    paths = pki.write_cluster_pki(layout)
    for client in pki.CLIENTS:
        text = configs.kubeconfig(layout, client.user, paths[f"{client.stem}.crt"], paths[f"{client.stem}.key"])
        layout.kubeconfig(client.stem).write_text(text, encoding="utf-8")
        layout.kubeconfig(client.stem).chmod(0o600)
    files = {
        "containerd.toml": configs.containerd_config(layout, binaries["runc"]),
        "kubelet.yaml": yaml.safe_dump(configs.kubelet_config(layout), sort_keys=False),
        "kube-proxy.yaml": yaml.safe_dump(configs.kube_proxy_config(layout), sort_keys=False),
        "registry.yaml": yaml.safe_dump(configs.registry_config(layout), sort_keys=False),
        "resolv.conf": configs.resolv_conf(),
    }
    written = {}
    for name, text in files.items():
        (layout.config / name).write_text(text, encoding="utf-8")
        written[name] = layout.config / name
    hosts = configs.hosts_dir(layout) / "_default"
    hosts.mkdir(parents=True, exist_ok=True)
    (hosts / "hosts.toml").write_text(configs.default_hosts_toml(layout), encoding="utf-8")
    conflist = layout.cni_conf_dir / "10-agent-budgets-rig.conflist"
    conflist.write_text(json.dumps(configs.cni_conflist(layout), indent=2) + "\n", encoding="utf-8")
    written["hosts.toml"], written["cni"] = hosts / "hosts.toml", conflist
    return written


# --- step 3: the control plane --------------------------------------------------------------------------------


def _https_context(layout: Layout) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    context.load_cert_chain(str(layout.pki / "admin.crt"), str(layout.pki / "admin.key"))
    return context


def http_get(url: str, context: ssl.SSLContext | None = None, timeout: float = 5) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
        return response.status, response.read().decode(errors="replace")


def start_control_plane(node: Node) -> dict[str, Any]:
    layout, pki_dir, ports, ranges = node.layout, node.layout.pki, node.layout.ports, node.layout.ranges
    evidence: dict[str, Any] = {}
    started = time.monotonic()
    etcd = node.start(
        "etcd",
        [
            str(node.binaries["etcd"]),
            "--name=rig",
            f"--data-dir={layout.etcd_data}",
            f"--listen-client-urls=http://127.0.0.1:{ports.etcd_client}",
            f"--advertise-client-urls=http://127.0.0.1:{ports.etcd_client}",
            f"--listen-peer-urls=http://127.0.0.1:{ports.etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{ports.etcd_peer}",
            f"--initial-cluster=rig=http://127.0.0.1:{ports.etcd_peer}",
            "--listen-metrics-urls=",
            "--log-level=warn",
        ],
    )
    evidence["etcd"] = processes.wait_until(
        "etcd /health",
        lambda: (lambda r: r[1] if '"health":"true"' in r[1] else None)(
            http_get(f"http://127.0.0.1:{ports.etcd_client}/health")
        ),
        60,
        etcd,
    )
    apiserver = node.start(
        "kube-apiserver",
        [
            str(node.binaries["kube-apiserver"]),
            f"--advertise-address={ranges.node_ip}",
            "--bind-address=0.0.0.0",
            f"--secure-port={ports.apiserver}",
            f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
            f"--service-cluster-ip-range={ranges.services}",
            f"--client-ca-file={pki_dir / 'ca.crt'}",
            f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
            f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
            f"--kubelet-client-certificate={pki_dir / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki_dir / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki_dir / 'ca.crt'}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--service-account-issuer={rig_layout.SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki_dir / 'sa.pub'}",
            f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=1",
        ],
    )
    context = _https_context(layout)
    evidence["kube-apiserver"] = processes.wait_until(
        "kube-apiserver /readyz",
        lambda: (lambda r: "readyz: " + r[1].strip() if r[1].strip() == "ok" else None)(
            http_get(f"{layout.apiserver_url}/readyz", context)
        ),
        120,
        apiserver,
    )
    common = [
        "--bind-address=127.0.0.1",
        "--leader-elect=false",
        "--profiling=false",
    ]
    cm_kubeconfig = layout.kubeconfig("controller-manager")
    node.start(
        "kube-controller-manager",
        [
            str(node.binaries["kube-controller-manager"]),
            f"--kubeconfig={cm_kubeconfig}",
            f"--authentication-kubeconfig={cm_kubeconfig}",
            f"--authorization-kubeconfig={cm_kubeconfig}",
            f"--service-account-private-key-file={pki_dir / 'sa.key'}",
            f"--root-ca-file={pki_dir / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki_dir / 'ca.crt'}",
            f"--cluster-signing-key-file={pki_dir / 'ca.key'}",
            f"--service-cluster-ip-range={ranges.services}",
            "--use-service-account-credentials=true",
            "--controllers=*,bootstrapsigner,tokencleaner",
            *common,
        ],
    )
    sched_kubeconfig = layout.kubeconfig("scheduler")
    node.start(
        "kube-scheduler",
        [
            str(node.binaries["kube-scheduler"]),
            f"--kubeconfig={sched_kubeconfig}",
            f"--authentication-kubeconfig={sched_kubeconfig}",
            f"--authorization-kubeconfig={sched_kubeconfig}",
            *common,
        ],
    )

    def default_service_account() -> str | None:
        out = node.kubectl("get", "serviceaccount", "default", "-n", "default", "-o", "name", check=False)
        return "controller-manager made serviceaccount/default" if out.strip() else None

    evidence["kube-controller-manager"] = processes.wait_until(
        "kube-controller-manager", default_service_account, 90, node.started["kube-controller-manager"]
    )
    evidence["kube-scheduler"] = processes.wait_until(
        "kube-scheduler /healthz",
        lambda: (lambda r: "healthz: ok" if r[1].strip() == "ok" else None)(
            http_get(f"https://127.0.0.1:{ports.scheduler}/healthz", ssl._create_unverified_context())
        ),
        60,
        node.started["kube-scheduler"],
    )
    version = json.loads(node.kubectl("version", "-o", "json"))
    evidence["server_version"] = version.get("serverVersion", {}).get("gitVersion")
    evidence["seconds"] = round(time.monotonic() - started, 1)
    return evidence


# --- step 4: registry and containerd ---------------------------------------------------------------------------


def start_registry_and_runtime(node: Node) -> dict[str, Any]:
    layout = node.layout
    evidence: dict[str, Any] = {}
    layout.registry_storage.mkdir(parents=True, exist_ok=True)
    registry = node.start("registry", [str(node.binaries["registry"]), "serve", str(layout.config / "registry.yaml")])
    evidence["registry"] = processes.wait_until(
        "registry /v2/",
        lambda: (lambda r: f"GET /v2/ -> {r[0]}" if r[0] == 200 else None)(
            http_get(f"http://{layout.registry_address}/v2/")
        ),
        30,
        registry,
    )
    bin_dir = node.binaries["containerd"].parent
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    layout.containerd_state.mkdir(parents=True, exist_ok=True)
    containerd = node.start(
        "containerd",
        [str(node.binaries["containerd"]), "--config", str(layout.config / "containerd.toml")],
        env=env,
    )

    def serving() -> str | None:
        if not layout.containerd_socket.exists():
            return None
        out = subprocess.run(
            [str(node.binaries["ctr"]), "--address", str(layout.containerd_socket), "version"],
            capture_output=True,
            text=True,
            check=False,
        )
        return out.stdout.strip().replace("\n", "; ") if out.returncode == 0 else None

    evidence["containerd"] = processes.wait_until("containerd", serving, 60, containerd)
    return evidence


# --- step 5: kubelet and kube-proxy ---------------------------------------------------------------------------


def start_node_agents(node: Node) -> dict[str, Any]:
    layout = node.layout
    evidence: dict[str, Any] = {}
    for hierarchy in _cgroup_v1_hierarchies():
        (Path(hierarchy) / rig_layout.CGROUP_ROOT.strip("/")).mkdir(exist_ok=True)
    layout.kubelet_root.mkdir(parents=True, exist_ok=True)
    kubelet = node.start(
        "kubelet",
        [
            str(node.binaries["kubelet"]),
            f"--config={layout.config / 'kubelet.yaml'}",
            f"--kubeconfig={layout.kubeconfig('kubelet')}",
            f"--hostname-override={rig_layout.NODE_NAME}",
            f"--node-ip={layout.ranges.node_ip}",
            f"--root-dir={layout.kubelet_root}",
            f"--cert-dir={layout.kubelet_root / 'pki'}",
            "--v=1",
        ],
    )

    def ready() -> str | None:
        out = node.kubectl("get", "node", rig_layout.NODE_NAME, "-o", "json", check=False)
        if not out.strip():
            return None
        conditions = {c["type"]: c for c in json.loads(out)["status"].get("conditions", [])}
        ready_condition = conditions.get("Ready", {})
        if ready_condition.get("status") == "True":
            return f"Ready=True ({ready_condition.get('reason')}: {ready_condition.get('message')})"
        return None

    evidence["kubelet"] = processes.wait_until("node Ready", ready, 180, kubelet)
    node.start(
        "kube-proxy",
        [str(node.binaries["kube-proxy"]), f"--config={layout.config / 'kube-proxy.yaml'}", "--v=1"],
    )

    def proxying() -> str | None:
        status, body = http_get(f"http://127.0.0.1:{layout.ports.kube_proxy_healthz}/healthz")
        return f"healthz {status}: {body.strip()[:120]}" if status == 200 else None

    evidence["kube-proxy"] = processes.wait_until("kube-proxy /healthz", proxying, 60, node.started["kube-proxy"])
    return evidence


def _cgroup_v1_hierarchies() -> list[str]:
    from rig.teardown import cgroup_hierarchies

    return cgroup_hierarchies(Path("/proc/self/mountinfo").read_text(encoding="utf-8"))


# --- readiness of what the rig applies ------------------------------------------------------------------------


def wait_available(node: Node, kind: str, name: str, namespace: str, timeout: float = 180) -> str:
    """Wait until a Deployment (or StatefulSet) has all its replicas ready; the evidence is its status line."""

    def check() -> str | None:
        out = node.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
        if not out.strip():
            return None
        status = json.loads(out).get("status", {})
        wanted = json.loads(out).get("spec", {}).get("replicas", 1)
        if status.get("readyReplicas", 0) >= wanted and status.get("updatedReplicas", wanted) >= wanted:
            return f"{kind}/{name}: {status.get('readyReplicas')}/{wanted} ready"
        return None

    try:
        return processes.wait_until(f"{kind}/{name} in {namespace}", check, timeout)
    except StepError as error:
        raise StepError(f"{error}; pods: {pod_summary(node, namespace)}") from None


def pod_summary(node: Node, namespace: str) -> str:
    """The namespace's pods with their phase and the first waiting reason, for a failure message."""
    out = node.kubectl("get", "pods", "-n", namespace, "-o", "json", check=False)
    if not out.strip():
        return "none"
    parts = []
    for pod in json.loads(out).get("items", []):
        reasons = [
            f"{s['name']}: {s['state']['waiting'].get('reason')} {s['state']['waiting'].get('message', '')[:160]}"
            for s in pod.get("status", {}).get("containerStatuses", [])
            if "waiting" in s.get("state", {})
        ]
        parts.append(
            f"{pod['metadata']['name']} {pod['status'].get('phase')}" + (f" ({'; '.join(reasons)})" if reasons else "")
        )
    return ", ".join(parts) or "none"
