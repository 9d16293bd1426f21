"""The rig's node (`make rig`): its configuration files, its isolation rule, its clean-up, its images and its
certificates, without bringing a node up (that is `make rig`, which is not in the suite: it needs the whole
machine for minutes).

The isolation properties are checked on what the rig writes: containerd sends every registry host to the rig's
registry, CoreDNS forwards nothing, the pods' resolver names no nameserver, and the drop rule, installed with the
real iptables in a network namespace of the test's own, counts a packet to an address outside the rig's ranges
and lets loopback through.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import tomllib
import uuid
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from rig import addons, catalog, configs, images, isolation, pki, teardown
from rig import layout as rig_layout
from rig.layout import Layout, Ranges
from rig.versions import load
from tests.support.ci import skip_or_fail

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(state=tmp_path / "state", run_root=tmp_path / "run")


# --- the layout ------------------------------------------------------------------------------------------------


def test_the_node_address_is_in_the_pod_range_and_not_loopback():
    """The kubelet refuses a loopback node IP, and the API server a loopback `kubernetes` endpoint."""
    ranges = Ranges()
    assert ranges.node_ip == ipaddress.IPv4Address("10.244.0.1")
    assert ranges.node_ip in ranges.pods and not ranges.node_ip.is_loopback
    assert ranges.kubernetes_service_ip in ranges.services and ranges.dns_service_ip in ranges.services
    assert ranges.pod_range_start > ranges.node_ip and ranges.pod_range_end in ranges.pods
    assert not ranges.pods.overlaps(ranges.services)


def test_every_socket_path_fits_a_unix_socket(layout: Layout):
    """A unix socket path is at most 107 bytes (sun_path); containerd's are under the run root."""
    default = rig_layout.default_layout(Path("/home/someone/.cache/agent-budgets"))
    assert len(str(default.containerd_socket) + ".ttrpc") < 108
    assert default.run_root == Path("/run/agent-budgets-rig")


def test_what_survives_rig_down_is_outside_the_cluster_state(layout: Layout):
    for kept in layout.kept():
        assert not kept.is_relative_to(layout.cluster)
    for path in (layout.etcd_data, layout.kubelet_root, layout.containerd_root, layout.pki, layout.volumes):
        assert path.is_relative_to(layout.cluster)


# --- containerd: every pull goes to the rig's registry -----------------------------------------------------------


def test_containerd_sends_every_registry_host_to_the_rigs_registry(layout: Layout):
    config = tomllib.loads(configs.containerd_config(layout, Path("/opt/runc")))
    images_plugin = config["plugins"]["io.containerd.cri.v1.images"]
    assert images_plugin["registry"]["config_path"] == str(configs.hosts_dir(layout))
    hosts = tomllib.loads(configs.default_hosts_toml(layout))
    assert hosts["server"] == "http://127.0.0.1:5000"
    assert list(hosts["host"]) == ["http://127.0.0.1:5000"]
    assert ipaddress.ip_address(layout.registry_address.split(":")[0]).is_loopback
    # The sandbox image is pinned: the CRI never pulls it by itself.
    assert images_plugin["pinned_images"] == {"sandbox": configs.SANDBOX_IMAGE}


def test_containerd_works_within_what_the_machine_allows(layout: Layout):
    """No CAP_SYS_RESOURCE here: a lower oom_score_adj is refused, so containerd must restrict it; runc is the pinned
    build by path (Debian's 1.1.5 fails every sandbox); pod namespaces live under the rig's state; NRI is off."""
    config = tomllib.loads(configs.containerd_config(layout, Path("/opt/runc-v1.5.3/runc")))
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["netns_mounts_under_state_dir"] is True
    assert runtime["containerd"]["runtimes"]["runc"]["options"] == {
        "BinaryName": "/opt/runc-v1.5.3/runc",
        "SystemdCgroup": False,
    }
    assert runtime["cni"]["conf_dir"] == str(layout.cni_conf_dir)
    assert config["plugins"]["io.containerd.nri.v1.nri"]["disable"] is True
    assert config["grpc"]["address"] == str(layout.containerd_socket)
    assert config["root"].startswith(str(layout.cluster)) and config["state"].startswith(str(layout.run_root))
    assert config["plugins"]["io.containerd.grpc.v1.cri"]["stream_server_address"] == "127.0.0.1"


