"""What ``kubectl ate``'s output means: the failure class of a run, read from the text it printed.

Shared by the egress-policy provider (``components/egress_provider.py``) and the orphan command
(``tools/egress_orphans.py``), so both read a missing policy, a missing actor and an unreachable API server the
same way. The wordings are kubectl-ate's (agent-substrate/substrate ``cmd/kubectl-ate/internal/cmd/egress_policy.go``
@18d1c266: "has no egress policy", ``actor "<name>" in atespace "<atespace>" not found``, every verb's "failed to
connect to ate-api-server: ..."), cobra's ("unknown flag", ``unknown command "ate" for "kubectl"``) and gRPC's
("rpc error: code = <Code> desc = ..."). Pure: text in, a class out.
"""

from __future__ import annotations

import re

ALREADY_EXISTS = "AlreadyExists"
NOT_FOUND = "NotFound"
ACTOR_NOT_FOUND = "ActorNotFound"
FAILED_PRECONDITION = "FailedPrecondition"
ABORTED = "Aborted"
UNKNOWN_FIELD = "UnknownField"
UNKNOWN_FLAG = "UnknownFlag"
INVALID_ARGUMENT = "InvalidArgument"
PLUGIN_MISSING = "PluginMissing"
KUBECONFIG = "Kubeconfig"
UNAVAILABLE = "Unavailable"
PERMISSION_DENIED = "PermissionDenied"
API_SERVER_UNREACHABLE = "ApiServerUnreachable"
UNKNOWN = "Unknown"

RETRYABLE = frozenset({UNAVAILABLE, API_SERVER_UNREACHABLE})

# gRPC code names as kubectl-ate prints them ("rpc error: code = AlreadyExists desc = ..."),
# matched case-insensitively and with or without underscores (ALREADY_EXISTS).
_GRPC_CODES = {
    "alreadyexists": ALREADY_EXISTS,
    "notfound": NOT_FOUND,
    "failedprecondition": FAILED_PRECONDITION,
    "aborted": ABORTED,
    "invalidargument": INVALID_ARGUMENT,
    "unavailable": UNAVAILABLE,
    "deadlineexceeded": UNAVAILABLE,
    "permissiondenied": PERMISSION_DENIED,
    "unauthenticated": PERMISSION_DENIED,
}
_CODE_RE = re.compile(r"code\s*=\s*([A-Za-z_]+)", re.IGNORECASE)
# Checked in order, before the gRPC code: the more specific wording wins.
_TEXT_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (PLUGIN_MISSING, re.compile(r'unknown command "?ate"?|kubectl-ate: (command )?not found', re.IGNORECASE)),
    (UNKNOWN_FIELD, re.compile(r"unknown field", re.IGNORECASE)),
    (UNKNOWN_FLAG, re.compile(r"unknown (shorthand )?flag", re.IGNORECASE)),
    (
        KUBECONFIG,
        re.compile(
            r"failed to load kubeconfig|context was not found|no configuration has been provided", re.IGNORECASE
        ),
    ),
    # Every verb wraps a failure to build its client this way (cmd/kubectl-ate/internal/cmd/*.go), before any
    # RPC: the Kubernetes lookups of internal/ateclient/builder.go (Service api, its pods, the port-forward, the
    # ate-api-server Deployment, the ate-client token). Their "... not found" is about Substrate's install on
    # this cluster, never about a policy: it must not read as NotFound.
    (API_SERVER_UNREACHABLE, re.compile(r"failed to connect to ate-api-server", re.IGNORECASE)),
    (FAILED_PRECONDITION, re.compile(r"failed[\s_]*precondition|parent actor does not exist", re.IGNORECASE)),
    (ACTOR_NOT_FOUND, re.compile(r'actor "[^"]*" in atespace "[^"]*" not found', re.IGNORECASE)),
    (NOT_FOUND, re.compile(r"has no egress policy", re.IGNORECASE)),
)
# Used only when the output carries no gRPC code. NotFound is deliberately not among them: it is taken only
# from "code = NotFound" or the two wordings above, so no other "not found" can make a read report a policy
# absent or a delete report it gone.
_FALLBACK_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (ALREADY_EXISTS, re.compile(r"already[\s_]*exists", re.IGNORECASE)),
    (ABORTED, re.compile(r"\baborted\b", re.IGNORECASE)),
    (INVALID_ARGUMENT, re.compile(r"invalid[\s_]*argument", re.IGNORECASE)),
    (UNAVAILABLE, re.compile(r"unavailable|deadline[\s_]*exceeded|failed to connect", re.IGNORECASE)),
    (PERMISSION_DENIED, re.compile(r"permission[\s_]*denied|unauthenticated|forbidden", re.IGNORECASE)),
)

# cobra's wording: "unknown flag: --context", "unknown shorthand flag: 'o' in -o".
_UNKNOWN_FLAG_RE = re.compile(r"unknown (?:shorthand )?flag:\s*(?:'[^']*' in )?(-{1,2}[A-Za-z0-9][-A-Za-z0-9]*)")


def unknown_flag_of(output: str) -> str:
    """The flag a cobra CLI rejected as unknown (``--context``, ``-o``), or ``""``."""
    match = _UNKNOWN_FLAG_RE.search(output)
    return match.group(1) if match else ""


def classify_failure(output: str) -> str:
    """The failure class of a ``kubectl ate`` run from its stderr (and stdout) text."""
    for kind, pattern in _TEXT_PATTERNS:
        if pattern.search(output):
            return kind
    match = _CODE_RE.search(output)
    if match:
        return _GRPC_CODES.get(match.group(1).replace("_", "").lower(), UNKNOWN)
    for kind, pattern in _FALLBACK_PATTERNS:
        if pattern.search(output):
            return kind
    return UNKNOWN
