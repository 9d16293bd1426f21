"""What a model name may hold: `routes[].models`, `routes[].modelNameOverride` and the keys of `prices`.

Agent Router routes a call by the model name the agent sends: each route's names become header matches on
`x-ai-eg-model`, which its controller copies verbatim into an HTTPRoute (envoyproxy/ai-gateway v1.1.0
internal/controller/ai_gateway_route.go, `Headers: rule.Matches[j].Headers`). The Gateway API CRDs that Envoy
Gateway v1.9.0 installs are the v1.6.1 experimental channel (charts/gateway-helm/charts/crds/crds/
gatewayapi-crds.yaml), whose HTTPHeaderMatch `value` must match `^[!-~]+([\\t ]?[!-~]+)*$`: printable US-ASCII,
words separated by single spaces or tabs, at most 4096 characters. The API server refuses any other HTTPRoute, so
a route with such a name never serves a call. Control characters could not be matched anyway: Envoy refuses them
in a header value (RFC 9110 field-value; the ext_proc that sets `x-ai-eg-model` has its mutation refused), and the
invisible ones (bidirectional overrides, zero-width spaces) would make a name read differently in review from
what it matches.

`modelNameOverride` and the keys of `prices` name the same models (a price is looked up by the name a call is
billed by), so they follow the same rule: a price for a name no route can hold would never apply.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

from core import money

HEADER_MATCH_VALUE = re.compile(r"^[!-~]+([\t ]?[!-~]+)*\Z")
"""Gateway API v1.6.1 experimental HTTPHeaderMatch `value` (Go's `$` is the end of the text: `\\Z` here)."""
MAX_MODEL_NAME = 4096
"""HTTPHeaderMatch `value` maxLength."""


def _character(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X}{f' ({name})' if name else ''}"


def header_match_problem(name: str) -> str | None:
    """Why `name` cannot be an HTTPRoute header match value, or None when it can."""
    if not name:
        return "is empty"
    if len(name) > MAX_MODEL_NAME:
        return f"has {len(name):,} characters; a header match holds at most {MAX_MODEL_NAME:,}"
    if HEADER_MATCH_VALUE.match(name):
        return None
    for position, ch in enumerate(name, start=1):
        if not "!" <= ch <= "~" and ch not in "\t ":
            kind = "a control character" if unicodedata.category(ch) == "Cc" else "not printable US-ASCII"
            if unicodedata.category(ch) == "Cf":
                kind = "an invisible formatting character"
            return f"holds {_character(ch)} at character {position}, {kind}"
    if name != name.strip(" \t"):
        return "starts or ends with a space or tab"
    found = re.search(r"[\t ]{2}", name)
    position = found.start() + 1 if found else 0
    return f"holds two spaces or tabs in a row at character {position}"


_WHY = {
    "models": (
        "Agent Router matches the names agents send in an HTTPRoute header, and the Gateway API CRDs Envoy Gateway "
        "installs accept only printable US-ASCII there, words separated by single spaces or tabs, so no call could "
        "reach this route"
    ),
    "modelNameOverride": (
        "a model name is printable US-ASCII, words separated by single spaces or tabs (what a route can match), and "
        "no provider names a model otherwise"
    ),
    "prices": (
        "no route can serve or bill a model of this name (a route matches printable US-ASCII only, words separated "
        "by single spaces or tabs), so this price could never apply"
    ),
}


def model_name_problem(name: str, field: Literal["models", "modelNameOverride", "prices"]) -> str | None:
    """Why `name` cannot stand in `field` (the names a route serves, its override, a price's key), with the reason;
    None when it can.

    A lone surrogate keeps the reason issue 19 gives (Agent Router's CEL parser refuses the cost expression),
    so each bad name is one line of the report.
    """
    surrogate = money.cel_string_problem(name)
    if surrogate:
        return surrogate
    problem = header_match_problem(name)
    return None if problem is None else f"{problem}: {_WHY[field]}"
