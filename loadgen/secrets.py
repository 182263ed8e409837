"""What in a run spec is secret, by design rather than by a list of names: every header value and
every query parameter is, unless the spec declares it public (`target.public_headers`,
`target.public_query`). Stored specs, shard plans, logs and reports keep the names and replace
the values; secret values come by reference (`api_key_env`, `headers_env`) and are read from the
environment only where a request is built.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from loadgen.errors import SpecError
from loadgen.records import Batch

if TYPE_CHECKING:
    from loadgen.plan import Sink
    from loadgen.spec import TargetSpec

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


def literal_secrets(target: TargetSpec) -> list[str]:
    """Where `target` holds a secret value written in the spec itself (a header or a query
    parameter not declared public): what a redacted copy cannot carry to another process."""
    public_h = {h.lower() for h in target.public_headers}
    found = [f"header {n!r}" for n in target.headers if n.lower() not in public_h]
    for url in (target.base_url, target.metrics_url or ""):
        for item in urlsplit(url).query.split("&"):
            name = unquote_plus(item.partition("=")[0])
            if item and name not in target.public_query:
                found.append(f"query parameter {name!r}")
    return found


def resolve_target(target: TargetSpec, environ: Mapping[str, str] | None = None) -> TargetSpec:
    """`target` with each `headers_env` header filled in from the environment, for the process
    that sends requests. The result holds secrets: never store, plan or log it."""
    if not target.headers_env:
        return target
    env = os.environ if environ is None else environ
    headers = dict(target.headers)
    for name, var in target.headers_env.items():
        value = env.get(var)
        if value is None:
            raise SpecError(
                f"header {name!r} comes from ${var}, which is not set in this process's "
                "environment",
                where="target.headers_env",
            )
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise SpecError(
                f"${var} (header {name!r}) holds a control character", where="target.headers_env"
            )
        headers[name] = value
    return target.model_copy(update={"headers": headers})


MIN_SCRUBBED = 4  # shorter values ("1", "on") would blank ordinary words in server messages


def secret_values(sending: TargetSpec, environ: Mapping[str, str] | None = None) -> list[str]:
    """Every secret value the sending target carries (a `resolve_target` result): header values
    and query values not declared public, and the API key. Longest first."""
    env = os.environ if environ is None else environ
    public_h = {h.lower() for h in sending.public_headers}
    found = {v for n, v in sending.headers.items() if n.lower() not in public_h}
    for item in urlsplit(sending.base_url).query.split("&"):
        name, _, value = item.partition("=")
        if value and unquote_plus(name) not in sending.public_query:
            found |= {value, unquote_plus(value)}
    if sending.api_key_env and env.get(sending.api_key_env):
        found.add(env[sending.api_key_env])
    return sorted((v for v in found if len(v) >= MIN_SCRUBBED), key=len, reverse=True)


class ScrubbingSink:
    """A sink that replaces secret values in what a server sent back before it is stored: an
    error body or a proxy's message may echo the request's headers or URL."""

    def __init__(self, sink: Sink, secrets: list[str]) -> None:
        self.sink, self.secrets = sink, secrets

    def scrub(self, text: str) -> str:
        for value in self.secrets:
            if value in text:
                text = text.replace(value, REDACTED)
        return text

    def write(self, batch: Batch) -> None:
        for rec in batch.records:
            if rec.error_detail:
                rec.error_detail = self.scrub(rec.error_detail)
            if rec.response_text:
                rec.response_text = self.scrub(rec.response_text)
        self.sink.write(batch)

    def close(self) -> None:
        self.sink.close()
