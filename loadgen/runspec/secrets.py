"""What in a run spec is secret, by design rather than by a list of names: every header value and
every query parameter is, unless the spec declares it public (`target.public_headers`,
`target.public_query`). Stored specs, shard plans, logs and reports keep the names and replace
the values (loadgen.runspec.redact); secret values come by reference (`api_key_env`,
`headers_env`) and are read from the environment only where a request is built (here).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import unquote_plus, urlsplit

from loadgen.errors import SpecError
from loadgen.runspec.target_spec import TargetSpec
from loadgen.scrub import remember


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
        remember([value])
    return target.model_copy(update={"headers": headers})


def secret_values(sending: TargetSpec, environ: Mapping[str, str] | None = None) -> list[str]:
    """Every secret value the sending target carries (a `resolve_target` result): header values,
    query and fragment values not declared public, and the API key; each also made known to the
    process's scrubber (loadgen.scrub.remember)."""
    env = os.environ if environ is None else environ
    public_h = {h.lower() for h in sending.public_headers}
    found = {v for n, v in sending.headers.items() if n.lower() not in public_h}
    for url in (sending.base_url, sending.metrics_url or ""):
        parts = urlsplit(url)
        for item in (*parts.query.split("&"), *parts.fragment.split("&")):
            name, _, value = item.partition("=")
            if value and unquote_plus(name) not in sending.public_query:
                found |= {value, unquote_plus(value)}
    if sending.api_key_env and env.get(sending.api_key_env):
        found.add(env[sending.api_key_env])
    remember(found)
    return sorted(found, key=len, reverse=True)
