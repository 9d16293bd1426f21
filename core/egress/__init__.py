"""Substrate egress policies as plain data: build, validate, normalise and diff.

An actor's egress policy is a Substrate ateapi object (not a Kubernetes object), one per actor,
addressed by ``<atespace>/<actor>`` and always named ``default``. This package holds only pure
functions over dicts and lists, with no Pulumi import, so that the dynamic provider, the
component and the tests share one definition of each concern, one module each:

* ``document``: the policy document sent to ``kubectl ate`` (protojson field names, lowerCamel);
* ``constraints``: the client-side checks of Substrate's documented constraints, each message naming
  the bad value and the fix (``problems``: what they report);
* ``providers``: the model-provider host check (actors reach models only through the gateway);
* ``normalize``: the normalised form of rules used for diffs (lowercase hostnames, ports after defaults,
  sorted audiences, ``expirationSeconds`` as an integer whatever the CLI printed) and its fingerprint;
* ``shards``: which of the 64 stable shards an actor belongs to, a shard's inputs and checks, and the
  settings every actor's policy shares;
* ``diff``: a shard's diff, and the plan of calls an update makes (create, write, keep or delete, per actor);
* ``cluster``: which cluster the policies live on (kube context and kubeconfig identity);
* ``cli_output``: what ``kubectl ate``'s output means (the failure class of a run);
* ``orphans``: the policies a stack does not own (which actors to read, the actor listing, the report).

``core.egress`` re-exports every public name, so callers import from here. The dynamic provider
(``components/egress_provider.py``, pickled into stack state by its own module path) calls these
functions as ``egress.<name>``: keep each name importable here.
"""

from __future__ import annotations

from core.egress.cli_output import (
    ABORTED,
    ACTOR_NOT_FOUND,
    ALREADY_EXISTS,
    API_SERVER_UNREACHABLE,
    FAILED_PRECONDITION,
    INVALID_ARGUMENT,
    KUBECONFIG,
    NOT_FOUND,
    PERMISSION_DENIED,
    PLUGIN_MISSING,
    RETRYABLE,
    UNAVAILABLE,
    UNKNOWN,
    UNKNOWN_FIELD,
    UNKNOWN_FLAG,
    classify_failure,
    unknown_flag_of,
)
from core.egress.cluster import (
    cluster_identity,
    target_change,
    unresolved_path,
)
from core.egress.constraints import (
    ACTOR_REF,
    MAX_AUDIENCE_LENGTH,
    MAX_AUDIENCES,
    MAX_EXPIRATION_SECONDS,
    MAX_HOSTNAME_LENGTH,
    MAX_HOSTNAMES_PER_RULE,
    MAX_LABEL_LENGTH,
    MAX_PORTS,
    MAX_REPLACE_HEADERS,
    MAX_RULES,
    MIN_AUDIENCES,
    MIN_EXPIRATION_SECONDS,
    actor_ref_problems,
    credential_uri_problem,
    hostname_problem,
    input_problems,
    parse_actor_ref,
    policy_problems,
    require_valid,
)
from core.egress.diff import (
    DiffDecision,
    ShardPlan,
    live_fingerprints,
    plan_shard,
    recorded_policies,
    shard_diff,
    shard_outputs,
)
from core.egress.document import (
    AUTH_HEADER,
    AUTH_PREFIX,
    DEFAULT_AUDIENCES,
    DEFAULT_EXPIRATION_SECONDS,
    DEFAULT_GATEWAY_PORT,
    DEFAULT_KUBECTL,
    DEFAULT_TIMEOUT_SECONDS,
    EXTRA_HOSTNAME_PORT,
    GATEWAY_HOSTNAME,
    POLICY_NAME,
    RULE_KINDS,
    PolicyInputs,
    as_int,
    build_policy,
    build_rules,
)
from core.egress.normalize import (
    desired_rules,
    normalize_rules,
    rules_fingerprint,
)
from core.egress.orphans import (
    Orphan,
    OutputError,
    atespaces_of,
    parse_actor_list,
    render_report,
    unowned,
)
from core.egress.problems import (
    EgressConfigError,
    Problem,
)
from core.egress.providers import (
    WELL_KNOWN_PROVIDER_HOSTS,
    patterns_overlap,
    provider_host_of,
    provider_host_problems,
)
from core.egress.shards import (
    ABSENT,
    DEFAULT_CONCURRENCY,
    MAX_CONCURRENCY,
    SHARD_COUNT,
    SHARD_SETTING_KEYS,
    SHARD_TARGET_KEYS,
    EgressPolicySettings,
    Recorded,
    ShardInputs,
    policy_resource_name,
    settings_problems,
    shard_of,
    shard_problems,
    shard_resource_name,
)
from core.kubeconfig import is_contents as kubeconfig_is_contents

__all__ = [
    "ABORTED",
    "ABSENT",
    "ACTOR_NOT_FOUND",
    "ACTOR_REF",
    "ALREADY_EXISTS",
    "API_SERVER_UNREACHABLE",
    "AUTH_HEADER",
    "AUTH_PREFIX",
    "DEFAULT_AUDIENCES",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_EXPIRATION_SECONDS",
    "DEFAULT_GATEWAY_PORT",
    "DEFAULT_KUBECTL",
    "DEFAULT_TIMEOUT_SECONDS",
    "EXTRA_HOSTNAME_PORT",
    "FAILED_PRECONDITION",
    "GATEWAY_HOSTNAME",
    "INVALID_ARGUMENT",
    "KUBECONFIG",
    "MAX_AUDIENCES",
    "MAX_AUDIENCE_LENGTH",
    "MAX_CONCURRENCY",
    "MAX_EXPIRATION_SECONDS",
    "MAX_HOSTNAMES_PER_RULE",
    "MAX_HOSTNAME_LENGTH",
    "MAX_LABEL_LENGTH",
    "MAX_PORTS",
    "MAX_REPLACE_HEADERS",
    "MAX_RULES",
    "MIN_AUDIENCES",
    "MIN_EXPIRATION_SECONDS",
    "NOT_FOUND",
    "PERMISSION_DENIED",
    "PLUGIN_MISSING",
    "POLICY_NAME",
    "RETRYABLE",
    "RULE_KINDS",
    "SHARD_COUNT",
    "SHARD_SETTING_KEYS",
    "SHARD_TARGET_KEYS",
    "UNAVAILABLE",
    "UNKNOWN",
    "UNKNOWN_FIELD",
    "UNKNOWN_FLAG",
    "WELL_KNOWN_PROVIDER_HOSTS",
    "DiffDecision",
    "EgressConfigError",
    "EgressPolicySettings",
    "Orphan",
    "OutputError",
    "PolicyInputs",
    "Problem",
    "Recorded",
    "ShardInputs",
    "ShardPlan",
    "actor_ref_problems",
    "as_int",
    "atespaces_of",
    "build_policy",
    "build_rules",
    "classify_failure",
    "cluster_identity",
    "credential_uri_problem",
    "desired_rules",
    "hostname_problem",
    "input_problems",
    "kubeconfig_is_contents",
    "live_fingerprints",
    "normalize_rules",
    "parse_actor_list",
    "parse_actor_ref",
    "patterns_overlap",
    "plan_shard",
    "policy_problems",
    "policy_resource_name",
    "provider_host_of",
    "provider_host_problems",
    "recorded_policies",
    "render_report",
    "require_valid",
    "rules_fingerprint",
    "settings_problems",
    "shard_diff",
    "shard_of",
    "shard_outputs",
    "shard_problems",
    "shard_resource_name",
    "target_change",
    "unknown_flag_of",
    "unowned",
    "unresolved_path",
]
