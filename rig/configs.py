"""The configuration files of the rig's node, rendered from its layout: pure functions, written by rig/node.py.

Each file says, where upstream has a pitfall on this kind of machine, why a value is what it is; the facts come from
the pinned sources named beside them and from what a real node showed here (shared reference rig.md, "A real node").
The unit tests (tests/test_rig_node.py) hold the isolation properties of every file: containerd sends every registry
host to the rig's registry, CoreDNS forwards nothing, the pods' resolver knows no host resolver.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from rig import layout as rig_layout
from rig.layout import Layout

SANDBOX_IMAGE = "registry.k8s.io/pause:3.10.2"
"""The image containerd runs as every pod's sandbox: the name containerd v2.4.2 defaults to (internal/cri/config/
config_unix.go DefaultSandboxImage), built here (rig/images.py) and pinned so the CRI never pulls it by itself."""
CNI_NETWORK = "agent-budgets-rig"
CNI_BIN_DIR = Path("/usr/lib/cni")
"""Debian's containernetworking-plugins (bridge, host-local, loopback, portmap)."""


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def toml_text(tables: dict[str, dict[str, Any]], top: dict[str, Any]) -> str:
    """A small TOML writer for flat tables (containerd's and the registry's files need nothing more): `top` keys
    first, then each `[table]` with its scalar keys. Table names are written as given (quoted where they hold dots)."""
    lines = [f"{key} = {_toml_value(value)}" for key, value in top.items()]
    for name, values in tables.items():
        lines.append("")
        lines.append(f"[{name}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in values.items())
    return "\n".join(lines) + "\n"


# --- containerd -------------------------------------------------------------------------------------------------


def containerd_config(layout: Layout, runc: Path) -> str:
    """containerd 2.4's config (version 3) for the kubelet's CRI: the rig's own root, state and socket; runc by path;
    the CNI bridge; every registry through the rig's hosts directory; the sandbox image pinned (local, never pulled).

    `restrict_oom_score_adj`: processes here lack CAP_SYS_RESOURCE, so a negative oom_score_adj is refused and every
    sandbox would fail (`nsexec: failed to update /proc/self/oom_score_adj: Permission denied`); with it containerd
    raises any lower score to its own (internal/cri/config/config.go RestrictOOMScoreAdj).
    """
    cri_runtime = "plugins.'io.containerd.cri.v1.runtime'"
    cri_images = "plugins.'io.containerd.cri.v1.images'"
    tables: dict[str, dict[str, Any]] = {
        "grpc": {"address": str(layout.containerd_socket)},
        "ttrpc": {"address": str(layout.containerd_socket) + ".ttrpc"},
        "debug": {"address": "", "level": "info"},
        "metrics": {"address": ""},
        # Pod network namespaces under containerd's state (removed with it), not in the machine's /run/netns.
        cri_runtime: {
            "restrict_oom_score_adj": True,
            "enable_selinux": False,
            "disable_apparmor": True,
            "netns_mounts_under_state_dir": True,
        },
        f"{cri_runtime}.containerd": {"default_runtime_name": "runc"},
        f"{cri_runtime}.containerd.runtimes.runc": {"runtime_type": "io.containerd.runc.v2"},
        f"{cri_runtime}.containerd.runtimes.runc.options": {"BinaryName": str(runc), "SystemdCgroup": False},
        f"{cri_runtime}.cni": {
            "bin_dirs": [str(CNI_BIN_DIR)],
            "conf_dir": str(layout.cni_conf_dir),
            "max_conf_num": 1,
        },
        cri_images: {"snapshotter": "overlayfs"},
        f"{cri_images}.pinned_images": {"sandbox": SANDBOX_IMAGE},
        f"{cri_images}.registry": {"config_path": str(hosts_dir(layout))},
        # The streaming server (exec, logs, port-forward) on the node's loopback only.
        "plugins.'io.containerd.grpc.v1.cri'": {"stream_server_address": "127.0.0.1", "stream_server_port": "0"},
        "plugins.'io.containerd.internal.v1.opt'": {"path": str(layout.containerd_root / "opt")},
        # NRI would open /var/run/nri/nri.sock on the machine: the rig has no NRI plugin.
        "plugins.'io.containerd.nri.v1.nri'": {"disable": True},
    }
    top = {
        "version": 3,
        "root": str(layout.containerd_root / "root"),
        "state": str(layout.containerd_state),
        "oom_score": 0,
    }
    return toml_text(tables, top)


def hosts_dir(layout: Layout) -> Path:
    return layout.config / "containerd-hosts"


def default_hosts_toml(layout: Layout) -> str:
    """`_default/hosts.toml`: the host every registry name resolves to when it has no directory of its own, which in
    the rig is every name (containerd v2.4.2 core/remotes/docker/config/config_unix.go hostPaths). The upstream
    server is the
    rig's registry too, so not even a fallback leaves the node."""
    registry = f"http://{layout.registry_address}"
    return toml_text(
        {f'host."{registry}"': {"capabilities": ["pull", "resolve"], "skip_verify": True}}, {"server": registry}
    )


# --- CNI ---------------------------------------------------------------------------------------------------------


def cni_conflist(layout: Layout) -> dict[str, Any]:
    """The pods' network: one bridge whose address is the node's, host-local addresses in the pod range, no
    masquerade (nothing is to leave), hairpin on (a pod reaches itself through its Service)."""
    ranges = layout.ranges
    return {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": rig_layout.BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(layout.cni_networks),
                    "ranges": [
                        [
                            {
                                "subnet": str(ranges.pods),
                                "rangeStart": str(ranges.pod_range_start),
                                "rangeEnd": str(ranges.pod_range_end),
                                "gateway": str(ranges.node_ip),
                            }
                        ]
                    ],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


# --- the kubelet and kube-proxy -------------------------------------------------------------------------------


def kubelet_config(layout: Layout) -> dict[str, Any]:
    """KubeletConfiguration v1beta1 for a single node on this machine.

    - `failCgroupV1: false`: the machine has cgroup v1 hierarchies (and cgroup2 only at /sys/fs/cgroup/unified), and
      kubelet 1.35 and later refuse to start on cgroup v1 unless told (KEP-5573).
    - `cgroupDriver: cgroupfs`: no systemd runs here.
    - `oomScoreAdj: 0`: the kubelet's default of -999 is refused without CAP_SYS_RESOURCE.
    - `resolvConf`: a file of the rig's holding no nameserver, so no pod (CoreDNS with `dnsPolicy: Default` among
      them) learns the machine's resolver.
    """
    ranges = layout.ranges
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": rig_layout.CGROUP_ROOT,
        "cgroupsPerQOS": True,
        "oomScoreAdj": 0,
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "address": str(ranges.node_ip),
        "port": layout.ports.kubelet,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": layout.ports.kubelet_healthz,
        "clusterDomain": rig_layout.CLUSTER_DOMAIN,
        "clusterDNS": [str(ranges.dns_service_ip)],
        "resolvConf": str(layout.config / "resolv.conf"),
        "podLogsDir": str(layout.pod_logs),
        "staticPodPath": "",
        "failSwapOn": False,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(layout.pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(layout.pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(layout.pki / "kubelet-serving.key"),
        "serializeImagePulls": False,
        # The machine's disk is shared with the builds: evict only when it is nearly full.
        "evictionHard": {"nodefs.available": "2%", "imagefs.available": "2%", "memory.available": "200Mi"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "maxPods": 110,
        "makeIPTablesUtilChains": True,
        "localStorageCapacityIsolation": True,
        "protectKernelDefaults": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
    }


def kube_proxy_config(layout: Layout) -> dict[str, Any]:
    """KubeProxyConfiguration in iptables mode. The conntrack settings are zero: they are sysctls of the machine
    (nf_conntrack_max is global, not per network namespace), which kube-proxy would otherwise write."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(layout.kubeconfig("kube-proxy"))},
        "hostnameOverride": rig_layout.NODE_NAME,
        "clusterCIDR": str(layout.ranges.pods),
        "bindAddress": "127.0.0.1",
        "healthzBindAddress": f"127.0.0.1:{layout.ports.kube_proxy_healthz}",
        "metricsBindAddress": f"127.0.0.1:{layout.ports.kube_proxy_metrics}",
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "iptables": {"masqueradeAll": False, "syncPeriod": "10s", "minSyncPeriod": "1s"},
        "nodePortAddresses": [f"{layout.ranges.node_ip}/32"],
    }


def resolv_conf() -> str:
    """The pods' base resolver file: no nameserver of the machine's. ClusterFirst pods get CoreDNS from the kubelet;
    a pod with `dnsPolicy: Default` gets nothing to ask."""
    return "# agent-budgets rig: no resolver outside the cluster.\noptions ndots:1\n"


# --- the cluster's DNS and the registry -----------------------------------------------------------------------


def corefile() -> str:
    """CoreDNS answers the cluster's zone and the reverse zones, and nothing else: there is no `forward` plugin,
    and every other name gets NXDOMAIN from the catch-all block's `template`, never a query to anyone.

    Two server blocks, because CoreDNS runs its plugins in the order of its plugin.cfg, not the Corefile's:
    `template` comes before `kubernetes` there, so in one block it would answer NXDOMAIN for the cluster's names
    too. A query goes to the block of its most specific zone (CoreDNS v1.15.0 core/dnsserver)."""
    domain = rig_layout.CLUSTER_DOMAIN
    return (
        f"{domain}:53 in-addr.arpa:53 ip6.arpa:53 {{\n"
        "    errors\n"
        "    health :8080\n"
        "    ready :8181\n"
        f"    kubernetes {domain} in-addr.arpa ip6.arpa {{\n"
        "        pods insecure\n"
        "        ttl 30\n"
        "    }\n"
        "    cache 30\n"
        "    reload\n"
        "}\n"
        ".:53 {\n"
        "    errors\n"
        "    template ANY ANY {\n"
        "        rcode NXDOMAIN\n"
        "    }\n"
        "}\n"
    )


def registry_config(layout: Layout) -> dict[str, Any]:
    """distribution v3's configuration: filesystem storage in the rig's state, listening on the namespace's loopback,
    deletes on (the rig replaces an image whose inputs changed)."""
    return {
        "version": "0.1",
        "log": {"level": "info", "formatter": "text"},
        "storage": {
            "filesystem": {"rootdirectory": str(layout.registry_storage)},
            "delete": {"enabled": True},
            "maintenance": {"uploadpurging": {"enabled": False}},
        },
        "http": {"addr": layout.registry_address, "debug": {"addr": ""}},
    }


def kubeconfig(layout: Layout, who: str, client_cert: Path, client_key: Path, server: str | None = None) -> str:
    """A kubeconfig for one client of the API server, certificates by path; context `agent-budgets-rig` (the rig
    stack's `kubernetes.context`)."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "agent-budgets-rig",
                "cluster": {
                    "server": server or layout.apiserver_url,
                    "certificate-authority": str(layout.pki / "ca.crt"),
                },
            }
        ],
        "users": [{"name": who, "user": {"client-certificate": str(client_cert), "client-key": str(client_key)}}],
        "contexts": [{"name": "agent-budgets-rig", "context": {"cluster": "agent-budgets-rig", "user": who}}],
        "current-context": "agent-budgets-rig",
    }
    return yaml.safe_dump(document, sort_keys=False)
