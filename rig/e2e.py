"""The project's end-to-end checks (`tests/e2e`, `make e2e IDENTITY=kubernetes`) on the rig: the same suite as on a
kind cluster, not a copy of it (`python -m rig e2e`, after `make rig`).

The suite and `scripts/up.sh` read the dev environment's names from `scripts/versions.env` and keep the Pulumi state
in `<project>/.state`; in the run's project copy the rig points them at itself: the kube context
`agent-budgets-rig` (the admin kubeconfig in `KUBECONFIG`), `.state` the engine's backend, the probe image the one
the rig built. Then, as `make up IDENTITY=kubernetes` does after `pulumi up`, `up.sh agent-pods` starts a probe agent
per service account and one with an API key, and the suite runs with `AGENT_BUDGETS_E2E_REQUIRE_STACK=1` (no stack
is a failure, never a skip). Each check's verdict and evidence lines go into the run's report.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rig import images
from rig.engine import Engine
from rig.layout import Layout

PROBE_IMAGE = "docker.io/agent-budgets/probe:rig"
VERDICT = re.compile(r"^\[(PASS|FAIL)\] (\d+)\. (.*)$")
EVIDENCE_INDENT = "      "


def point_at_the_rig(engine: Engine, layout: Layout, digest_of: str | None = None) -> dict[str, str]:
    """The copy's versions.env names the rig's context, `.state` is the engine's backend, the probe image is the
    rig's (through its registry, as the program's images are)."""
    # The suite as the repository has it now (the copy was made when the stack was deployed).
    for name in ("tests/e2e", "tests/__init__.py", "tests/support"):
        source = engine.project_root / name
        target = engine.project / name
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.is_file():
            shutil.copy2(source, target)
    versions = engine.project / "scripts" / "versions.env"
    text = versions.read_text(encoding="utf-8")
    text = re.sub(r"^KUBERNETES_KUBE_CONTEXT=.*$", "KUBERNETES_KUBE_CONTEXT=agent-budgets-rig", text, flags=re.M)
    versions.write_text(text, encoding="utf-8")
    state = engine.project / ".state"
    if not state.exists():
        state.symlink_to(engine.backend)
    build = engine.project / "build"
    build.mkdir(exist_ok=True)
    # By digest, as `up.sh probe-image` pins it: a tag the node has pulled before would not be pulled again.
    repository = PROBE_IMAGE.split("/", 1)[1].rsplit(":", 1)[0]
    digest = images.registry_digest(layout.registry_address, PROBE_IMAGE) if digest_of is None else digest_of
    probe = (
        f"{layout.registry_address}/{repository}@{digest}"
        if digest
        else f"{layout.registry_address}/{PROBE_IMAGE.split('/', 1)[1]}"
    )
    (build / "probe-image.ref").write_text(probe + "\n", encoding="utf-8")
    # The suite's own pods (the bench's direct probe) name the probe image by versions.env's repository and tag.
    text = re.sub(
        r"^PROBE_IMAGE_REPO=.*$", f"PROBE_IMAGE_REPO={layout.registry_address}/{repository}", text, flags=re.M
    )
    text = re.sub(r"^PROBE_IMAGE_TAG=.*$", f"PROBE_IMAGE_TAG={PROBE_IMAGE.rsplit(':', 1)[1]}", text, flags=re.M)
    versions.write_text(text, encoding="utf-8")
    return {"kube_context": "agent-budgets-rig", "probe_image": probe, "state": str(engine.backend)}


def environment(engine: Engine, layout: Layout, kubectl: Path) -> dict[str, str]:
    env = engine.environment()
    env.pop("PULUMI_BACKEND_URL", None)  # up.sh and the suite use <project>/.state, linked to the backend
    env.update(
        IDENTITY="kubernetes",
        KUBECONFIG=str(layout.kubeconfig("admin")),
        PATH=f"{kubectl.parent}:{env['PATH']}",
        AGENT_BUDGETS_E2E_REQUIRE_STACK="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def run_logged(argv: list[str], cwd: Path, env: Mapping[str, str], log: Path, timeout: float) -> tuple[int, str]:
    """Run a command with its output appended to `log` as it comes (the suite runs for minutes), and answer it."""
    with log.open("a", encoding="utf-8") as handle:
        handle.write(f"$ {' '.join(argv)}\n")
        handle.flush()
        start = handle.tell()
        result = subprocess.run(
            argv, cwd=cwd, env=dict(env), stdout=handle, stderr=subprocess.STDOUT, timeout=timeout, check=False
        )
    with log.open("r", encoding="utf-8") as handle:
        handle.seek(start)
        output = handle.read()
    with log.open("a", encoding="utf-8") as handle:
        handle.write(f"(exit {result.returncode})\n")
    return result.returncode, output


def verdicts(output: str) -> list[dict[str, Any]]:
    """Every `[PASS] N. title` / `[FAIL] N. title` block the suite printed, with its evidence lines; once each (the
    suite prints each check's block when it ends and all of them again in its closing report)."""
    found: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in output.splitlines():
        match = VERDICT.match(line.strip())
        if match and not line.startswith(" "):
            check = int(match.group(2))
            current = {"check": check, "title": match.group(3), "ok": match.group(1) == "PASS", "evidence": []}
            if all(seen["check"] != check for seen in found):
                found.append(current)
        elif current is not None and line.startswith(EVIDENCE_INDENT[:4]) and line.strip():
            current["evidence"].append(line.strip())
    return found


def run_suite(engine: Engine, layout: Layout, kubectl: Path, log: Path, only: str | None = None) -> dict[str, Any]:
    """Probe agents, then the suite; its verdicts, and the pytest summary line."""
    setup = point_at_the_rig(engine, layout)
    env = environment(engine, layout, kubectl)
    status, output = run_logged(["bash", "scripts/up.sh", "agent-pods"], engine.project, env, log, timeout=900)
    if status != 0:
        return {"setup": setup, "agent_pods": output[-1500:], "verdicts": [], "summary": "agent-pods failed"}
    argv = [
        str(engine.project_root / "venv" / "bin" / "python"),
        "-m",
        "pytest",
        "tests/e2e",
        "-o",
        "norecursedirs=venv .git",
        "-p",
        "no:cacheprovider",
        "-s",
        "-v",
        "-rs",
    ]
    if only:
        argv += ["-k", only]
    status, output = run_logged(argv, engine.project, env, log, timeout=5400)
    summary = next((line for line in reversed(output.splitlines()) if " passed" in line or " failed" in line), "")
    return {"setup": setup, "exit": status, "summary": summary.strip("= "), "verdicts": verdicts(output)}


def run_bench(
    engine: Engine, layout: Layout, kubectl: Path, log: Path, calls: int = 2000, concurrency: list[int] | None = None
) -> dict[str, Any]:
    """`make bench-e2e` on the rig (tests/e2e/bench_latency.py): the latency the full path adds over the same calls
    straight to the mock model, each timed by the probe agent in the cluster, or with `concurrency` the calls per
    second at each level; its report lines."""
    setup = point_at_the_rig(engine, layout)
    env = environment(engine, layout, kubectl)
    status, output = run_logged(["bash", "scripts/up.sh", "agent-pods"], engine.project, env, log, timeout=900)
    if status != 0:
        return {"setup": setup, "exit": status, "report": output.strip().splitlines()[-10:]}
    argv = [
        str(engine.project_root / "venv" / "bin" / "python"),
        "-m",
        "tests.e2e.bench_latency",
        "--calls",
        str(calls),
        *(["--concurrency", *map(str, concurrency)] if concurrency else []),
    ]
    status, output = run_logged(argv, engine.project, env, log, timeout=3600)
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return {"setup": setup, "exit": status, "report": lines[-20:]}
