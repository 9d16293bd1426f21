"""Fetch a JWK set over HTTPS as Envoy Gateway would, and print its key ids (the smoke check of make up).

    python fetch_jwks.py URL CA_FILE

Trusts only CA_FILE and checks the certificate's name against the URL's host (ssl.create_default_context
does both). Prints one JSON line: {"ok": true, "kids": [...], "jwks": {...}} and exits 0, or
{"ok": false, "stage": "tls"|"http"|"connect"|"jwks", "error": "..."} and exits 1. Standard library only: it
runs in a stock python image inside the cluster (scripts/idp/smoke-pod.yaml.tmpl).
"""

from __future__ import annotations

import json
import ssl
import sys
import urllib.error
import urllib.request
from typing import Any


def fetch(url: str, ca_file: str, timeout: float = 15.0) -> dict[str, Any]:
    """The outcome of one GET of `url`, trusting only `ca_file`."""
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as error:
        return {"ok": False, "stage": "trust", "error": f"cannot load the trust bundle {ca_file}: {error}"}
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as reply:
            body = reply.read()
    except urllib.error.HTTPError as error:
        return {"ok": False, "stage": "http", "error": f"HTTP {error.code} {error.reason} from {url}"}
    except urllib.error.URLError as error:
        reason = error.reason
        stage = "tls" if isinstance(reason, ssl.SSLError | ssl.CertificateError) else "connect"
        return {"ok": False, "stage": stage, "error": f"{type(reason).__name__}: {reason}"}
    except (OSError, ssl.SSLError) as error:
        stage = "tls" if isinstance(error, ssl.SSLError) else "connect"
        return {"ok": False, "stage": stage, "error": f"{type(error).__name__}: {error}"}
    try:
        jwks = json.loads(body)
        keys = jwks["keys"]
        kids = sorted(str(key["kid"]) for key in keys)
    except (ValueError, KeyError, TypeError) as error:
        return {"ok": False, "stage": "jwks", "error": f"not a JWK set with key ids: {error!r}"}
    if not kids:
        return {"ok": False, "stage": "jwks", "error": "the JWK set has no keys"}
    return {"ok": True, "kids": kids, "jwks": jwks}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: fetch_jwks.py URL CA_FILE", file=sys.stderr)
        return 2
    outcome = fetch(argv[0], argv[1])
    print(json.dumps(outcome, separators=(",", ":")))
    return 0 if outcome["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
