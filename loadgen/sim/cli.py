"""The `peakload sim` command (also `python -m loadgen.sim`): builds a SimConfig from a preset, a
JSON file and options, then serves in the foreground and prints the base URL once listening.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from loadgen.errors import SpecError
from loadgen.sim.config import PRESETS, load_config, parse_fault_rule
from loadgen.sim.params import PARAMS, Mode, parse_param


def _params(specs: tuple[str, ...]) -> list[tuple[str, Mode]]:
    try:
        return [parse_param(p) for p in specs]
    except ValueError as e:
        raise SpecError(str(e), "--param") from None


def _stall(text: str | None) -> tuple[float, float] | tuple[None, None]:
    if text is None:
        return None, None
    head, sep, tail = text.partition("/")
    try:
        if not sep:
            raise ValueError
        return float(head), float(tail)
    except ValueError:
        msg = f"expected SECONDS/EVERY_SECONDS like 5/30, got {text!r}"
        raise SpecError(msg, "--stall") from None


@click.command("sim")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=int, default=8000, show_default=True, help="Port (0: any free).")
@click.option("--preset", type=click.Choice(sorted(PRESETS)), help="Engine preset [fixed].")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="JSON config.")
@click.option("--ttft-ms", type=float, help="Fixed mode: ms from arrival to the first token.")
@click.option("--itl-ms", type=float, help="Fixed mode: ms between tokens.")
@click.option("--slots", type=int, help="Batching: max sequences per step.")
@click.option("--kv-capacity-tokens", type=int, help="Batching: KV budget in tokens.")
@click.option("--rate-limit-rps", type=float, help="Requests/s budget; beyond it 429.")
@click.option(
    "--rate-limit-tps",
    type=float,
    help="Tokens/s budget (prompt + max_tokens charged on arrival); beyond it 429.",
)
@click.option(
    "--rate-limit-headers/--no-rate-limit-headers",
    default=None,
    help="Advertise the budgets in x-ratelimit-* headers on every completion answer.",
)
@click.option("--tokens-per-chunk", type=int, help="Tokens per SSE event (all requests).")
@click.option("--reasoning-tokens", type=int, help="First N tokens as reasoning deltas.")
@click.option("--reasoning-field", type=click.Choice(["reasoning_content", "reasoning"]))
@click.option("--stall", "stall", help="Freeze the whole server S s every P s, as S/P (5/30).")
@click.option("--fault", "faults", multiple=True, help="KIND[:ARG]=RATE, repeatable.")
@click.option(
    "--fault-draw",
    type=click.Choice(["request", "arrival"]),
    help="Draw each request's fault from its request id, or from its arrival number so that "
    "N requests get the same faults on every run [request].",
)
@click.option("--seed", type=int, help="Seed for fault draws and output text.")
@click.option("--model", help="Model name reported by the server.")
@click.option("--truth-log", type=click.Path(path_type=Path), help="Ground-truth JSONL file.")
@click.option(
    "--close-after",
    type=click.Choice(["never", "response", "response_silent", "stream"]),
    help="Close connections after every response (saying so, or silently) or after each "
    "streamed response, as llama.cpp's server does [never].",
)
@click.option("--keepalive-header", help='Send "Keep-Alive: VALUE", e.g. "timeout=5, max=100".')
@click.option(
    "--echo-request/--no-echo-request",
    default=None,
    help="Misbehave: quote the request's URL and headers in every error answer.",
)
@click.option("--idle-close-s", type=float, help="Close connections idle this long [never].")
@click.option(
    "--report-timings/--no-report-timings",
    default=None,
    help="End each stream with llama.cpp's `timings` object.",
)
@click.option(
    "--timings-as",
    type=click.Choice(["llamacpp", "groq"]),
    help="How the OpenAI routes report timings: llama.cpp's `timings` (no queue time) or "
    "Groq's `x_groq.usage` (queue, prompt and completion times) [llamacpp].",
)
@click.option(
    "--param",
    "param_modes",
    multiple=True,
    help="NAME=reject|ignore|honour: what the sim does with a request parameter (repeatable; "
    "for `peakload probe`). Names: " + ", ".join(PARAMS) + ".",
)
@click.option(
    "--protocol",
    type=click.Choice(
        [
            "all",
            "openai",
            "openai-responses",
            "ollama",
            "tgi-generate",
            "llamacpp-completion",
            "triton-generate",
        ]
    ),
    help="Answer only this API's completion route (others 404); the printed base URL is the "
    "one a spec needs for it [all: every route, /v1 printed].",
)
@click.option(
    "--audio-rtf",
    type=float,
    help="Audio APIs, fixed mode: each speech chunk / transcript word is due this fraction of "
    "its audio's length after the one before (0: at --itl-ms, like text) [0].",
)
@click.option("--audio-chunk-ms", type=float, help="Speech: audio per streamed chunk [100].")
@click.option(
    "--speech-words-per-s",
    type=float,
    help="The voice's pace: a speech's length, a transcript's words [2.5].",
)
@click.option(
    "--timer-spin-us",
    type=float,
    help="Wake this early before each due time for sub-ms precision (default 1000; 0: ms).",
)
def sim(
    host: str,
    port: int,
    preset: str | None,
    config_file: Path | None,
    ttft_ms: float | None,
    itl_ms: float | None,
    slots: int | None,
    kv_capacity_tokens: int | None,
    rate_limit_rps: float | None,
    rate_limit_tps: float | None,
    rate_limit_headers: bool | None,
    tokens_per_chunk: int | None,
    reasoning_tokens: int | None,
    reasoning_field: str | None,
    stall: str | None,
    faults: tuple[str, ...],
    fault_draw: str | None,
    seed: int | None,
    model: str | None,
    truth_log: Path | None,
    close_after: str | None,
    keepalive_header: str | None,
    echo_request: bool | None,
    idle_close_s: float | None,
    report_timings: bool | None,
    timings_as: str | None,
    param_modes: tuple[str, ...],
    protocol: str | None,
    audio_rtf: float | None,
    audio_chunk_ms: float | None,
    speech_words_per_s: float | None,
    timer_spin_us: float | None,
) -> None:
    """Run the simulated OpenAI-compatible engine until SIGINT/SIGTERM.

    \b
    Serves POST /v1/chat/completions and /v1/completions (stream true or false), the other
    APIs' routes (/v1/responses, Ollama /api/chat and /api/generate, TGI /generate_stream and
    /generate, llama.cpp /completion, Triton /v2/models/M/generate_stream), speech
    (/v1/audio/speech: PCM or WAV, raw or SSE) and transcription (/v1/audio/transcriptions:
    multipart upload, SSE or JSON), GET /v1/models,
    /health and /metrics (Prometheus, peakload_sim:*). Prompt tokens = whitespace-separated
    words of the prompt text; output = one pseudo-word per token (some multi-byte UTF-8).
    Force faults per request with the header `x-peakload-sim-fault: KIND[:ARG][, ...]`;
    name the request with `x-peakload-request-id` (echoed; made up when absent).
    Fault kinds: http_429 (429), http_503 (503), error_event, reset, trickle, no_done,
    multi_token, utf8_split, coalesce, reasoning, tool_calls, html_error, non_streaming.
    The truth log (JSONL) has one line per request with the monotonic ns of every write.
    """
    from loadgen.sim.server import run

    try:
        stall_for, stall_every = _stall(stall)
        overrides: dict[str, Any] = {
            "ttft_ms": ttft_ms,
            "itl_ms": itl_ms,
            "slots": slots,
            "kv_capacity_tokens": kv_capacity_tokens,
            "rate_limit_rps": rate_limit_rps,
            "rate_limit_tokens_per_s": rate_limit_tps,
            "rate_limit_headers": rate_limit_headers,
            "tokens_per_chunk": tokens_per_chunk,
            "reasoning_tokens": reasoning_tokens,
            "reasoning_field": reasoning_field,
            "stall_for_s": stall_for,
            "stall_every_s": stall_every,
            "fault_draw": fault_draw,
            "seed": seed,
            "model": model,
            "timer_spin_us": timer_spin_us,
            "close_after": close_after,
            "keepalive_header": keepalive_header,
            "echo_request": echo_request,
            "idle_close_s": idle_close_s,
            "report_timings": report_timings,
            "timings_as": timings_as,
            "protocol": protocol,
            "audio_rtf": audio_rtf,
            "audio_chunk_ms": audio_chunk_ms,
            "speech_words_per_s": speech_words_per_s,
            "params": dict(_params(param_modes)) if param_modes else None,
            "faults": [parse_fault_rule(f) for f in faults],
        }
        cfg = load_config(preset, config_file, overrides)
        if cfg.mode != "fixed" and (ttft_ms is not None or itl_ms is not None):
            raise SpecError(
                "--ttft-ms/--itl-ms set the fixed schedule, but this preset is a batching engine;"
                " use --preset fixed",
                "--ttft-ms",
            )
    except SpecError as e:
        click.echo(f"peakload sim: error: {e}", err=True)
        sys.exit(2)

    def ready(url: str) -> None:
        click.echo(url)
        sys.stdout.flush()
        click.echo(f"peakload sim: {cfg.mode} engine listening; SIGINT/SIGTERM stops", err=True)

    try:
        run(cfg, host, port, ready, truth_log)
    except OSError as e:
        click.echo(f"peakload sim: error: cannot listen on {host}:{port}: {e.strerror}", err=True)
        sys.exit(1)


def main() -> None:
    sim(prog_name="python -m loadgen.sim")
