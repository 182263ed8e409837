"""The stored form of a run spec: every header value and query parameter not declared public
replaced by `REDACTED` (the rule: loadgen.runspec.secrets), on the spec's JSON form, so stored
specs, shard plans, logs and reports keep the names and never the values.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any
from urllib.parse import unquote_plus, urlsplit, urlunsplit

REDACTED = "REDACTED"


def redact_query(url: str, public: Collection[str]) -> str:
    """`url` with the value of every query parameter not named in `public` replaced; the
    public ones keep their exact encoding. A fragment is dropped (it is never sent)."""
    parts = urlsplit(url)
    if not parts.query and not parts.fragment:
        return url
    keep = set(public)
    out = []
    for item in parts.query.split("&"):
        if not item:
            continue
        name = item.partition("=")[0]
        out.append(item if unquote_plus(name) in keep else f"{name}={REDACTED}")
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "&".join(out), ""))


def redact_target(target: dict[str, Any]) -> dict[str, Any]:
    """A `TargetSpec.model_dump(mode="json")` with its secret values replaced."""
    public_headers = {h.lower() for h in target.get("public_headers") or ()}
    public_query = list(target.get("public_query") or ())
    out = dict(target)
    out["headers"] = {
        name: value if name.lower() in public_headers else REDACTED
        for name, value in (target.get("headers") or {}).items()
    }
    out["base_url"] = redact_query(str(target["base_url"]), public_query)
    if target.get("metrics_url"):
        out["metrics_url"] = redact_query(str(target["metrics_url"]), public_query)
    return out


def redact_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A `RunSpec.model_dump(mode="json")` as it may be stored, planned, logged or reported."""
    return {**spec, "target": redact_target(spec["target"])}
