"""The duplicate-key guard (`gateway.refuseDuplicateKeys`): a Lua filter that refuses a JSON request body whose
top-level object repeats a key, so that a route's output ceiling holds against every body a provider reads.

Why it is needed (core/ceilings.py has the sources): Agent Router writes the ceiling with sjson into the first
copy of a key, and the pass-through translators forward the rest of the client's bytes, so a body that repeats
`max_completion_tokens`, `max_tokens` or `n` reaches the provider with its own last copy, which most parsers keep.
No Agent Router setting acts on every copy: a `bodyMutation.remove` deletes the first one only.

Why a Lua EnvoyExtensionPolicy does it, each part checked in upstream source:

* Envoy Gateway v1.9.0 renders each Lua entry of an EnvoyExtensionPolicy as an `envoy.filters.http.lua/...`
  filter on the listener, disabled there with the script as its `default_source_code`, and enabled on every
  route the policy reaches by an empty per-route `FilterConfig` (`internal/xds/translator/lua.go`). A policy
  that targets the Gateway reaches every route of it that no route-level EnvoyExtensionPolicy claims: the most
  specific policy wins and nothing is merged (`internal/gatewayapi/envoyextensionpolicy.go`).
* Its filter order puts Lua (13) after the identity filters and before ext_proc, RBAC and the rate-limit filter
  (`internal/xds/translator/httpfilters.go`), and Agent Router's extension server inserts its router-level
  processor before the first filter named lua (ai-gateway v1.1.0 `post_translate_modify.go`
  `insertAIGatewayExtProcFilter`). That processor parses the body but sends Envoy no body change
  (`processor_impl.go` `ProcessRequestBody`), and the upstream processor forwards the bytes it kept, which are
  the bytes this filter reads. A refused call never reaches the router: no provider call, no rate-limit check,
  no charge.
* Lua is off in Envoy Gateway unless `extensionApis.enableLua` is true (`api/v1alpha1/envoygateway_helpers.go`
  `LuaDisabled`); with it off, a Lua policy fails every route it targets with a 500 direct response rather
  than leaving it unguarded (`envoyextensionpolicy.go`: Lua has no fail-open). By default Envoy Gateway runs
  each script once in its controller against mocks of Envoy's stream API (`internal/gatewayapi/luavalidator`,
  `Strict`); this script only reads the body and answers.

What the script refuses: a body that opens an object (after any bytes up to space: JSON allows four of them,
and Agent Router's parser, sonic, no other) that, read as JSON, holds a top-level key twice, or a key with a
backslash (an escape such as `\\u006e` spells `n` for every parser) or a byte outside printable ASCII (which
a lenient decoder may drop or fold). No OpenAI or Anthropic request field is spelled so. Nested keys (tool
schemas, metadata) are not looked at. A body it cannot read as such an object (not JSON, multipart, cut short)
passes: Agent Router's parser refuses every one that is not a JSON object (`ParseBody` of every endpoint), and
the scanner follows JSON's grammar, so any body Agent Router accepts is read here key by key as it reads it.
tests/test_body_guard.py runs the script in a real Envoy, configured the way Envoy Gateway renders it.
"""

from __future__ import annotations

import json
from typing import Any

from core.settings import StackSettings

BODY_GUARD_POLICY_NAME = "agent-budgets-body-guard"

REFUSED_ERROR_TYPE = "invalid_request_error"
REFUSED_CODE = "duplicate_key"
REFUSED_BODY = json.dumps(
    {
        "error": {
            "message": (
                "The model gateway refuses a request body whose top-level object repeats a key, or spells one with "
                "an escape or a non-ASCII byte: send each field once, in plain ASCII."
            ),
            "type": REFUSED_ERROR_TYPE,
            "code": REFUSED_CODE,
        }
    },
    separators=(",", ":"),
)

_LUA = """\
-- agent-budgets: refuse a JSON body whose top-level object repeats a key (core/body_guard.py says why).
local function skip_space(s, i)
  return (string.find(s, "[^ \\t\\r\\n]", i))
end

local function string_end(s, i)
  local j = i + 1
  while true do
    local k = string.find(s, '["\\\\]', j)
    if not k then return nil end
    if string.byte(s, k) == 34 then return k end
    j = k + 2
  end
end

local function value_end(s, i)
  local c = string.byte(s, i)
  if c == 34 then
    local k = string_end(s, i)
    return k and k + 1
  end
  if c ~= 123 and c ~= 91 then
    return (string.find(s, "[,}%]\\t\\r\\n ]", i))
  end
  local depth, j = 0, i
  while true do
    local k = string.find(s, '["{}%[%]]', j)
    if not k then return nil end
    local b = string.byte(s, k)
    if b == 34 then
      local e = string_end(s, k)
      if not e then return nil end
      j = e + 1
    else
      if b == 123 or b == 91 then depth = depth + 1 else depth = depth - 1 end
      j = k + 1
      if depth == 0 then return j end
    end
  end
end

local function refused_key(s)
  local i = 1
  while string.byte(s, i) and string.byte(s, i) <= 32 do i = i + 1 end
  if string.byte(s, i) ~= 123 then return nil end
  local seen = {}
  i = skip_space(s, i + 1)
  while i and string.byte(s, i) == 34 do
    local e = string_end(s, i)
    if not e then return nil end
    local key = string.sub(s, i + 1, e - 1)
    if seen[key] or string.find(key, "[^ -~]") or string.find(key, "\\\\", 1, true) then return key end
    seen[key] = true
    i = skip_space(s, e + 1)
    if not i or string.byte(s, i) ~= 58 then return nil end
    i = skip_space(s, i + 1)
    i = i and value_end(s, i)
    i = i and skip_space(s, i)
    if not i or string.byte(s, i) ~= 44 then return nil end
    i = skip_space(s, i + 1)
  end
  return nil
end

function envoy_on_request(handle)
  local body = handle:body()
  if body == nil or body:length() == 0 then return end
  if refused_key(body:getBytes(0, body:length())) then
    handle:respond({[":status"] = "400", ["content-type"] = "application/json"}, [==[@REFUSED_BODY@]==])
  end
end
"""

BODY_GUARD_LUA = _LUA.replace("@REFUSED_BODY@", REFUSED_BODY)
"""The script, as the EnvoyExtensionPolicy carries it inline."""


def body_guard_spec(gateway_ref: dict[str, Any]) -> dict[str, Any]:
    """The EnvoyExtensionPolicy spec that runs the guard on every route of the Gateway."""
    return {"targetRefs": [gateway_ref], "lua": [{"type": "Inline", "inline": BODY_GUARD_LUA}]}


def guard_enabled(settings: StackSettings) -> bool:
    """Whether the stack runs the guard (and so needs Lua on in Envoy Gateway)."""
    return settings.gateway.refuse_duplicate_keys
