"""What every run-spec table shares: the strict base model and the bounds past which a value is
a typo, not a test (they keep every later int(seconds * 1e9), sample and allocation finite: a
week-long level, 16 M tokens, a million requests/s)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

MAX_DURATION_S = 7 * 86400.0
MAX_TIMEOUT_S = 3600.0
MAX_TOKENS = 1 << 24
MAX_RATE = 1_000_000.0
MAX_SEED = (1 << 64) - 1
# of every verdict on a run's criteria, SLA claims and a saturation search's levels
# (analysis.verdicts.sla uses it too)
DEFAULT_VERDICT_CONFIDENCE = 0.99


class Strict(BaseModel):
    # strict: TOML gives native types, so `true` is never a count and "8" never a number;
    # no inf/nan: every duration and rate becomes an integer of ns or a finite schedule
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
