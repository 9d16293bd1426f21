"""The real Pulumi engine on the rig: the CLI and the Kubernetes provider from rig/versions.toml, the Python language
host and the random provider from the pieces given by path (rig/by_hand.py), a local file backend and a Pulumi home
in the run directory, automatic plugin acquisition off.

The engine runs the program from a copy of the project (its tracked files, the project's virtualenv linked in), so a
`pulumi stack init` or a `config set` never touches the repository's stack files; the rig's overlay (the rig's
kubeconfig, the charts by path, the images from the rig's registry) is written into the copy's stack file.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from core.settings import StackSettings
from core.validation import parse_settings
from rig import cache
from rig.by_hand import ByHand
from rig.processes import StepError
from rig.versions import GoPiece, load
from tools.spend.stack import load_stack

FAKE_ATE_DIRECTORY = "fake-ate"
"""Where rig/egress_check.py puts the fake `kubectl ate` (tests/fake_kubectl.py) and its store, in the engine's
directory."""
SDK_SCRIPTS = {
    "pulumi-language-python-exec": "python/cmd/pulumi-language-python-exec",
    "pulumi-resource-pulumi-python": "python/dist/pulumi-resource-pulumi-python",
}
"""The two scripts the CLI's release archive ships beside `pulumi`, both in the sdk/v3 module zip (pulumi/pulumi
scripts/prep-for-goreleaser.sh): the language host execs the first; the second is the dynamic-provider plugin,
without which the first preview asks the public releases API for `pulumi-python`."""


def sdk_plugin_versions(root: Path) -> dict[str, str]:
    """The plugin versions the program's SDKs ask for: the installed pulumi_kubernetes and pulumi_random packages
    (their `plugin.json`)."""
    versions: dict[str, str] = {}
    for package in ("pulumi_kubernetes", "pulumi_random"):
        found = list((root / "venv" / "lib").glob(f"python3*/site-packages/{package}/pulumi-plugin.json"))
        if found:
            data = json.loads(found[0].read_text(encoding="utf-8"))
            versions[data["name"]] = data["version"].lstrip("v")
    return versions


@dataclass
class Engine:
    """One run's engine: where its binaries, home, backend and project copy are, and how to call it."""

    run: Path
    project_root: Path
    by_hand: ByHand
    log_dir: Path | None = None
    last_output: str = field(default="", init=False, repr=False)
    """The whole output (stdout and stderr) of the newest `pulumi` call: what a step that expects a failure reads."""

    @property
    def passphrase(self) -> str:
        """The run's stack passphrase: made once, kept beside the backend (mode 0600) so `python -m rig engine` can
        open the stacks `make rig` made; a throwaway rig's, never in a log or the report."""
        path = self.directory / "passphrase"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(24), encoding="utf-8")
            path.chmod(0o600)
        return path.read_text(encoding="utf-8").strip()

    @property
    def directory(self) -> Path:
        return self.run / "engine"

    @property
    def bin(self) -> Path:
        return self.directory / "bin"

    @property
    def home(self) -> Path:
        return self.directory / "home"

    @property
    def backend(self) -> Path:
        return self.directory / "state"

    @property
    def project(self) -> Path:
        return self.directory / "project"

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            PATH=f"{self.bin}:{self.project_root / 'venv' / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
            PULUMI_HOME=str(self.home),
            PULUMI_BACKEND_URL=f"file://{self.backend}",
            PULUMI_CONFIG_PASSPHRASE=self.passphrase,
            PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
            PULUMI_SKIP_UPDATE_CHECK="true",
            PULUMI_SKIP_CONFIRMATIONS="true",
            PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK="true",
        )
        env.pop("KUBECONFIG", None)
        # The fake `kubectl ate` of the egress step keeps its store here; the shards' reads and deletes reach it.
        fake_store = self.directory / FAKE_ATE_DIRECTORY / "ate-state"
        if fake_store.is_dir():
            env["FAKE_ATE_STATE"] = str(fake_store)
        return env

    def pulumi(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 1800,
        log_name: str | None = None,
        cwd: Path | None = None,
    ) -> str:
        """Run the CLI in the project copy (or in `cwd`, another program's directory); its whole output goes to
        `<logs>/pulumi-<name>.log` too. A failure raises StepError with the command and the output's tail."""
        argv = [str(self.bin / "pulumi"), *args, "--non-interactive"]
        started = time.monotonic()
        result = subprocess.run(
            argv,
            cwd=cwd or self.project,
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        output = result.stdout + result.stderr
        self.last_output = output
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            name = log_name or "-".join(arg for arg in args[:2] if not arg.startswith("-"))
            with (self.log_dir / f"pulumi-{name}.log").open("a", encoding="utf-8") as log:
                log.write(
                    f"$ pulumi {' '.join(args)}  ({time.monotonic() - started:.1f} s, exit {result.returncode})\n"
                )
                log.write(output + "\n")
        if check and result.returncode != 0:
            tail = "\n".join(output.strip().splitlines()[-25:])
            raise StepError(f"pulumi {' '.join(args)} exited {result.returncode}:\n{tail}")
        return result.stdout

    def up(self, stack: str, log_name: str, cwd: Path | None = None, timeout: float = 3600) -> tuple[str, float]:
        """`pulumi up --yes --skip-preview` of `stack` (in `cwd`, another program's directory): its output and the
        seconds it took."""
        began = time.monotonic()
        output = self.pulumi(
            "up", "--stack", stack, "--yes", "--skip-preview", log_name=log_name, cwd=cwd, timeout=timeout
        )
        return output, round(time.monotonic() - began, 1)

    # --- setting up ---

    def install(self) -> dict[str, Any]:
        """The binaries in one directory, the plugins installed from files; answers what each really is."""
        self.copy_project()
        self.bin.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)
        self.backend.mkdir(parents=True, exist_ok=True)
        cli = cache.tool("pulumi")
        provider = cache.tool("pulumi-resource-kubernetes")
        if cli is None or provider is None:
            raise StepError(
                "the Pulumi CLI or the Kubernetes provider is not built: python -m rig.build pulumi pulumi-kubernetes"
            )
        shutil.copy2(cli, self.bin / "pulumi")
        shutil.copy2(self.by_hand.path("pulumi-language-python"), self.bin / "pulumi-language-python")
        # The YAML language host, for the component package's YAML program (rig/component_package.py).
        yaml_host = cache.tool("pulumi-language-yaml")
        if yaml_host is not None:
            shutil.copy2(yaml_host, self.bin / "pulumi-language-yaml")
        piece = load().pieces["pulumi"]
        assert isinstance(piece, GoPiece)
        sdk = cache.module_cache() / f"github.com/pulumi/pulumi/sdk/v3@{piece.version}"
        for name, relative in SDK_SCRIPTS.items():
            source = sdk / relative
            if not source.is_file():
                raise StepError(
                    f"{source} is missing: `go mod download github.com/pulumi/pulumi/sdk/v3@{piece.version}`"
                )
            shutil.copy2(source, self.bin / name)
            (self.bin / name).chmod(0o755)
        wanted = sdk_plugin_versions(self.project_root)
        plugins = {"kubernetes": provider, "random": self.by_hand.path("pulumi-resource-random")}
        installed = {}
        for name, binary in plugins.items():
            version = wanted.get(name)
            if version is None:
                raise StepError(f"the project's virtualenv has no pulumi_{name}: make venv")
            self.pulumi("plugin", "install", "resource", name, version, "--file", str(binary), log_name="plugins")
            installed[name] = {"installed_as": version, "asked_for_by_the_sdk": version, "binary": str(binary)}
        installed["kubernetes"]["really"] = "4.25.0 (provider/v4 v4.0.0-20260115033456-f47bc2d6f199)"
        installed["random"]["really"] = self.by_hand.describe("pulumi-resource-random")
        version = self.pulumi("version").strip()
        return {
            "cli": version,
            "language_host": self.by_hand.describe("pulumi-language-python"),
            "yaml_language_host": str(yaml_host)
            if yaml_host is not None
            else "not built (python -m rig.build pulumi-yaml)",
            "plugins": installed,
            "plugin_list": self.pulumi("plugin", "ls", "--json", log_name="plugins"),
        }

    def copy_project(self) -> Path:
        """The repository's tracked files (what a clone holds), the project's virtualenv linked in."""
        if self.project.exists():
            shutil.rmtree(self.project)
        self.project.mkdir(parents=True)
        files = subprocess.run(
            ["git", "ls-files", "-z"], cwd=self.project_root, capture_output=True, check=True
        ).stdout.split(b"\0")
        for name in filter(None, (item.decode() for item in files)):
            source = self.project_root / name
            if source.is_file():
                target = self.project / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
        (self.project / "venv").symlink_to(self.project_root / "venv")
        return self.project

    def overlay(self, stack: str, config: Mapping[str, Any]) -> Path:
        """Merge `config` (`agent-budgets:<key>` -> value, each key replaced whole or merged one level down) into the
        copy's stack file."""
        path = self.stack_file(stack)
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        values = document.setdefault("config", {})
        for key, value in config.items():
            if isinstance(value, dict) and isinstance(values.get(key), dict):
                values[key] = {**values[key], **value}
            else:
                values[key] = value
        path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        return path

    def stack_file(self, stack: str) -> Path:
        return self.project / f"Pulumi.{stack}.yaml"

    def stack_config(self, stack: str) -> dict[str, Any]:
        """The project copy's stack file's `config`, as written (the keys with their `agent-budgets:` prefix)."""
        return yaml.safe_load(self.stack_file(stack).read_text(encoding="utf-8"))["config"]

    @contextlib.contextmanager
    def restoring(self, stack: str, log_name: str) -> Iterator[None]:
        """The stack file written back as it is now and applied (`pulumi up`) after the block, passed or failed: a
        check that changes the stack leaves it as it found it."""
        path = self.stack_file(stack)
        original = path.read_text(encoding="utf-8")
        try:
            yield
        finally:
            path.write_text(original, encoding="utf-8")
            self.up(stack, log_name=log_name)

    def stack_settings(self, stack: str) -> StackSettings:
        """The stack's settings as the program validates them (the project copy's stack file over its defaults)."""
        return parse_settings(load_stack(self.project, stack).raw)

    def outputs(self, stack: str, cwd: Path | None = None) -> dict[str, Any]:
        return json.loads(self.pulumi("stack", "output", "--stack", stack, "--json", log_name="outputs", cwd=cwd))


