"""How large a stack's configuration may be for the Python program to start at all.

Pulumi's Python language host hands the program the whole stack configuration in one environment variable,
`PULUMI_CONFIG`, a JSON object of every key with its value as JSON text (pulumi/pulumi
sdk/python/cmd/pulumi-language-python/main.go, `env = append(env, pulumiConfigVar+"="+config)`, read at 1b5949891b;
the policy pack's analyzer gets it the same way, sdk/go/common/resource/plugin/analyzer_plugin.go). Linux's
`execve` refuses any one argument or environment string longer than `MAX_ARG_STRLEN`, 32 pages of 4 KiB
(include/uapi/linux/binfmts.h), with E2BIG: the engine then fails before the program runs, with `fork/exec
.../python: argument list too long`, and the program cannot report it. Seen on the rig: a dev stack with 10,000
service-account actors (about 460 KB of configuration) failed so; at 2,000 (about 95 KB) it ran.

So the program warns while it still can: when the variable it was started with is past a share of the limit.
"""

from __future__ import annotations

CONFIG_ENV_VAR = "PULUMI_CONFIG"
MAX_ARG_STRLEN = 32 * 4096
"""The longest environment string `execve` takes, its terminating NUL included (Linux binfmts.h)."""
WARN_SHARE = 0.75


def config_env_bytes(value: str) -> int:
    """The size `execve` counts for `PULUMI_CONFIG=<value>`: name, `=`, the UTF-8 value and the NUL."""
    return len(CONFIG_ENV_VAR) + 1 + len(value.encode()) + 1


def config_size_warning(size: int, limit: int = MAX_ARG_STRLEN, share: float = WARN_SHARE) -> str | None:
    """A warning once the configuration's environment string is past `share` of `limit`, else None."""
    if size <= limit * share:
        return None
    return (
        f"agent-budgets: the stack configuration is {size:,} bytes as the engine hands it to the program "
        f"({CONFIG_ENV_VAR}), {size / limit:.0%} of the {limit:,} Linux lets one environment string hold: past it, "
        "`pulumi preview` and `up` fail before the program starts (`argument list too long`). Most of it is "
        "agent-budgets:actors; a larger actor list belongs in a Python program that builds AgentBudgets from a file "
        "(docs/use-from-your-program.md)."
    )
