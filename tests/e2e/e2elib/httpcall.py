"""One HTTP request from the test process (to a kubectl port-forward on 127.0.0.1)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class HttpReply:
    status: int | None
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""
    error: str | None = None

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def http_request(
    port: int,
    method: str,
    path: str,
    *,
    headers: Mapping[str, str] | None = None,
    body: Any = None,
    host: str = "127.0.0.1",
    timeout: float = 60.0,
) -> HttpReply:
    """A request to 127.0.0.1:port; ``host`` is only the Host header. Errors become HttpReply.error."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = json.dumps(body).encode() if body is not None else None
    sent = {"Host": host, **(headers or {})}
    if data is not None:
        sent.setdefault("Content-Type", "application/json")
    try:
        conn.request(method, path, body=data, headers=sent)
        response = conn.getresponse()
        raw = response.read()
    except (OSError, http.client.HTTPException) as exc:
        return HttpReply(None, error=f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()
    reply_headers: dict[str, str] = {}
    for name, value in response.getheaders():
        key = name.lower()
        reply_headers[key] = f"{reply_headers[key]}, {value}" if key in reply_headers else value
    return HttpReply(response.status, reply_headers, raw.decode("utf-8", errors="replace"))
