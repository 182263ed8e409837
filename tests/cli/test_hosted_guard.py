"""`peakload run` against a hosted preset: the estimate is printed before anything starts, an
over-limit spec is refused (exit 2, one message with the numbers, nothing stored), and the
same spec with `confirm_over_limits` gets past the guard."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.cli.test_run_command import peakload

pytestmark = [pytest.mark.integration, pytest.mark.one_store]  # tests/support/stores.py

SPEC = """
name = "groq-over"
[target]
preset = "groq"
model = "openai/gpt-oss-120b"
base_url = "http://127.0.0.1:9/v1"
[workload]
prompt_tokens = 200
output_tokens = 100
[load]
rate = [2.0]
duration_s = 30
"""


def test_over_limit_refused_before_anything(store_url: str, tmp_path: Path) -> None:
    spec = tmp_path / "g.toml"
    spec.write_text(SPEC)
    proc = peakload(["run", str(spec)], store_url, tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # 60 requests, 12,000 + 6,000 tokens: 12,000 x 0.15 + 6,000 x 0.60 = 5,400 micro-USD
    assert "estimated: 60 requests, 12,000 input + 6,000 output tokens" in proc.stdout
    assert "$0.0054" in proc.stdout
    assert "120 requests/min exceeds the groq free tier's 30 requests/min" in proc.stderr
    assert "Traceback" not in proc.stderr
    with psycopg.connect(store_url) as conn:
        row = conn.execute("SELECT count(*) FROM runs").fetchone()
    assert row is not None and row[0] == 0
    spec.write_text(SPEC + "[cost]\nconfirm_over_limits = true\n")
    proc = peakload(["run", str(spec)], store_url, tmp_path)
    # past the guard: the (unreachable) target is what stops it now
    assert "(confirmed by the spec)" in proc.stdout
    assert "30 requests/min" not in proc.stderr and proc.returncode == 2
