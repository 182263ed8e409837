"""Trace files in peakload's JSONL and the public layouts (Mooncake, BurstGPT, Azure): each
fixture (tests/loadgen/traces/README.md says where its layout comes from) is read with its
times and lengths, told apart by its first line, cut to a window and sped up; each bad file is
one SpecError naming the file, the line and the column; Mooncake's hash ids become shared
prompt blocks."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.engine.traces import detect_format, read_trace, trace_entries
from loadgen.engine.workload import Workload
from loadgen.errors import SpecError
from loadgen.runspec.spec import spec_from_dict

# The fixtures are laid out as the published files are (rows made up, seeded):
#   mooncake.jsonl  kvcache-ai/Mooncake's FAST'25 traces (mooncake_trace.jsonl; AIPerf's
#                   mooncake_trace reads the same): timestamp ms, input_length, output_length,
#                   hash_ids (one id per 512-token block)
#   burstgpt.csv    HPMLL/BurstGPT data/BurstGPT_1.csv: Timestamp (s), Model, Request tokens,
#                   Response tokens, Total tokens, Log Type (a 0-token failed row included)
#   azure_conv.csv  Azure/AzurePublicDataset data/AzureLLMInferenceTrace_conv.csv (2023):
#                   TIMESTAMP (wall clock, 7 decimals), ContextTokens, GeneratedTokens
# (tests/loadgen/traces/README.md says more.)
HERE = Path(__file__).parent / "traces"
MOONCAKE, BURSTGPT, AZURE = HERE / "mooncake.jsonl", HERE / "burstgpt.csv", HERE / "azure_conv.csv"


def spec(trace: Path | str, **load: Any) -> Any:
    return spec_from_dict(
        {
            "name": "t",
            "target": {"api": "openai-chat", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
            "load": {"trace": str(trace), "duration_s": 1000, **load},
        }
    )


def test_each_public_layout_is_told_from_its_first_line(tmp_path: Path) -> None:
    own = tmp_path / "own.jsonl"
    own.write_text('{"t": 0.5, "prompt_tokens": 3}\n')
    assert [detect_format(str(p)) for p in (own, MOONCAKE, BURSTGPT, AZURE)] == [
        "peakload",
        "mooncake",
        "burstgpt",
        "azure",
    ]


def test_mooncake_times_are_ms_and_its_lengths_and_blocks_kept() -> None:
    raw = [json.loads(line) for line in MOONCAKE.read_text().splitlines()]
    rows = read_trace(str(MOONCAKE))
    assert [e.t_s for e in rows] == [r["timestamp"] / 1000 for r in raw]
    assert [(e.prompt_tokens, e.output_tokens) for e in rows] == [
        (r["input_length"], r["output_length"]) for r in raw
    ]
    assert [e.prefix_blocks for e in rows] == [tuple(r["hash_ids"]) for r in raw]


def test_burstgpt_times_are_seconds_and_a_failed_row_asks_one_token() -> None:
    with BURSTGPT.open(newline="") as fh:
        raw = list(csv.DictReader(fh))
    rows = read_trace(str(BURSTGPT))
    assert [e.t_s for e in rows] == [float(r["Timestamp"]) for r in raw]
    assert [e.prompt_tokens for e in rows] == [int(r["Request tokens"]) for r in raw]
    want_out = [max(1, int(r["Response tokens"])) for r in raw]
    assert [e.output_tokens for e in rows] == want_out
    assert any(r["Response tokens"] == "0" for r in raw)


def test_azure_wall_clock_becomes_seconds_from_the_earliest_row(tmp_path: Path) -> None:
    rows = read_trace(str(AZURE))
    assert rows[0].t_s == 0.0
    assert rows[1].t_s == pytest.approx(47.0314286 - 46.6805904, abs=1e-6)
    assert (rows[0].prompt_tokens, rows[0].output_tokens) == (2396, 113)
    # rows out of time order are sorted; the earliest, not the first, is the origin
    shuffled = tmp_path / "a.csv"
    lines = AZURE.read_text().splitlines()
    shuffled.write_text("\n".join([lines[0], lines[3], lines[1], lines[2]]) + "\n")
    got = read_trace(str(shuffled))
    assert [e.t_s for e in got] == [e.t_s for e in rows[:3]]


def test_the_window_and_the_speedup() -> None:
    full = read_trace(str(BURSTGPT))
    got = trace_entries(spec(BURSTGPT, trace_start_s=20, trace_duration_s=40, trace_speedup=4).load)
    inside = [e for e in full if 20 <= e.t_s < 60]
    assert [e.t_s for e in got] == [(e.t_s - 20) / 4 for e in inside]
    assert [e.prompt_tokens for e in got] == [e.prompt_tokens for e in inside]
    with pytest.raises(SpecError, match=r"none of its 36 lines falls in the window \[500 s"):
        trace_entries(spec(BURSTGPT, trace_start_s=500).load)


def test_a_format_named_overrides_the_detection(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"line 1: no columns 'Timestamp', 'Request tokens'"):
        trace_entries(spec(AZURE, trace_format="burstgpt").load)
    odd = tmp_path / "odd.csv"  # a header no detection knows, read as Azure when named
    odd.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,Extra\n2024-05-10 00:00:00,5,6,x\n")
    assert [e.prompt_tokens for e in trace_entries(spec(odd, trace_format="azure").load)] == [5]
    unknown = tmp_path / "u.csv"
    unknown.write_text("when,in,out\n1,2,3\n")
    with pytest.raises(SpecError, match=r"load\.trace_format"):
        trace_entries(spec(unknown).load)


def test_trace_options_without_a_trace_are_refused() -> None:
    with pytest.raises(SpecError, match=r"trace_speedup apply only with load\.trace"):
        spec_from_dict(
            {
                "name": "t",
                "target": {"api": "openai-chat", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
                "load": {"rate": [1.0], "duration_s": 5, "trace_speedup": 2},
            }
        )


BAD: dict[str, tuple[str, str | bytes, str]] = {
    "mooncake_bad_length": (
        "m.jsonl",
        '{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [0]}\n'
        '{"timestamp": 10, "input_length": "many", "output_length": 2, "hash_ids": [0]}\n',
        "line 2, column \"input_length\": 'many' is not a whole number",
    ),
    "mooncake_negative_time": (
        "m.jsonl",
        '{"timestamp": -5, "input_length": 5, "output_length": 2}\n',
        'line 1, column "timestamp": -5 is not a time >= 0',
    ),
    "mooncake_bad_hash_ids": (
        "m.jsonl",
        '{"timestamp": 0, "input_length": 5}\n\n{"timestamp": 1, "input_length": 5, '
        '"hash_ids": [1, -2]}\n',
        'line 3, column "hash_ids": [1, -2] is not a list',
    ),
    "mooncake_not_json": (
        "m.jsonl",
        '{"timestamp": 0, "input_length": 5}\n{"timestamp": 1,\n',
        "line 2: not JSON",
    ),
    "burstgpt_bad_tokens": (
        "b.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,-3,1084,Conversation log\n",
        "line 3, column \"Response tokens\": '-3' is not a whole number",
    ),
    "burstgpt_short_row": (
        "b.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472\n",
        "line 2: 3 fields, the header has 6",
    ),
    "burstgpt_bad_time": (
        "b.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "soon,ChatGPT,472,18,490,API log\n",
        "line 2, column \"Timestamp\": 'soon' is not a time",
    ),
    "azure_bad_timestamp": (
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,4808,10\n"
        "2023-11-16 25:15:50.9951690,3180,8\n",
        "line 3, column \"TIMESTAMP\": '2023-11-16 25:15:50.9951690' is not a date and time",
    ),
    "azure_bad_tokens": (
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,4.5,10\n",
        "line 2, column \"ContextTokens\": '4.5' is not a whole number",
    ),
    "azure_not_utf8": (
        "a.csv",
        b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,4\xff,10\n",
        "line 2: not UTF-8",
    ),
    "azure_header_only": ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "trace is empty"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_trace_names_file_line_and_column(case: str, tmp_path: Path) -> None:
    name, body, want = BAD[case]
    p = tmp_path / name
    if isinstance(body, bytes):
        p.write_bytes(body)
    else:
        p.write_text(body)
    with pytest.raises(SpecError) as err:
        trace_entries(spec(p).load)
    assert str(err.value).startswith(f"{p}: "), str(err.value)
    assert want in str(err.value), str(err.value)


def test_mooncake_hash_ids_share_their_prefix_text() -> None:
    wl = Workload(spec(MOONCAKE), shard_seed=3)
    rows = read_trace(str(MOONCAKE))

    def words(i: int, e: Any) -> list[str]:
        p = wl.prompt(i, e.prompt_tokens, e.output_tokens, prefix_blocks=e.prefix_blocks)
        assert p.max_tokens == e.output_tokens
        return str(p.messages[-1]["content"]).split()

    texts = [words(i, e) for i, e in enumerate(rows)]
    for e, t in zip(rows, texts, strict=True):
        assert len(t) == e.prompt_tokens  # one word a token before calibration
    # every pair shares exactly the blocks their hash ids share, 512 words each
    for a in range(len(rows)):
        for b in range(a + 1, len(rows)):
            ia, ib = rows[a].prefix_blocks, rows[b].prefix_blocks
            same = next(
                (k for k, (x, y) in enumerate(zip(ia, ib, strict=False)) if x != y),
                min(len(ia), len(ib)),
            )
            n = same * 512
            full = min(n, len(texts[a]), len(texts[b]))
            assert texts[a][:full] == texts[b][:full]
            if same < min(len(ia), len(ib)):
                assert texts[a][n : n + 512] != texts[b][n : n + 512]
    assert any(
        rows[a].prefix_blocks[:3] == rows[b].prefix_blocks[:3] for a in range(9) for b in range(a)
    )