def preview_counts(output: str) -> dict[str, int]:
    """`Resources:` summary of a preview or an update: `+ 45 to create`, `~ 1 to update`, `45 unchanged`."""
    counts: dict[str, int] = {}
    in_summary = False
    for line in output.splitlines():
        stripped = line.strip()
        if stripped.startswith("Resources:"):
            in_summary = True
            continue
        if in_summary:
            if not stripped:
                break
            # `~ 5 updated`, `+-1 replaced`, and an update's last line `6 changes. 34 unchanged`.
            for part in stripped.split(". "):
                words = part.lstrip("+-~<>").split()
                if len(words) >= 2 and words[0].isdigit():
                    counts[" ".join(words[1:])] = int(words[0])
    return counts


def changed_resources(preview_json: str) -> list[tuple[str, str]]:
    """(operation, URN) of every step of `pulumi preview --json` that is not `same`."""
    data = json.loads(preview_json)
    return [(step["op"], step["urn"]) for step in data.get("steps", []) if step.get("op") not in ("same", "read")]


def secrets_seen(texts: Mapping[str, str], values: Sequence[str]) -> dict[str, list[str]]:
    """Which of `values` (each at least 8 characters) appears in which text: the plain-text secret scan of state,
    outputs and logs."""
    found: dict[str, list[str]] = {}
    for name, text in texts.items():
        hits = [value[:4] + "..." for value in values if len(value) >= 8 and value in text]
        if hits:
            found[name] = hits
    return found
