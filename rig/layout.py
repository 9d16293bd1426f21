"""Where the rig's node lives: its network namespace, address ranges, directories and ports, decided in one place.

The node runs in a network namespace of its own (`agent-budgets-rig`): every process of the rig (etcd, the control
plane, containerd, the kubelet, kube-proxy, the registry) and every pod sits behind it. The namespace has no
interface that leads anywhere: loopback, the pods' bridge (whose address is the node's address) and a veth
whose peer is down, which the default route points at, so a packet to any other address goes nowhere even before
the drop rule
(rig/isolation.py) counts it. `make rig-down` deletes the namespace, and with it every interface, route and
iptables rule in it.

Nothing here touches the machine: rig/node.py does, with these names.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from rig import cache

NETNS = "agent-budgets-rig"
NODE_NAME = "rig-node"
BRIDGE = "rig-br0"
VOID = "rig-void"
"""One end of a veth pair whose other end (VOID_PEER) stays down: the namespace's default route points at it, and a
veth whose peer is down delivers nothing. (The machine's kernel has no `dummy` device type and no loadable modules.)"""
VOID_PEER = "rig-void-peer"
CLUSTER_DOMAIN = "cluster.local"
SERVICE_ACCOUNT_ISSUER = f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}"
CGROUP_ROOT = "/agent-budgets-rig"
"""The kubelet's cgroupRoot: every pod's cgroup sits under it, in every hierarchy, so the clean-up knows which
cgroups are the rig's."""
IPTABLES_CHAIN = "AGENT-BUDGETS-RIG"
"""Our own chain, in the namespace's filter table, jumped to first from FORWARD and OUTPUT."""


POD_RANGE = ipaddress.IPv4Network("10.244.0.0/24")
SERVICE_RANGE = ipaddress.IPv4Network("10.96.0.0/24")
LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")


@dataclass(frozen=True)
class Ranges:
    """The only addresses the node and its pods may reach: loopback, the pod range (the node's address is its
    first host) and the service range."""

    pods: ipaddress.IPv4Network = POD_RANGE
    services: ipaddress.IPv4Network = SERVICE_RANGE
    loopback: ipaddress.IPv4Network = LOOPBACK

    @property
    def node_ip(self) -> ipaddress.IPv4Address:
        """The bridge's address: the kubelet's node IP and the API server's advertised address (neither may be
        loopback: the kubelet refuses it, and so does the API server as the `kubernetes` Service's endpoint)."""
        return self.pods.network_address + 1

    @property
    def kubernetes_service_ip(self) -> ipaddress.IPv4Address:
        """The API server allocates the first service address to the `kubernetes` Service."""
        return self.services.network_address + 1

    @property
    def dns_service_ip(self) -> ipaddress.IPv4Address:
        return self.services.network_address + 10

    @property
    def pod_range_start(self) -> ipaddress.IPv4Address:
        return self.pods.network_address + 10

    @property
    def pod_range_end(self) -> ipaddress.IPv4Address:
        return self.pods.broadcast_address - 5

    def allowed(self) -> tuple[ipaddress.IPv4Network, ...]:
        return (self.loopback, self.pods, self.services)


@dataclass(frozen=True)
class Ports:
    etcd_client: int = 2379
    etcd_peer: int = 2380
    apiserver: int = 6443
    registry: int = 5000
    kubelet: int = 10250
    kubelet_healthz: int = 10248
    kube_proxy_healthz: int = 10256
    kube_proxy_metrics: int = 10249
    controller_manager: int = 10257
    scheduler: int = 10259
    containerd_metrics: int = 1338


@dataclass(frozen=True)
class Layout:
    """Every path of one rig. `state` survives between runs only where `kept` says (the registry's storage and the
    built images); everything else under it is the cluster's and goes at `make rig-down`."""

    state: Path
    run_root: Path
    """Sockets and runtime state (containerd's state directory, the pid files): short paths, for unix sockets."""
    ranges: Ranges = field(default_factory=Ranges)
    ports: Ports = field(default_factory=Ports)

    # --- what survives rig-down ---
    @property
    def images(self) -> Path:
        """OCI layouts of the images the rig built (rig/images.py), reused while their inputs are the same."""
        return self.state / "images"

    @property
    def registry_storage(self) -> Path:
        return self.state / "registry"

    @property
    def runs(self) -> Path:
        """One directory per `make rig`: every component's log and the report."""
        return self.state / "runs"

    def kept(self) -> tuple[Path, ...]:
        return (self.images, self.registry_storage, self.runs)

    # --- the cluster's (removed by rig-down) ---
    @property
    def cluster(self) -> Path:
        return self.state / "cluster"

    @property
    def pki(self) -> Path:
        return self.cluster / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.cluster / "etcd"

    @property
    def containerd_root(self) -> Path:
        return self.cluster / "containerd"

    @property
    def kubelet_root(self) -> Path:
        return self.cluster / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.cluster / "pod-logs"

    @property
    def volumes(self) -> Path:
        """The local-path provisioner's directory: one subdirectory per PersistentVolume."""
        return self.cluster / "volumes"

    @property
    def cni_conf_dir(self) -> Path:
        return self.cluster / "cni" / "net.d"

    @property
    def cni_networks(self) -> Path:
        """host-local IPAM's allocations (it defaults to /var/lib/cni/networks)."""
        return self.cluster / "cni" / "networks"

    @property
    def config(self) -> Path:
        """The rendered configuration files (rig/configs.py)."""
        return self.cluster / "config"

    @property
    def kubeconfigs(self) -> Path:
        return self.cluster / "kubeconfig"

    def kubeconfig(self, who: str = "admin") -> Path:
        return self.kubeconfigs / f"{who}.yaml"

    @property
    def containerd_state(self) -> Path:
        return self.run_root / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.run_root / "containerd" / "containerd.sock"

    @property
    def pids(self) -> Path:
        return self.run_root / "pids"

    @property
    def netns_path(self) -> Path:
        return Path("/run/netns") / NETNS

    @property
    def apiserver_url(self) -> str:
        return f"https://{self.ranges.node_ip}:{self.ports.apiserver}"

    @property
    def registry_address(self) -> str:
        """The registry, on the namespace's loopback: containerd, running beside it, sends every pull here."""
        return f"127.0.0.1:{self.ports.registry}"


def default_layout(cache_root: Path | None = None) -> Layout:
    """The rig's layout under the cache root (outside the repository), its sockets under /run."""
    return Layout(state=(cache_root or cache.root()) / "rig", run_root=Path("/run") / NETNS)
