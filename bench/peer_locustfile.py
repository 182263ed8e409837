"""The peer side of bench/generator_accuracy.py: a Locust FastHttpUser that streams OpenAI chat
completions from the simulated engine and stamps every SSE line with `time.perf_counter_ns()`
(CLOCK_MONOTONIC, comparable with the engine's truth log) as geventhttpclient hands it over.

Run by the benchmark, headless, one process (`locust -f bench/peer_locustfile.py --headless -u N
-r N --run-time Ss --host http://127.0.0.1:P`). Settings come from the environment:
  PEAKLOAD_PEER_OUT        where to write the stamps at exit (.npz; required)
  PEAKLOAD_PEER_WARMUP_S   seconds after test start before the CPU window opens (default 1)
  PEAKLOAD_PEER_MEASURE_S  length of the CPU window in seconds (default 8)
  PEAKLOAD_PEER_PROMPT_WORDS, PEAKLOAD_PEER_MAX_TOKENS  the request (default 64, 128)

Streaming API: locust 2.47's `FastResponse.iter_content(chunk_size)` calls geventhttpclient's
`read(chunk_size)`, which blocks until `chunk_size` bytes have arrived (1024 by default, so it
would stamp ~6 events at once); the response's own `readline()` returns each line as soon as its
bytes are in, so that is what this user iterates (`response._response.readline`). Each line is
stamped the moment `readline` returns it, before anything looks at it; a line carrying a non-empty
`"content"` delta counts as one token (the engine sends one token per event here).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from array import array
from pathlib import Path
from typing import Any

import gevent
import numpy as np
from locust import FastHttpUser, constant, events, task

PID = os.getpid()
_COUNTER = itertools.count()
_WORDS = ("the", "of", "and", "to", "in", "is", "was", "he", "for", "it", "with", "as", "on")
_PROMPT_WORDS = int(os.environ.get("PEAKLOAD_PEER_PROMPT_WORDS", "64"))
_MAX_TOKENS = int(os.environ.get("PEAKLOAD_PEER_MAX_TOKENS", "128"))
BODY = json.dumps(
    {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": " ".join(_WORDS[i % len(_WORDS)] for i in range(_PROMPT_WORDS)),
            }
        ],
        "max_tokens": _MAX_TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True},
    },
    separators=(",", ":"),
)
_CONTENT = b'{"content":"'
_DONE = b"data: [DONE]"

# One entry per finished request: (id number, send ns, ok, token stamps). Compact arrays, so the
# stamps kept for the comparison cost ~8 bytes per token, not an object each.
_IDS = array("q")
_SENT = array("q")
_OK = array("b")
_LENS = array("i")
_STAMPS = array("q")
_WINDOW: dict[str, Any] = {}


def _rss_kib(field: str) -> int:
    """VmRSS / VmHWM of this process in KiB, from /proc/self/status."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class StreamingChatUser(FastHttpUser):
    """A closed-loop user: send, read the whole stream, send again (no think time)."""

    wait_time = constant(0)
    concurrency = 1  # one connection per user, like one stream
    network_timeout = 60.0
    connection_timeout = 10.0

    @task
    def chat(self) -> None:
        n = next(_COUNTER)
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "x-peakload-request-id": f"locust-{PID}-{n}",
        }
        stamps = array("q")
        ok = False
        clock = time.perf_counter_ns
        sent = clock()
        resp: Any = self.client.post(
            "/v1/chat/completions", data=BODY, headers=headers, stream=True, name="chat"
        )
        raw = getattr(resp, "_response", None)
        try:
            if resp.status_code == 200 and raw is not None:
                readline = raw.readline
                while True:
                    line = readline(b"\n")
                    t = clock()
                    if not line:
                        break
                    if _CONTENT in line:
                        stamps.append(t)
                    elif line.startswith(_DONE):
                        ok = True
        except Exception:  # a broken stream is a failed request, kept with its partial stamps
            ok = False
        _IDS.append(n)
        _SENT.append(sent)
        _OK.append(1 if ok else 0)
        _LENS.append(len(stamps))
        _STAMPS.extend(stamps)


def _runq_wait_ns() -> int:
    """ns this (main) thread spent runnable but waiting for a CPU, from schedstat."""
    with open("/proc/thread-self/schedstat", encoding="ascii") as fh:
        return int(fh.read().split()[1])


def _stamp_bytes() -> int:
    return sum(a.itemsize * len(a) for a in (_IDS, _SENT, _OK, _LENS, _STAMPS))


def _window(warmup_s: float, measure_s: float) -> None:
    """CPU time and wall time (monotonic) of this process over [start+warmup, +measure]."""
    gevent.sleep(warmup_s)
    _WINDOW["cpu0_ns"] = time.process_time_ns()
    _WINDOW["runq0_ns"] = _runq_wait_ns()
    _WINDOW["w0_ns"] = time.perf_counter_ns()
    gevent.sleep(measure_s)
    _WINDOW["cpu1_ns"] = time.process_time_ns()
    _WINDOW["runq1_ns"] = _runq_wait_ns()
    _WINDOW["w1_ns"] = time.perf_counter_ns()
    _WINDOW["hwm_kib_at_window_end"] = _rss_kib("VmHWM")
    _WINDOW["stamp_bytes_at_window_end"] = _stamp_bytes()


def _on_start(**_: Any) -> None:
    _WINDOW["start_ns"] = time.perf_counter_ns()
    _WINDOW["rss_start_kib"] = _rss_kib("VmRSS")
    warmup = float(os.environ.get("PEAKLOAD_PEER_WARMUP_S", "1"))
    measure = float(os.environ.get("PEAKLOAD_PEER_MEASURE_S", "8"))
    gevent.spawn(_window, warmup, measure)


def _on_quit(**_: Any) -> None:
    out = os.environ.get("PEAKLOAD_PEER_OUT")
    if not out:
        return
    _WINDOW["quit_ns"] = time.perf_counter_ns()
    _WINDOW["hwm_kib"] = _rss_kib("VmHWM")
    _WINDOW["stamp_bytes"] = sum(a.itemsize * len(a) for a in (_IDS, _SENT, _OK, _LENS, _STAMPS))
    _WINDOW["pid"] = PID
    np.savez(
        Path(out),
        ids=np.frombuffer(_IDS, dtype=np.int64),
        sent=np.frombuffer(_SENT, dtype=np.int64),
        ok=np.frombuffer(_OK, dtype=np.int8),
        lens=np.frombuffer(_LENS, dtype=np.int32),
        stamps=np.frombuffer(_STAMPS, dtype=np.int64),
        meta=np.array(json.dumps(_WINDOW)),
    )


events.test_start.add_listener(_on_start)  # type: ignore[no-untyped-call]
events.quitting.add_listener(_on_quit)  # type: ignore[no-untyped-call]
