"""The run spec of a Locust test: a peakload spec file (its [load] optional and ignored: Locust's
users, spawn rate and run time make the load) or a user class's plain attributes, with Locust's
`--host` as the target's base URL. Kept apart from Locust so it can be tested without gevent.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadgen.checks.specfile import resolve_paths
from loadgen.errors import SpecError
from loadgen.runspec.spec import RunSpec, spec_from_dict

# stored in place of the spec's [load] until the run's end records what Locust ran
PLACEHOLDER_LOAD = {"concurrency": [1], "duration_s": 1.0}


def locust_spec(
    path: Path | None, attrs: Mapping[str, Any], host: str | None, *, where: str
) -> RunSpec:
    """The spec at `path` or, without one, from `attrs` (name, api, model, api_key_env,
    prompt_tokens, output_tokens); `host`, when given, replaces target.base_url. Raises
    SpecError naming the file (or `where`) and the field."""
    if path is not None:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise SpecError(f"cannot read the spec: {exc}", where=str(path)) from None
        base, where = path.parent, str(path)
    else:
        target: dict[str, Any] = {
            "api": attrs.get("api", "openai-chat"),
            "base_url": host or "",
            "model": attrs.get("model", "default"),
        }
        if attrs.get("api_key_env"):
            target["api_key_env"] = attrs["api_key_env"]
        data = {
            "name": attrs.get("name", "locust"),
            "target": target,
            "workload": {
                "prompt_tokens": attrs.get("prompt_tokens", 128),
                "output_tokens": attrs.get("output_tokens", 128),
            },
        }
        base = Path.cwd()
    data.setdefault("load", dict(PLACEHOLDER_LOAD))
    if host:
        if not isinstance(data.get("target"), dict):
            raise SpecError("[target] is missing", where=where)
        data["target"]["base_url"] = host
    # resolve_paths is load_spec's own step after parsing a file: dataset and trace paths are
    # relative to the spec's folder
    return resolve_paths(spec_from_dict(data, where=where), base)
