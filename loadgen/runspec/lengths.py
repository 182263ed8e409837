"""Token-length distributions of a workload (prompt, output, a session's user turns): a bare
integer is a fixed length, a table names its `dist`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from loadgen.runspec.fields import MAX_TOKENS, Strict


class FixedLength(Strict):
    dist: Literal["fixed"] = "fixed"
    value: int = Field(ge=1, le=MAX_TOKENS)


class UniformLength(Strict):
    dist: Literal["uniform"]
    min: int = Field(ge=1, le=MAX_TOKENS)
    max: int = Field(ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self


def _bounds_ordered(lo: int, hi: int | None) -> None:
    """Clamping every draw to `max` when `min > max` would silently make a fixed length."""
    if hi is not None and hi < lo:
        raise ValueError(f"max ({hi}) is below min ({lo})")


class NormalLength(Strict):
    dist: Literal["normal"]
    mean: float = Field(gt=0, le=MAX_TOKENS)
    std: float = Field(ge=0, le=MAX_TOKENS)
    min: int = Field(default=1, ge=1, le=MAX_TOKENS)
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _ordered(self) -> NormalLength:
        _bounds_ordered(self.min, self.max)
        return self


class LognormalLength(Strict):
    """Lognormal by the median and sigma of the underlying normal (`ln`-space std)."""

    dist: Literal["lognormal"]
    median: float = Field(gt=0, le=MAX_TOKENS)
    sigma: float = Field(ge=0, le=10)  # e**10 = 22,026 times the median already
    min: int = Field(default=1, ge=1, le=MAX_TOKENS)
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _ordered(self) -> LognormalLength:
        _bounds_ordered(self.min, self.max)
        return self


LengthDist = Annotated[
    FixedLength | UniformLength | NormalLength | LognormalLength, Field(discriminator="dist")
]


def coerce_length(value: Any) -> Any:
    """A bare integer means a fixed length."""
    if isinstance(value, bool):
        raise ValueError("a length must be an integer or a table with `dist`")
    if isinstance(value, int):
        return {"dist": "fixed", "value": value}
    return value


# how pydantic names the union's members in an error's location (dropped from the message)
LENGTH_TAGS = frozenset(
    {"FixedLength", "UniformLength", "NormalLength", "LognormalLength"}
    | {"fixed", "uniform", "normal", "lognormal"}
)
