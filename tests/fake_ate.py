"""Test-side handle on the fake ``kubectl ate`` (tests/fake_kubectl.py): set it up, seed it, read it.

Two clusters are defined in a JSON kubeconfig: context ``kind-test`` (server :data:`TEST`) and
``kind-other`` (server :data:`OTHER`). Each has its own actors and policies, so a test can tell which
cluster a call reached.

:class:`Engine` plays the dynamic-provider host for one shard (check, diff, then create, update, read or
delete, with props as the engine hands them over); the provider tests and scripts/bench_egress.py share it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.egress_provider import EgressShardProvider
from core import egress
from core.egress import ShardInputs
from tests.fake_kubectl import cluster_slug
from tests.support.wire import engine_value

FAKE = Path(__file__).with_name("fake_kubectl.py")
TEST = "https://test.cluster.example:6443"
OTHER = "https://other.cluster.example:6443"


def kubeconfig_document(contexts: dict[str, str], current: str = "") -> dict[str, Any]:
    """A kubeconfig with one context per entry of ``contexts`` (context name -> cluster server)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "clusters": [{"name": f"cluster-{name}", "cluster": {"server": server}} for name, server in contexts.items()],
        "users": [{"name": "user", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": name, "context": {"cluster": f"cluster-{name}", "user": "user"}} for name in contexts],
    }


@dataclass
class FakeAte:
    root: Path
    kubectl: str
    kubeconfig: Path

    # -- knobs and calls

    def knobs(self) -> dict[str, Any]:
        path = self.root / "knobs.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def set(self, **knobs: Any) -> None:
        (self.root / "knobs.json").write_text(json.dumps({**self.knobs(), **knobs}))

    def calls(self) -> list[dict[str, Any]]:
        path = self.root / "calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def argvs(self) -> list[list[str]]:
        return [call["argv"] for call in self.calls()]

    def verbs(self) -> list[str]:
        return [argv[1] for argv in self.argvs()]

    def stdin_of(self, index: int) -> dict[str, Any]:
        return json.loads(self.calls()[index]["stdin"])

    def clear_calls(self) -> None:
        (self.root / "calls.jsonl").unlink(missing_ok=True)

    # -- cluster state

    def cluster_dir(self, server: str = TEST) -> Path:
        return self.root / "clusters" / cluster_slug(server)

    def add_actors(self, refs: list[str], server: str = TEST) -> None:
        for ref in refs:
            atespace, name = ref.split("/")
            path = self.cluster_dir(server) / "actors" / atespace / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()

    def actors(self, server: str = TEST) -> list[str]:
        base = self.cluster_dir(server) / "actors"
        return sorted(f"{p.parent.name}/{p.name}" for p in base.glob("*/*")) if base.exists() else []

    def policy(self, ref: str, server: str = TEST) -> dict[str, Any] | None:
        atespace, name = ref.split("/")
        path = self.cluster_dir(server) / "policies" / atespace / f"{name}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def policies(self, server: str = TEST) -> dict[str, dict[str, Any]]:
        base = self.cluster_dir(server) / "policies"
        if not base.exists():
            return {}
        return {f"{p.parent.name}/{p.stem}": json.loads(p.read_text()) for p in sorted(base.glob("*/*.json"))}

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.kubectl, *args], input=stdin, capture_output=True, text=True, timeout=30, check=False
        )


def make_fake(directory: Path, *, python: str = sys.executable) -> FakeAte:
    """Create the fake's state, a ``kubectl`` wrapper and a kubeconfig; the caller points
    ``FAKE_ATE_STATE`` at ``fake.root`` and ``KUBECONFIG`` at ``fake.kubeconfig`` (see :func:`environ`)."""
    root = directory / "ate-state"
    root.mkdir(parents=True)
    kubeconfig = directory / "kubeconfig.json"
    kubeconfig.write_text(json.dumps(kubeconfig_document({"kind-test": TEST, "kind-other": OTHER}, "kind-test")))
    wrapper = directory / "bin" / "kubectl"
    wrapper.parent.mkdir()
    # The fake is imported rather than run as a script, so Python reuses its compiled bytecode instead of
    # compiling it on every call (that alone took longer than the rest of a call).
    wrapper.write_text(
        f"#!{python} -S\nimport sys\nsys.dont_write_bytecode = False\n"
        f"sys.pycache_prefix = {str(directory / 'pycache')!r}\nsys.path.insert(0, {str(FAKE.parent)!r})\n"
        "import fake_kubectl\nsys.exit(fake_kubectl.main(sys.argv[1:]))\n"
    )
    wrapper.chmod(0o755)
    return FakeAte(root, str(wrapper), kubeconfig)


def wire(props: dict[str, Any]) -> dict[str, Any]:
    """Props as Pulumi's engine hands them to a dynamic provider: numbers as floats (they travel as protobuf
    ``Value``s), the pickled provider alongside under ``__provider``."""
    return {**engine_value(props), "__provider": "serialized"}


class Engine:
    """The dynamic-provider host's side of `pulumi up`, `preview`, `refresh` and `destroy` for one shard."""

    def __init__(self, provider: EgressShardProvider) -> None:
        self.provider = provider
        self.inputs: dict[str, Any] | None = None
        self.outputs: dict[str, Any] | None = None
        self.id = ""

    def up(self, declared: ShardInputs) -> egress.DiffDecision | None:
        checked = self.provider.check(self.inputs or {}, wire(declared.to_props()))
        assert checked.failures == [], [f.reason for f in checked.failures]
        news = checked.inputs
        if self.outputs is None:
            created = self.provider.create(news)
            self.id, self.inputs, self.outputs = created.id, news, wire(created.outs)
            return None
        result = self.provider.diff(self.id, self.outputs, news)
        decision = egress.shard_diff(self.outputs, news)  # the same decision, with reasons and actors
        assert (result.changes, result.replaces, result.delete_before_replace) == (
            decision.changes,
            decision.replaces,
            decision.delete_before_replace,
        )
        if result.replaces and result.delete_before_replace:
            self.provider.delete(self.id, self.outputs)
            created = self.provider.create(news)
            self.id, self.outputs = created.id, wire(created.outs)
        elif result.changes:
            self.outputs = wire(self.provider.update(self.id, self.outputs, news).outs)
        self.inputs = news
        return decision

    def preview(self, declared: ShardInputs) -> bool:
        """Check and diff only: whether an `up` would change the shard."""
        news = self.provider.check(self.inputs or {}, wire(declared.to_props())).inputs
        return self.outputs is None or bool(self.provider.diff(self.id, self.outputs, news).changes)

    def refresh(self) -> None:
        self.outputs = wire(self.provider.read(self.id, self.outputs).outs)

    def destroy(self) -> None:
        self.provider.delete(self.id, self.outputs)
        self.outputs = None


def environ(fake: FakeAte) -> dict[str, str]:
    """The environment a user's shell would have: the fake's state and an ambient kubeconfig."""
    return {"FAKE_ATE_STATE": str(fake.root), "KUBECONFIG": str(fake.kubeconfig), "HOME": os.environ.get("HOME", "")}
