"""The `one_store` marker (tests/support/stores.py): a marked test that takes `store_url` runs on
the production store only (TimescaleDB when configured, else the embedded server); an unmarked
one runs on both; a marked test that names its store keeps it."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = """
import pytest

def test_both(store_kind):
    pass

@pytest.mark.one_store
def test_one(store_kind):
    pass

@pytest.mark.one_store
@pytest.mark.parametrize("store_kind", ["plain"])
def test_named(store_kind):
    pass
"""


def _collected(pytester: pytest.Pytester) -> list[str]:
    pytester.makeconftest('pytest_plugins = ["tests.support.stores"]')
    pytester.makepyfile(TESTS)
    out = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    return sorted(line.split("::")[1] for line in out.outlines if "::" in line)


def test_one_store_with_timescaledb_configured(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    monkeypatch.setenv("PEAKLOAD_TEST_TIMESCALE_URL", "postgresql://unused@127.0.0.1:9/x")
    assert _collected(pytester) == [
        "test_both[plain]",
        "test_both[timescale]",
        "test_named[plain]",
        "test_one[timescale]",
    ]


def test_one_store_without_timescaledb(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    monkeypatch.delenv("PEAKLOAD_TEST_TIMESCALE_URL", raising=False)
    assert _collected(pytester) == [
        "test_both[plain]",
        "test_both[timescale]",
        "test_named[plain]",
        "test_one[plain]",
    ]