def test_the_pod_network_stays_in_the_rigs_range_without_masquerade(layout: Layout):
    conflist = configs.cni_conflist(layout)
    bridge = conflist["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["bridge"] == rig_layout.BRIDGE
    assert bridge["ipMasq"] is False
    (pool,) = bridge["ipam"]["ranges"][0]
    assert ipaddress.IPv4Network(pool["subnet"]) == layout.ranges.pods
    assert pool["gateway"] == str(layout.ranges.node_ip)
    assert bridge["ipam"]["dataDir"] == str(layout.cni_networks)


# --- DNS: cluster names only ---------------------------------------------------------------------------------------


def _corefile_blocks(text: str) -> dict[str, list[str]]:
    blocks: dict[str, list[str]] = {}
    current: str | None = None
    depth = 0
    for line in text.splitlines():
        stripped = line.strip()
        if depth == 0 and stripped.endswith("{"):
            current = stripped[:-1].strip()
            blocks[current] = []
        elif current is not None:
            blocks[current].append(stripped)
        depth += stripped.count("{") - stripped.count("}")
    return blocks


def test_coredns_forwards_nothing_and_answers_other_names_nxdomain():
    text = configs.corefile()
    directives = {line.split()[0] for line in text.splitlines() if line.strip() and not line.strip().startswith("}")}
    assert not directives & {"forward", "proxy", "grpc", "etcd", "route53", "azure", "clouddns"}
    blocks = _corefile_blocks(text)
    assert set(blocks) == {"cluster.local:53 in-addr.arpa:53 ip6.arpa:53", ".:53"}
    # `template` runs before `kubernetes` in CoreDNS's plugin order: it must not share the cluster zone's block.
    assert any(
        line.startswith("kubernetes cluster.local") for line in blocks["cluster.local:53 in-addr.arpa:53 ip6.arpa:53"]
    )
    assert not any(line.startswith("template") for line in blocks["cluster.local:53 in-addr.arpa:53 ip6.arpa:53"])
    assert "rcode NXDOMAIN" in blocks[".:53"] and not any(line.startswith("kubernetes") for line in blocks[".:53"])


def test_no_pod_learns_the_machines_resolver(layout: Layout):
    """The kubelet hands pods its resolvConf's search and nameservers; the rig's file has no nameserver, and CoreDNS
    (dnsPolicy Default) uses that same file."""
    kubelet = configs.kubelet_config(layout)
    assert Path(kubelet["resolvConf"]).parent == layout.config
    assert not [line for line in configs.resolv_conf().splitlines() if line.startswith("nameserver")]
    assert kubelet["clusterDNS"] == [str(layout.ranges.dns_service_ip)]
    coredns_deployment = next(d for d in addons.coredns(layout) if d["kind"] == "Deployment")
    assert coredns_deployment["spec"]["template"]["spec"]["dnsPolicy"] == "Default"
    service = next(d for d in addons.coredns(layout) if d["kind"] == "Service")
    assert service["spec"]["clusterIP"] == str(layout.ranges.dns_service_ip)


def test_the_kubelet_runs_on_cgroup_v1_without_systemd_or_privilege(layout: Layout):
    """Kubelet 1.35+ refuses cgroup v1 unless failCgroupV1 is false (KEP-5573); no systemd runs here; the default
    oomScoreAdj of -999 is refused without CAP_SYS_RESOURCE; every pod's cgroup sits under the rig's root."""
    kubelet = configs.kubelet_config(layout)
    assert kubelet["failCgroupV1"] is False
    assert kubelet["cgroupDriver"] == "cgroupfs"
    assert kubelet["oomScoreAdj"] == 0
    assert kubelet["cgroupRoot"] == rig_layout.CGROUP_ROOT
    assert kubelet["address"] == str(layout.ranges.node_ip)
    assert kubelet["containerRuntimeEndpoint"] == f"unix://{layout.containerd_socket}"
    proxy = configs.kube_proxy_config(layout)
    assert proxy["conntrack"]["maxPerCore"] == 0 and proxy["conntrack"]["min"] == 0
    assert proxy["clusterCIDR"] == str(layout.ranges.pods)


def test_the_registry_listens_on_the_namespaces_loopback_only(layout: Layout):
    config = configs.registry_config(layout)
    host, _, port = config["http"]["addr"].rpartition(":")
    assert ipaddress.ip_address(host).is_loopback and int(port) == layout.ports.registry
    assert config["storage"]["filesystem"]["rootdirectory"] == str(layout.registry_storage)


# --- the drop rule ------------------------------------------------------------------------------------------------


def _verdict(rules: isolation.Rules, address: str) -> str:
    """Walk our chain as iptables does for a destination: the first matching RETURN lets it on, else the DROP."""
    for argv in rules.ipv4:
        network = argv[argv.index("-d") + 1] if "-A" in argv and "-d" in argv else None
        if network is not None and ipaddress.ip_address(address) in ipaddress.ip_network(network):
            return "allowed"
    return "dropped"


@pytest.mark.parametrize(
    ("address", "verdict"),
    [
        ("127.0.0.1", "allowed"),
        ("10.244.0.1", "allowed"),
        ("10.244.0.200", "allowed"),
        ("10.96.0.10", "allowed"),
        ("10.96.1.1", "dropped"),
        ("10.245.0.1", "dropped"),
        ("10.0.0.1", "dropped"),
        ("172.17.0.1", "dropped"),
        ("192.168.1.1", "dropped"),
        ("192.0.2.1", "dropped"),
        ("169.254.169.254", "dropped"),
    ],
)
def test_the_rule_lets_through_the_rigs_ranges_only(address: str, verdict: str):
    assert _verdict(isolation.install_rules(Ranges()), address) == verdict


def test_the_rule_is_first_in_forward_and_output_and_ends_in_a_counted_drop():
    rules = isolation.install_rules(Ranges())
    jumps = [argv for argv in rules.ipv4 if "-I" in argv]
    assert {argv[argv.index("-I") + 1] for argv in jumps} == {"FORWARD", "OUTPUT"}
    assert all(argv[argv.index("-I") + 2] == "1" for argv in jumps)
    appended = [argv for argv in rules.ipv4 if "-A" in argv]
    assert appended[-1][-2:] == ("-j", "DROP") and all(argv[-1] == "RETURN" for argv in appended[:-1])
    assert [argv[argv.index("-d") + 1] for argv in rules.ipv6 if "-d" in argv] == ["::1/128"]
    removal = isolation.remove_rules().ipv4
    assert [argv[1] for argv in removal] == ["-D", "-D", "-F", "-X"]


def test_the_drop_counter_is_read_from_iptables_listing():
    listing = (
        "Chain AGENT-BUDGETS-RIG (2 references)\n"
        "    pkts      bytes target     prot opt in     out     source               destination\n"
        "      12      720 RETURN     0    --  *      *       0.0.0.0/0            127.0.0.0/8\n"
        "       3      180 DROP       0    --  *      *       0.0.0.0/0            0.0.0.0/0            /* x */\n"
    )
    assert isolation.dropped_packets(listing) == 3
    assert isolation.dropped_packets("Chain AGENT-BUDGETS-RIG (0 references)\n") == 0


def _can_make_network_namespaces() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("iptables") is not None


def test_the_real_iptables_drops_and_counts_a_packet_leaving_the_ranges():
    """The rule as iptables installs it, in a network namespace of the test's own: a UDP datagram to an address
    outside the ranges is counted by the drop (and never reaches the namespace's only other interface), one to
    loopback is not."""
    if not _can_make_network_namespaces():
        skip_or_fail("needs root with ip and iptables (network namespaces)")
    name = f"ab-rig-test-{uuid.uuid4().hex[:8]}"

    def ns(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", name, *argv], capture_output=True, text=True, check=True)

    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        ns("ip", "link", "set", "lo", "up")
        ns("ip", "link", "add", "void", "type", "veth", "peer", "name", "void-peer")
        ns("ip", "link", "set", "void", "up")
        ns("ip", "route", "add", "default", "dev", "void")
        for argv in isolation.install_rules(Ranges()).ipv4:
            ns("iptables", *argv)
        send = (
            "import socket, sys\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "try:\n    s.sendto(b'x', (sys.argv[1], 9))\nexcept OSError as e:\n    print(e.errno)\n"
        )
        count = lambda: isolation.dropped_packets(  # noqa: E731
            ns("iptables", "-w", "-L", rig_layout.IPTABLES_CHAIN, "-v", "-x", "-n").stdout
        )
        before = count()
        ns("python3", "-c", send, "127.0.0.1")
        assert count() == before
        ns("python3", "-c", send, "192.0.2.1")
        ns("python3", "-c", send, "10.0.0.1")
        assert count() == before + 2
        stats = json.loads(ns("ip", "-s", "-j", "link", "show", "dev", "void").stdout)[0]["stats64"]["tx"]
        assert stats["packets"] == 0
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


# --- clean-up -----------------------------------------------------------------------------------------------------

MOUNTINFO = """\
22 1 0:21 / / rw - ext4 /dev/vda rw
30 22 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw
31 30 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
32 30 0:28 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
40 22 0:40 / /state/cluster/kubelet rw shared:5 - ext4 /dev/vda rw
41 40 0:41 / /state/cluster/kubelet/pods/a/volumes/kubernetes.io~projected/token rw - tmpfs tmpfs rw
42 22 0:42 / /run/agent-budgets-rig/containerd/io.containerd.runtime.v2.task/k8s.io/abc/rootfs rw - overlay overlay rw
43 22 0:43 / /state/cluster-other rw - tmpfs tmpfs rw
44 22 0:44 / /state/cluster/with\\040space rw - tmpfs tmpfs rw
"""


def test_the_clean_up_unmounts_only_the_rigs_mounts_deepest_first():
    points = teardown.mounts_under(MOUNTINFO, [Path("/state/cluster"), Path("/run/agent-budgets-rig")])
    assert points == [
        "/state/cluster/kubelet/pods/a/volumes/kubernetes.io~projected/token",
        "/run/agent-budgets-rig/containerd/io.containerd.runtime.v2.task/k8s.io/abc/rootfs",
        "/state/cluster/with space",
        "/state/cluster/kubelet",
    ]
    assert "/state/cluster-other" not in points


def test_the_clean_up_finds_the_kubelets_cgroups_in_every_hierarchy(tmp_path: Path):
    assert teardown.cgroup_hierarchies(MOUNTINFO) == ["/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified"]
    memory, unified = tmp_path / "memory", tmp_path / "unified"
    for hierarchy in (memory, unified):
        (hierarchy / "agent-budgets-rig" / "kubepods" / "besteffort" / "pod1").mkdir(parents=True)
    (memory / "other" / "x").mkdir(parents=True)
    (memory / "agent-budgets-rig" / "kubepods" / "besteffort" / "pod1" / "cgroup.procs").write_text("42\n7\n")
    found = teardown.rig_cgroup_dirs([str(memory), str(unified)])
    assert all("agent-budgets-rig" in str(path) for path in found)
    assert len(found) == 8
    assert [len(path.parts) for path in found] == sorted((len(path.parts) for path in found), reverse=True)
    assert teardown.cgroup_pids(found) == {42, 7}


def test_the_clean_up_report_names_what_it_removed():
    removed = teardown.Removed(processes=["10 (etcd)", "11 (kubelet)"], network_namespaces=["agent-budgets-rig"])
    lines = removed.lines()
    assert lines[0] == "processes stopped: 2 (10 (etcd), 11 (kubelet))"
    assert "network namespaces (with their interfaces, routes and rules): 1 (agent-budgets-rig)" in lines
    assert "mounts: 0" in lines


def test_a_machine_without_a_rig_has_no_leftovers(layout: Layout):
    """Nothing under the (empty) layout, no namespace of another name: the check `make rig-down` ends with."""
    assert not [item for item in teardown.leftovers(layout) if "agent-budgets-rig" not in item]


# --- images ------------------------------------------------------------------------------------------------------


def test_a_layer_is_reproducible_and_its_digests_are_of_its_bytes(tmp_path: Path):
    entries = (
        images.FileEntry("usr/local/bin/tool", b"#!/bin/sh\necho hi\n", mode=0o755),
        images.DirEntry("tmp", 0o1777),
        images.LinkEntry("bin/sh", "busybox"),
    )
    first = images.entries_layer(tmp_path, entries)
    second = images.entries_layer(tmp_path, tuple(reversed(entries)))
    assert first == second
    blob = first.path.read_bytes()
    assert first.digest == images._sha256(blob) and first.size == len(blob)
    import gzip
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as archive:
        names = archive.getnames()
        assert names == sorted(names)
        assert {"usr", "usr/local", "usr/local/bin", "usr/local/bin/tool", "tmp", "bin", "bin/sh"} == set(names)
        assert archive.getmember("tmp").mode == 0o1777 and archive.getmember("usr/local/bin/tool").mtime == 0
    assert first.diff_id == images._sha256(gzip.decompress(blob))


def test_an_image_manifest_names_its_config_and_layers(tmp_path: Path):
    spec = images.ImageSpec(reference="docker.io/library/x:1", entries=(images.FileEntry("a", b"a"),), cmd=("a",))
    built = images.build_image(spec, tmp_path, None)
    manifest = json.loads(built.manifest)
    config = json.loads(built.config)
    assert manifest["mediaType"] == images.MANIFEST_MEDIA_TYPE
    assert manifest["config"]["digest"] == images._sha256(built.config)
    assert [layer["digest"] for layer in manifest["layers"]] == [layer.digest for layer in built.layers]
    assert config["rootfs"]["diff_ids"] == [layer.diff_id for layer in built.layers]
    assert config["config"]["Cmd"] == ["a"]
    assert config["config"]["Labels"]["dev.agent-budgets.rig.stands-for"] == "docker.io/library/x:1"


@pytest.mark.parametrize(
    ("reference", "parts"),
    [
        ("docker.io/envoyproxy/gateway:v1.9.0", ("docker.io", "envoyproxy/gateway", "v1.9.0")),
        ("registry.k8s.io/pause:3.10.2", ("registry.k8s.io", "pause", "3.10.2")),
        ("127.0.0.1:5000/library/redis:7", ("127.0.0.1:5000", "library/redis", "7")),
    ],
)
def test_references_split_into_host_repository_and_tag(reference: str, parts: tuple[str, str, str]):
    assert images.split_reference(reference) == parts


def test_a_reference_without_host_or_tag_is_refused():
    for reference in ("redis:7", "docker.io/library/redis", "docker.io/x@sha256:ab"):
        with pytest.raises(ValueError, match="fully qualified"):
            images.split_reference(reference)


def test_the_debian_mirror_is_read_from_apts_sources(tmp_path: Path):
    deb822 = tmp_path / "debian.sources"
    deb822.write_text("Types: deb\nURIs: http://mirror.invalid/debian\nSuites: bookworm\n")
    assert images.debian_mirror([deb822]) == "http://mirror.invalid/debian"
    one_line = tmp_path / "sources.list"
    one_line.write_text("# comment\ndeb http://other.invalid/debian bookworm main\n")
    assert images.debian_mirror([one_line]) == "http://other.invalid/debian"
    with pytest.raises(RuntimeError, match="no Debian mirror"):
        images.debian_mirror([tmp_path / "missing"])


def test_every_image_the_rig_builds_is_fully_qualified_and_says_how_it_differs(tmp_path: Path):
    fake = tmp_path / "bin"
    fake.write_bytes(b"\0")
    binaries = {name: fake for name in ("coredns", "local-path-provisioner", "envoy-gateway", "ratelimit")}
    specs = catalog.node_images(binaries, fake) + catalog.platform_images(binaries, fake, fake)
    references = [spec.reference for spec in specs]
    assert len(set(references)) == len(references)
    for spec in specs:
        host, repository, tag = images.split_reference(spec.reference)
        assert "." in host and repository and tag
        assert len(spec.differs) > 20, spec.reference
    assert configs.SANDBOX_IMAGE in references and catalog.envoy_image() in references
    # The tags follow rig/versions.toml.
    versions = load().pieces
    assert f"registry.k8s.io/coredns/coredns:{versions['coredns'].version}" in references
    assert catalog.envoy_image() == f"docker.io/envoyproxy/envoy:distroless-v{versions['envoy'].version}"


# --- certificates ---------------------------------------------------------------------------------------------


def test_the_cluster_certificates_name_what_each_client_and_server_is(layout: Layout):
    paths = pki.write_cluster_pki(layout)
    ca = x509.load_pem_x509_certificate(paths["ca.crt"].read_bytes())
    apiserver = x509.load_pem_x509_certificate(paths["apiserver.crt"].read_bytes())
    names = apiserver.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in names.get_values_for_type(x509.IPAddress)} == {"10.244.0.1", "10.96.0.1", "127.0.0.1"}
    assert "kubernetes.default.svc.cluster.local" in names.get_values_for_type(x509.DNSName)
    apiserver.verify_directly_issued_by(ca)
    kubelet = x509.load_pem_x509_certificate(paths["kubelet.crt"].read_bytes())
    assert kubelet.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:rig-node"
    assert kubelet.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    admin = x509.load_pem_x509_certificate(paths["admin.crt"].read_bytes())
    assert admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    assert oct(paths["ca.key"].stat().st_mode & 0o777) == "0o600"


def test_a_kubeconfig_names_the_rig_context_and_files(layout: Layout):
    text = configs.kubeconfig(layout, "admin", Path("/p/admin.crt"), Path("/p/admin.key"))
    document = yaml.safe_load(text)
    assert document["current-context"] == "agent-budgets-rig"
    assert document["clusters"][0]["cluster"]["server"] == "https://10.244.0.1:6443"
    assert document["users"][0]["user"] == {"client-certificate": "/p/admin.crt", "client-key": "/p/admin.key"}


def test_the_local_path_provisioner_uses_the_account_its_helper_pods_run_as(layout: Layout):
    """Its helper pods run as `local-path-provisioner-service-account` unless told otherwise (v0.0.30 main.go): with
    another name every claim fails (`serviceaccount ... not found`), as the first rig run showed."""
    objects = addons.local_path_provisioner(layout)
    accounts = [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"]
    assert accounts == [addons.PROVISIONER_ACCOUNT] == ["local-path-provisioner-service-account"]
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == addons.PROVISIONER_ACCOUNT
    storage_class = next(o for o in objects if o["kind"] == "StorageClass")
    assert storage_class["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    config = json.loads(next(o for o in objects if o["kind"] == "ConfigMap")["data"]["config.json"])
    assert config["nodePathMap"][0]["paths"] == [str(layout.volumes)]
