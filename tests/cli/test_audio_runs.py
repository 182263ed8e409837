"""`peakload run` on a speech-out and a speech-in spec against the simulated engine, stored in a
real database (plain PostgreSQL and TimescaleDB): every record with its audio columns, the
summary's and `report`'s audio figures, an SLA claim on the time to first audio byte, and the
cost per audio hour from a preset's dated price."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from tests.cli.test_run_command import LOOSE_VALIDITY, peakload
from tests.support.sim import SimProcess
from tests.support.stores import ledger_check

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.one_store]  # two CLI runs each

SIM = ["--preset", "fixed", "--ttft-ms", "40", "--audio-rtf", "0.1", "--audio-chunk-ms", "100"]


def _speech_spec(base_url: str) -> str:
    return f"""
name = "tts-e2e"
[target]
api = "openai-speech"
base_url = "{base_url}"
model = "tts-1"
[workload]
prompt_tokens = 10                 # words of text: 4 s of speech at the sim's 2.5 words/s
[workload.audio]
voice = "alloy"
format = "wav"
stream_format = "sse"
[load]
concurrency = [4]
duration_s = 2
warmup_s = 0.2
[[slos]]
metric = "ttfab_ms"
percentile = 90
threshold = 5000
{LOOSE_VALIDITY}"""


def _transcription_spec(base_url: str) -> str:
    return f"""
name = "stt-e2e"
[target]
preset = "groq-whisper"
base_url = "{base_url}"
api_key_env = "PEAKLOAD_TEST_FAKE_KEY"
model = "whisper-large-v3-turbo"
stream = true
[workload.audio]
speak_seconds = [1.5, 3]
language = "en"
[load]
concurrency = [2]
duration_s = 2
warmup_s = 0.2
{LOOSE_VALIDITY}"""


def _audio_rows(url: str, run_id: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT outcome, audio_ms, audio_bytes, transcript_words, request_id::text "
            "FROM requests WHERE run_id = %s",
            (run_id,),
        ).fetchall()


def test_speech_out_run_stores_audio_and_judges_time_to_first_audio(
    sim_factory: object, store_url: str, tmp_path: Path
) -> None:
    sp: SimProcess = sim_factory(SIM)  # type: ignore[operator]
    spec = tmp_path / "tts.toml"
    spec.write_text(_speech_spec(sp.base_url))
    out = tmp_path / "tts.json"
    proc = peakload(["run", str(spec), "--json", str(out)], store_url, tmp_path)
    assert proc.returncode == 3, proc.stderr  # too few requests to prove the error budget
    summary = json.loads(out.read_text())
    level = summary["levels"][0]
    a = level["audio"]
    assert a["samples"] > 0
    # 40 chunks of 100 ms at RTF 0.1: 40 ms + 39 x 10 ms of a 4 s answer -> RTF >= 0.1075
    assert a["audio_rtf"]["p50"] >= 0.1075 - 1e-3
    # speed is 1 / RTF per request: their medians are reciprocal for an odd count of requests;
    # for an even one each interpolates between its two middle values (within the spread of
    # those two, under 1 % here where every answer takes about as long)
    assert a["audio_speed_x"]["p50"] == pytest.approx(1 / a["audio_rtf"]["p50"], rel=1e-2)
    assert a["ttfab_ms"]["p50"] >= 39.5 and a["audio_s"] > 0
    assert a["audio_s_per_s"] > 0 and a["chunk_gap_ms"]["p50"] >= 9.5
    assert "audio" in proc.stdout and "TTFAB" in proc.stdout
    rows = _audio_rows(store_url, summary["run_id"])
    assert rows and all(r[0] == "ok" for r in rows)
    assert {r[1] for r in rows} == {4000.0}  # decoded from the WAV's bytes
    assert {r[2] for r in rows} == {44 + 4000 * 48}
    with psycopg.connect(store_url) as conn:
        assert ledger_check(conn, summary["run_id"], [str(r[4]) for r in rows]) == len(rows)
    report = peakload(["report", summary["run_id"]], store_url, tmp_path)
    assert report.returncode == 0, report.stderr
    assert "TTFAB" in report.stdout and "RTF" in report.stdout
    claims = tmp_path / "claims.toml"
    claims.write_text(
        'max_error_rate = 1.0\n[[claims]]\nmetric = "ttfab_ms"\npercentile = 50\n'
        'threshold = 5000\n[[claims]]\nmetric = "ttfab_ms"\npercentile = 50\nthreshold = 1\n'
    )
    sla = peakload(
        ["sla", summary["run_id"], "--claims", str(claims), "--json"], store_url, tmp_path
    )
    verdicts = {v["claim"]: v for v in json.loads(sla.stdout)["verdicts"]}
    held, broken = verdicts["p50 ttfab_ms < 5000"], verdicts["p50 ttfab_ms < 1"]
    assert held["exceedances"] == 0 and held["verdict"] in ("pass", "insufficient samples")
    assert broken["exceedances"] == broken["n"] == held["n"] >= 7
    assert broken["verdict"] == "fail" and sla.returncode == 1, sla.stdout


def test_speech_in_run_stores_uploads_and_costs_audio_hours(
    sim_factory: object, store_url: str, tmp_path: Path
) -> None:
    sp: SimProcess = sim_factory(SIM)  # type: ignore[operator]
    spec = tmp_path / "stt.toml"
    spec.write_text(_transcription_spec(sp.base_url))
    out = tmp_path / "stt.json"
    proc = peakload(
        ["run", str(spec), "--json", str(out)], store_url, tmp_path, PEAKLOAD_TEST_FAKE_KEY="k"
    )
    assert proc.returncode == 3, proc.stderr
    summary = json.loads(out.read_text())
    a = summary["levels"][0]["audio"]
    assert a["words_per_s"]["p50"] > 0 and 0.1 <= a["audio_rtf"]["p50"] < 5
    rows = _audio_rows(store_url, summary["run_id"])
    assert rows and all(r[0] == "ok" for r in rows)
    lengths = sorted({round(float(r[1])) for r in rows})  # type: ignore[arg-type]
    assert len(lengths) == 2 and all(r[3] is not None and r[3] >= 1 for r in rows)
    cost = summary["cost"]
    assert cost["basis"] == "per-audio-hour" and cost["prices"]["audio_per_hour"] == 0.04
    audio_s = sum(float(r[1]) for r in rows) / 1000  # type: ignore[arg-type]
    assert cost["total_usd"] == pytest.approx(0.04 * audio_s / 3600)
    assert cost["audio"]["levels"][0]["usd_per_audio_hour"] == 0.04
    assert "per audio hour" in proc.stdout
