"""The engine leaves the stack files as they are: `pulumi stack init` (the real CLI of rig/versions.toml) writes
each file back through its own YAML encoder, and with the files written as that encoder writes them, the only line
it adds is `encryptionsalt` (docs/dev-environment.md says so).

It once rewrote Pulumi.prod.yaml's prices (`2.00` became `2`, `0.50` `0.5`) and quoted Pulumi.rig.yaml's actor
names in flow lists (`serviceaccount:agents/bot-b` became `'serviceaccount:agents/bot-b'`): a developer's first
`stack init` left a diff in files under review.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.real_tools import real_tool
from tools.spend.stack import stack_names

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("stack", stack_names(ROOT))
def test_stack_init_adds_only_the_encryption_salt(stack: str, tmp_path: Path):
    pulumi = real_tool("pulumi")
    project = tmp_path / "project"
    project.mkdir()
    for name in ("Pulumi.yaml", f"Pulumi.{stack}.yaml"):
        shutil.copy2(ROOT / name, project / name)
    env = {
        **os.environ,
        "PULUMI_HOME": str(tmp_path / "home"),
        "PULUMI_BACKEND_URL": f"file://{tmp_path / 'state'}",
        "PULUMI_CONFIG_PASSPHRASE": "stack-file-test",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
    }
    (tmp_path / "state").mkdir()
    result = subprocess.run(
        [str(pulumi), "stack", "init", stack, "--non-interactive"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    before = (ROOT / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8").splitlines()
    after = (project / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8").splitlines()
    added = [line for line in after if line not in before]
    removed = [line for line in before if line not in after]
    assert removed == []
    assert len(added) == 1 and added[0].startswith("encryptionsalt: v1:"), added
