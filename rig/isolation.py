"""The rule that keeps every packet of the rig on the machine: in the node's network namespace, traffic to anything
but loopback, the pod range and the service range is dropped, and counted.

It is the second of two walls: the namespace has no interface that leads off the machine (its default route points
at a veth whose peer is down, rig/layout.py), so the rule holds by construction, and its packet counter is the
evidence that
something tried (the node check "a connection outside the rig's ranges is dropped" reads it). IPv6 is refused
outright but for loopback: the rig has no IPv6 range.

Kubernetes' own chains (KUBE-*) come after ours: service addresses are rewritten to pod addresses in the nat table
before the filter table sees them, so the rule sees a pod address where a pod dials a Service.
"""

from __future__ import annotations

from dataclasses import dataclass

from rig.layout import IPTABLES_CHAIN, Ranges

HOOKS = ("FORWARD", "OUTPUT")
COMMENT = "agent-budgets rig: nothing leaves the rig's ranges"


@dataclass(frozen=True)
class Rules:
    """The iptables and ip6tables commands (argv lists, without the binary) that install the rule."""

    ipv4: tuple[tuple[str, ...], ...]
    ipv6: tuple[tuple[str, ...], ...]


def install_rules(ranges: Ranges) -> Rules:
    """Our chain, its accepts for the allowed ranges, the counted drop, and the jumps from FORWARD and OUTPUT placed
    first (`-I ... 1`), so no rule installed later (kube-proxy's, the kubelet's) can accept a packet before it."""

    def chain(allowed: list[str]) -> tuple[tuple[str, ...], ...]:
        commands: list[tuple[str, ...]] = [("-w", "-N", IPTABLES_CHAIN)]
        commands += [("-w", "-A", IPTABLES_CHAIN, "-d", network, "-j", "RETURN") for network in allowed]
        commands.append(("-w", "-A", IPTABLES_CHAIN, "-m", "comment", "--comment", COMMENT, "-j", "DROP"))
        commands += [("-w", "-I", hook, "1", "-j", IPTABLES_CHAIN) for hook in HOOKS]
        return tuple(commands)

    return Rules(ipv4=chain([str(network) for network in ranges.allowed()]), ipv6=chain(["::1/128"]))


def remove_rules() -> Rules:
    """The commands that take the rule out again (rig-down also deletes the namespace, which takes everything in it)."""
    commands = (
        *(("-w", "-D", hook, "-j", IPTABLES_CHAIN) for hook in HOOKS),
        ("-w", "-F", IPTABLES_CHAIN),
        ("-w", "-X", IPTABLES_CHAIN),
    )
    return Rules(ipv4=commands, ipv6=commands)


def dropped_packets(listing: str) -> int:
    """The drop rule's packet count from `iptables -L AGENT-BUDGETS-RIG -v -x -n` output (0 when it has none)."""
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "DROP" and fields[0].isdigit():
            return int(fields[0])
    return 0
