"""The fold from one request's stream events to its record: stamps relative to the scheduled
time, chunks (one per read), token counts reconciled with the server's usage, and the failure
kind. The one place a request's outcome becomes a record (loadgen/results/records.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import numpy as np

from loadgen.engine.samples import SAMPLED as SAMPLED
from loadgen.engine.samples import sample_metrics
from loadgen.engine.shard import LevelWindow, Shard
from loadgen.engine.workload import Prompt, request_body
from loadgen.results.records import Outcome, RequestRecord, TokenSource, make_request_id
from loadgen.target import EventKind, PreparedRequest
from loadgen.targets.failures import classify


async def execute(
    shard: Shard,
    index: int,
    window: LevelWindow,
    sched: int,
    prompt: Prompt,
    session: tuple[int, int] | None = None,
    context: list[dict[str, str]] | None = None,
    attempt: int = 0,
) -> str:
    """Send one request scheduled at `sched` (monotonic ns); emit its record. Returns the
    answer text (only needed by multi-turn sessions). A 429 is retried when the spec asks
    (`[pacing] retries`): each retry is a separate attempt with its own record and request id,
    after the server's Retry-After, measured from the original schedule."""
    clock = shard.clock
    check = shard.check
    start = clock()
    # The generator's dispatch delay: from the schedule to the request on the wire, less the
    # set-up of a connection opened for it (the network's and the server's time, kept in
    # `connect_ns`), so the self-check judges the same send the record stores (`sent_ns`). A
    # retry waits on purpose: not the generator's delay.
    judge_dispatch = attempt == 0
    messages = context if context is not None else prompt.messages
    body = request_body(shard.spec, dataclasses.replace(prompt, messages=messages))
    rid = make_request_id(shard.plan.run_id, shard.plan.shard_id, index, attempt)
    t = shard.spec.target
    prepared = PreparedRequest(
        rid,
        body,
        prompt.prompt_tokens if prompt.prompt_tokens >= 0 else None,
        prompt.max_tokens,
        t.deadline_s,
        t.idle_timeout_s,
    )
    rec = shard.new_record(
        index,
        window,
        sched,
        prompt_tokens=prepared.prompt_tokens,
        max_tokens=prompt.max_tokens,
        session_id=session[0] if session else None,
        turn=session[1] if session else None,
        attempt=attempt,
    )
    rec.adapter, rec.shared_prefix_tokens = prompt.adapter, prompt.shared_prefix_tokens
    shard.started += 1
    keep_text = shard.spec.store_content or session is not None
    texts: list[str] = []
    chars: list[int] = []
    offsets = rec.chunk_offsets_us
    ctokens = rec.chunk_tokens
    cchoices: list[int] = []  # per chunk, its choice (n > 1); kept only if one is not 0
    sent = last_t = last_c = -1
    done = False
    usage = None
    try:
        async for ev in shard.target.stream(prepared, clock):
            k = ev.kind
            if k is EventKind.CONTENT or k is EventKind.REASONING or k is EventKind.TOOL_CALL:
                first = rec.first_token_ns is None
                if first:
                    rec.first_token_ns = ev.t_ns - sched
                    check.first_tokens += 1
                if k is not EventKind.REASONING and rec.first_answer_ns is None:
                    rec.first_answer_ns = ev.t_ns - sched
                if k is EventKind.REASONING:
                    rec.reasoning_tokens += ev.tokens
                shard.tokens += ev.tokens  # the tick's tokens are those that *arrived* in it
                spread = ev.spread_ns
                if spread == 0:
                    check.exact_stamped += 1
                elif spread < 0:
                    check.user_stamped += 1
                else:
                    check.note_merged(ev, first)
                if ev.t_ns == last_t and ev.choice == last_c:  # same read: one arrival, one chunk
                    ctokens[-1] += ev.tokens
                    chars[-1] += len(ev.text)
                else:  # each choice its own series of chunks (loadgen/results/choices.py)
                    shard.chunks_seen += 1
                    offsets.append((ev.t_ns - sent) // 1000)
                    ctokens.append(ev.tokens)
                    chars.append(len(ev.text))
                    cchoices.append(ev.choice)
                    last_t, last_c = ev.t_ns, ev.choice
                if keep_text and k is not EventKind.REASONING:
                    texts.append(ev.text)
            elif k is EventKind.SENT:
                sent = ev.t_ns
                rec.sent_ns = sent - sched
                if ev.connect_ns >= 0:
                    rec.connect_ns = ev.connect_ns
                if judge_dispatch:
                    check.dispatch_second.append((sent - sched - max(ev.connect_ns, 0)) / 1e6)
                    judge_dispatch = False
            elif k is EventKind.RESENT:
                rec.resent += 1
            elif k is EventKind.HEADERS:
                rec.headers_ns = ev.t_ns - sched
                rec.http_status = ev.status
            elif k is EventKind.USAGE:
                usage = ev.usage
            elif k is EventKind.DONE:
                rec.end_ns = ev.t_ns - sched
                done = True
        if not done:
            rec.outcome = Outcome.STREAM_ERROR
            rec.error_detail = "stream ended without a terminal event"
    except asyncio.CancelledError:
        rec.outcome = Outcome.CANCELLED
        rec.error_phase = shard.stop_reason or "cancelled"
        raise
    except Exception as exc:
        outcome, phase, status, detail = classify(exc)
        rec.outcome, rec.error_phase, rec.error_detail = outcome, phase, detail
        if status is not None:
            rec.http_status = status
        ra = getattr(exc, "retry_after_s", None)
        if isinstance(ra, (int, float)):
            rec.retry_after_s = float(ra)
    finally:
        if judge_dispatch:  # never on the wire: judged by when the generator began it
            check.dispatch_second.append((start - sched) / 1e6)
        if rec.end_ns is None:
            rec.end_ns = clock() - sched
        if any(cchoices):
            rec.chunk_choices = cchoices
        finish_tokens(rec, usage, chars)
        finish_audio(rec, usage, prompt)
        if shard.spec.store_content:
            rec.prompt_text = messages_text(messages)
            rec.response_text = "".join(texts)
        shard.completed += 1
        shard.tokens += rec.output_tokens - rec.client_tokens  # the server's usage, if it differs
        if rec.outcome is not Outcome.OK:
            shard.errors += 1
        if window.samples is not None:
            lv = window.level
            s0, s1 = window.start + int(lv.warmup_s * 1e9), window.end - int(lv.cooldown_s * 1e9)
            sample_metrics(window.samples, rec, sent >= 0 and s0 <= sent < s1)
        shard.emit(rec)
    if rec.http_status == 429 and attempt < shard.spec.pacing.retries and not shard.stopping:
        wait_s = min(rec.retry_after_s if rec.retry_after_s is not None else 1.0, 120.0)
        await shard.sleep_until(clock() + int(wait_s * 1e9))
        if not shard.stopping:
            return await execute(shard, index, window, sched, prompt, session, context, attempt + 1)
    return "".join(texts)


def finish_tokens(rec: RequestRecord, usage: Any, chars: list[int]) -> None:
    """Reconcile client counts with the server's usage (when given) and attribute tokens to
    chunks: if usage disagrees with one-token-per-delta, spread usage over chunks by text
    length (largest remainder), so per-token ITL uses the server's count."""
    client = sum(rec.chunk_tokens)
    rec.client_tokens = client
    rec.output_tokens = client
    if usage is None:
        return
    rec.usage_prompt_tokens = usage.prompt_tokens
    rec.usage_completion_tokens = usage.completion_tokens
    if usage.server is not None:
        st = usage.server
        rec.server_prompt_tokens, rec.server_prefill_ms = st.prompt_tokens, st.prefill_ms
        rec.server_decode_tokens, rec.server_decode_ms = st.decode_tokens, st.decode_ms
        rec.server_cached_tokens, rec.server_queue_ms = st.cached_tokens, st.queue_ms
    if rec.server_cached_tokens is None:  # usage's prompt_tokens_details.cached_tokens
        rec.server_cached_tokens = usage.cached_tokens
    if usage.reasoning_tokens is not None:
        rec.reasoning_tokens = usage.reasoning_tokens
    if usage.completion_tokens is None:
        return
    rec.output_tokens = usage.completion_tokens
    rec.token_source = TokenSource.USAGE
    n = len(rec.chunk_tokens)
    if n and usage.completion_tokens != client and usage.completion_tokens >= n:
        weights = np.asarray(chars, dtype=np.float64) + 1e-9
        share = weights / weights.sum() * usage.completion_tokens
        base = np.maximum(np.floor(share).astype(np.int64), 1)
        rest = usage.completion_tokens - int(base.sum())
        if rest > 0:
            order = np.argsort(-(share - np.floor(share)))
            base[order[:rest]] += 1
        elif rest < 0:  # the floor-at-1 overshot; take back from the largest
            for j in np.argsort(-base)[:-rest]:
                base[j] -= 1
        rec.chunk_tokens[:] = base.tolist()


def finish_audio(rec: RequestRecord, usage: Any, prompt: Prompt) -> None:
    """Speech out: the audio's decoded length and bytes (the API's USAGE); speech in: the
    upload's length and bytes (known before sending) and the transcript's words."""
    facts = usage.audio if usage is not None else None
    if facts is not None:
        rec.audio_ms, rec.audio_bytes = facts.duration_ms, facts.audio_bytes
        rec.transcript_words = facts.words
    clip = prompt.audio
    if clip is not None:
        rec.audio_ms, rec.audio_bytes = clip.duration_ms, len(clip.data)


def messages_text(messages: list[dict[str, str]]) -> str:
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in messages)
