"""Model-provider hosts: actors reach models only through the gateway, so no egress rule may name (or
cover with a wildcard) a provider's API host."""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

from core.egress.document import GATEWAY_HOSTNAME
from core.egress.problems import Problem

WELL_KNOWN_PROVIDER_HOSTS: tuple[str, ...] = (
    # Hosted LLM APIs an actor must never reach directly. Patterns: ``*`` as a whole left-most
    # label covers one or more labels; ``*`` elsewhere, or inside a label, covers one label only.
    "api.openai.com",
    "api.anthropic.com",
    "generativelanguage.googleapis.com",
    "aiplatform.googleapis.com",
    "*-aiplatform.googleapis.com",
    "*.openai.azure.com",
    "*.services.ai.azure.com",
    "*.models.ai.azure.com",
    "models.inference.ai.azure.com",
    "bedrock-runtime.*.amazonaws.com",
    "bedrock-runtime-fips.*.amazonaws.com",
    "bedrock-agent-runtime.*.amazonaws.com",
    "api.mistral.ai",
    "api.cohere.com",
    "api.cohere.ai",
    "api.groq.com",
    "api.together.xyz",
    "api.together.ai",
    "openrouter.ai",
    "api.deepseek.com",
    "api.x.ai",
    "api.perplexity.ai",
    "api.fireworks.ai",
    "api.deepinfra.com",
    "api.cerebras.ai",
    "api.ai21.com",
    "api-inference.huggingface.co",
    "router.huggingface.co",
    "api.replicate.com",
    "dashscope.aliyuncs.com",
    "dashscope-intl.aliyuncs.com",
    "api.moonshot.ai",
    "api.moonshot.cn",
    "open.bigmodel.cn",
    "api.router.tetrate.ai",
)


def provider_host_of(value: str) -> str:
    """A configured provider endpoint as a lowercase host: scheme, path and port are dropped."""
    host = value.strip().lower()
    if "://" in host:
        host = host.split("://", 1)[1]
    host = host.split("/", 1)[0]
    if host.startswith("["):  # IPv6 literal
        return host.split("]", 1)[0].lstrip("[")
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def _labels_meet(a: str, b: str) -> bool:
    """Can one label match both label patterns? ``*`` or a glob inside a label covers one label."""
    if a == b or a == "*" or b == "*":
        return True
    a_glob, b_glob = "*" in a, "*" in b
    if a_glob and b_glob:
        return True  # both are partial globs: assume they may meet
    if a_glob:
        return fnmatchcase(b, a)
    if b_glob:
        return fnmatchcase(a, b)
    return False


def patterns_overlap(a: str, b: str) -> bool:
    """True if some hostname matches both patterns.

    A ``*`` that is the whole left-most label covers one or more labels (``*.example.com`` matches
    ``a.example.com`` and ``a.b.example.com``, not ``example.com``); ``*`` alone matches any name;
    a ``*`` in any other label position, or inside a label, covers exactly one label or part of one.
    """
    ra, rb = a.lower().split(".")[::-1], b.lower().split(".")[::-1]
    for i in range(min(len(ra), len(rb))):
        if (ra[i] == "*" and i == len(ra) - 1) or (rb[i] == "*" and i == len(rb) - 1):
            return True  # a left-most wildcard absorbs the (non-empty) rest of the other name
        if not _labels_meet(ra[i], rb[i]):
            return False
    return len(ra) == len(rb)  # otherwise one name has labels the other cannot match


def provider_host_problems(hostnames: Iterable[tuple[str, str]], provider_hosts: Iterable[str]) -> list[Problem]:
    """Each ``(field, hostname)`` an actor may reach that is, or whose wildcard covers, a model
    provider host (the configured ones plus :data:`WELL_KNOWN_PROVIDER_HOSTS`)."""
    providers: list[str] = []
    for host in [*provider_hosts, *WELL_KNOWN_PROVIDER_HOSTS]:
        normal = provider_host_of(host)
        if normal and normal not in providers:
            providers.append(normal)
    problems: list[Problem] = []
    for field_name, host in hostnames:
        if not isinstance(host, str) or not host:
            continue
        clashes = [p for p in providers if patterns_overlap(host, p)]
        if clashes:
            shown = ", ".join(repr(c) for c in clashes[:3]) + (" ..." if len(clashes) > 3 else "")
            extra = field_name == "extra_hostnames"
            what, where = ("extra hostname", "the extra hostnames") if extra else ("gateway hostname", "the config")
            problems.append(
                Problem(
                    field_name,
                    f"{what} {host!r} reaches model provider host {shown}: actors get no rule toward any "
                    f"model provider and call models only through {GATEWAY_HOSTNAME}; "
                    f"remove {host!r} from {where}",
                )
            )
    return problems
