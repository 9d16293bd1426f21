"""How large a stack configuration the program can be started with (core/config_size.py), against the kernel's
own limit and the configuration the rig's 10,000-actor stack failed with."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

from components.program import warn_on_config_size
from core.config_size import CONFIG_ENV_VAR, MAX_ARG_STRLEN, config_env_bytes, config_size_warning
from rig import scale

# MAX_ARG_STRLEN is 32 pages; the program runs on Linux with 4 KiB pages (the machines, CI, the clusters' nodes).
LINUX_4K = sys.platform == "linux" and os.sysconf("SC_PAGE_SIZE") == 4096
needs_linux_4k = pytest.mark.skipif(
    not LINUX_4K and os.environ.get("CI") != "true", reason="execve's limit is 32 pages of 4 KiB on Linux"
)


def _exec_with(size: int) -> int:
    """Start `true` with PULUMI_CONFIG of `size` bytes as execve counts them; its exit status, or the errno."""
    value = "x" * (size - len(CONFIG_ENV_VAR) - 2)
    try:
        return subprocess.run(["true"], env={CONFIG_ENV_VAR: value}, check=False).returncode
    except OSError as error:
        return error.errno


@needs_linux_4k
def test_the_kernel_refuses_one_byte_past_the_limit_the_model_names():
    assert config_env_bytes("x" * 10) == len("PULUMI_CONFIG=") + 10 + 1
    assert _exec_with(MAX_ARG_STRLEN) == 0
    assert _exec_with(MAX_ARG_STRLEN + 1) == errno.E2BIG


def _engine_config(actors: int) -> str:
    """The configuration as the language host passes it: each key's value as JSON text, in one JSON object."""
    own = ["serviceaccount:agents/actor-a", "serviceaccount:agents/actor-b", "apikey:actor-key"]
    listed, budgets, suspended = scale.layout(own, actors, run="12345")
    return json.dumps(
        {
            "agent-budgets:actors": json.dumps(listed),
            "agent-budgets:budgets": json.dumps(budgets),
            "agent-budgets:suspended": json.dumps(suspended),
        }
    )


@needs_linux_4k
def test_the_rigs_ten_thousand_actors_are_past_the_limit_and_two_thousand_are_not():
    assert config_env_bytes(_engine_config(10_000)) > MAX_ARG_STRLEN
    assert _exec_with(config_env_bytes(_engine_config(10_000))) == errno.E2BIG
    assert config_env_bytes(_engine_config(2_000)) < MAX_ARG_STRLEN


def test_the_program_warns_past_three_quarters_of_the_limit():
    assert config_size_warning(int(MAX_ARG_STRLEN * 0.75)) is None
    warning = config_size_warning(int(MAX_ARG_STRLEN * 0.9))
    assert warning is not None and "90% of the 131,072" in warning and "argument list too long" in warning
    assert warn_on_config_size({CONFIG_ENV_VAR: _engine_config(2_500)}) is not None
    assert warn_on_config_size({CONFIG_ENV_VAR: _engine_config(10)}) is None
    assert warn_on_config_size({}) is None


@needs_linux_4k
@pytest.mark.parametrize("actors", [10, 2_000])
def test_a_configuration_under_the_limit_starts_a_process(actors):
    assert _exec_with(config_env_bytes(_engine_config(actors))) == 0
