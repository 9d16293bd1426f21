"""What every settings section shares: the base model (camelCase keys, unknown keys refused), names and
quantities as Kubernetes takes them, numbers as people write them, actor ids, and the gateway's fixed names."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from core import egress
from core.config_text import lone_surrogate_problem
from core.identity import ActorIdError, parse_actor_id
from core.image_reference import image_reference_problem
from core.names import DNS_LABEL as DNS_LABEL  # re-exported: the settings modules take the grammars from here
from core.names import DNS_SUBDOMAIN as DNS_SUBDOMAIN
from core.names import is_dns_label

RATE_LIMIT_UNITS = ("Second", "Minute", "Hour", "Day", "Week", "Month", "Year")
# The fixed Service the EnvoyProxy gives the data plane: every egress policy names this host.
GATEWAY_SERVICE_NAME = "agent-router"
ENVOY_GATEWAY_NAMESPACE = "envoy-gateway-system"
# The controller name Envoy Gateway registers for GatewayClasses (its Helm values and our GatewayClass).
GATEWAY_CONTROLLER_NAME = "gateway.envoyproxy.io/gatewayclass-controller"
GATEWAY_HOSTNAME = egress.GATEWAY_HOSTNAME
if f"{GATEWAY_SERVICE_NAME}.{ENVOY_GATEWAY_NAMESPACE}.svc.cluster.local" != GATEWAY_HOSTNAME:  # pragma: no cover
    raise ImportError("the gateway's fixed Service name and the egress hostname disagree")

# Every pattern ends in \Z: Python's `$` also matches before a final newline, and `\d` matches any Unicode digit.
RELEASE_VERSION = re.compile(r"^v([0-9]+)\.([0-9]+)\.([0-9]+)\Z")
DURATION = re.compile(r"^([0-9]{1,5}(h|m|s|ms)){1,4}\Z")
# A Kubernetes quantity without sign or exponent: a subset of apimachinery's grammar (pkg/api/resource/quantity.go).
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?\Z")
CONFIG_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*\Z")
_QUANTITY_FACTORS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY_FACTORS |= {f"{prefix}i": 1024 ** (index + 1) for index, prefix in enumerate("KMGTPE")}
# A count written the way people write numbers in prose: 5,000 / 5_000 / 5 000 / 5k / 2.5M.
_PROSE_NUMBER = re.compile(r"^\s*([0-9]{1,3}(?:[,_ ][0-9]{3})+|[0-9]+(?:\.[0-9]+)?)\s*([kKmMgG]?)\s*$")
_PROSE_MULTIPLIERS = {"": 1, "k": 1_000, "m": 1_000_000, "g": 1_000_000_000}


def check_dns_label(value: str, what: str) -> str:
    if not is_dns_label(value):
        raise ValueError(
            f"{what} {value!r} is not a DNS label: use 1-63 lowercase letters, digits or '-', "
            "starting and ending with a letter or digit"
        )
    return value


def check_command_argument(value: str, what: str, example: str) -> str:
    """Refuse an empty value, or a control character, in what becomes a kubectl command-line argument or path (the
    kube context, the kubectl binary): no command line can carry a NUL, and a newline or escape there is a paste
    gone wrong."""
    if not value.strip():
        raise ValueError(f"{what} is empty: name it, e.g. {example}")
    for position, ch in enumerate(value, start=1):
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            raise ValueError(
                f"{what} {value[:80]!r} holds the control character U+{ord(ch):04X} at character {position}: "
                "kubectl gets it on its command line, which cannot carry it. Remove it"
            )
    return value


def quantity_value(text: str) -> Decimal:
    """The number a `QUANTITY` stands for (`50Mi` → 52428800), exact."""
    match = re.match(r"^([0-9.]+)(.*)\Z", text)
    if match is None or not QUANTITY.match(text):
        raise ValueError(f"not a quantity: {text!r}")
    return Decimal(match.group(1)) * _QUANTITY_FACTORS[match.group(2)]


def check_image_reference(value: str, what: str, example: str) -> str:
    """Refuse an image reference the kubelet cannot parse (core.image_reference): the API server would take it, and
    the pod would wait in InvalidImageName."""
    problem = image_reference_problem(value)
    if problem:
        raise ValueError(
            f"{what} {value[:300]!r} {problem}. The kubelet could not pull it and the pod would never start: write "
            f"[registry[:port]/]name[:tag][@sha256:<digest>], e.g. {example}"
        )
    return value


def whole_number_from_text(text: str) -> int | None:
    """The whole number a human meant by `text` (`"5,000"`, `"5k"`, `"2.5M"`, `"500"`), or None."""
    match = _PROSE_NUMBER.match(text)
    if not match:
        return None
    digits = re.sub(r"[,_ ]", "", match.group(1))
    value = float(digits) * _PROSE_MULTIPLIERS[match.group(2).lower()]
    return int(value) if value.is_integer() else None


def number_text_hint(text: str, example_key: str) -> str:
    """How to write a number that arrived as text, e.g. `"5,000"` → `write 5000 (no separators or units)`."""
    meant = whole_number_from_text(text)
    if meant is None:
        return f"it is not a number: write a whole number, e.g. {example_key}: 500"
    if text.strip() == str(meant):
        return f"write it without quotes, e.g. {example_key}: {meant}"
    return f"write the number without separators or units, e.g. {example_key}: {meant}"


def check_actor_id(actor: str) -> str:
    """Refuse anything that names no actor of any identity source (core.identity: `<atespace>/<name>`,
    `serviceaccount:<namespace>/<name>` or `apikey:<name>`)."""
    surrogate = lone_surrogate_problem(actor)
    if surrogate:  # said once, by this field, in the words of the text check (core.config_text)
        raise ValueError(surrogate)
    try:
        parse_actor_id(actor)
    except ActorIdError as error:
        raise ValueError(str(error)) from None
    return actor


# A JWT audience: Substrate's egress policies accept 1 to 512 characters (core/egress), EG checks none.
Audience = Annotated[str, Field(min_length=1, max_length=512)]

# An actor of any identity source; checked item by item, so an error names its index. Whether its source is
# enabled for the stack is a cross-key check (core.cross_checks).
ActorId = Annotated[str, AfterValidator(check_actor_id)]


class ConfigModel(BaseModel):
    """Base for every section: camelCase keys as in Pulumi.<stack>.yaml, unknown keys refused.

    Python code builds models by field name; configuration is validated by alias only
    (`model_validate(..., by_name=False)` in core.validation), so a snake_case key in a stack file is
    refused with the camelCase spelling instead of being silently accepted.
    """

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        frozen=True,
        str_strip_whitespace=False,
    )


def version_tuple(version: str) -> tuple[int, int, int]:
    """`v1.9.3` → (1, 9, 3)."""
    match = RELEASE_VERSION.match(version)
    if not match:
        raise ValueError(f"not a version: {version!r}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3))
