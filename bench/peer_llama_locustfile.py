"""The peer side of bench/real_engine.py: a Locust FastHttpUser streaming OpenAI chat completions
from llama-server, with the same prompts peakload sends (a JSONL dataset, taken in order) and the
same output length (`ignore_eos`, `max_tokens`). Every SSE line is stamped with
`time.perf_counter_ns()` the moment geventhttpclient's `readline` hands it over (see
bench/peer_locustfile.py for why `readline` and not `iter_content`); a line with a non-empty
`"content"` delta is one token (llama-server sends one token per event). The final chunk's
`usage` and `timings` are kept: the server's own prompt length and time per token.

    locust -f bench/peer_llama_locustfile.py --headless -u N -r 1000 --run-time Ss \
        --stop-timeout 30 --host http://127.0.0.1:P

Settings from the environment: PEAKLOAD_PEER_OUT (.npz written at exit; required),
PEAKLOAD_PEER_DATASET (JSONL with "prompt" and "output_tokens"; required),
PEAKLOAD_PEER_MODEL (default "smollm2"), PEAKLOAD_PEER_EXTRA_BODY (JSON merged into each body).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from array import array
from pathlib import Path
from typing import Any

import numpy as np
from locust import FastHttpUser, constant, events, task

_ROWS = [
    json.loads(line)
    for line in Path(os.environ["PEAKLOAD_PEER_DATASET"]).read_text().splitlines()
    if line.strip()
]
_MODEL = os.environ.get("PEAKLOAD_PEER_MODEL", "smollm2")
_EXTRA = json.loads(os.environ.get("PEAKLOAD_PEER_EXTRA_BODY", "{}"))
_BODIES = [
    json.dumps(
        {
            "model": _MODEL,
            "messages": [{"role": "user", "content": row["prompt"]}],
            "max_tokens": int(row["output_tokens"]),
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            **_EXTRA,
        },
        separators=(",", ":"),
    )
    for row in _ROWS
]
_COUNTER = itertools.count()
_CONTENT = b'"content":"'
_EMPTY = b'"content":""'
_USAGE = b'"usage":{'
_DONE = b"data: [DONE]"

# One entry per finished request: send and end ns, ok, the server's prompt tokens and ms per
# token, the token stamps.
_SENT = array("q")
_END = array("q")  # when the [DONE] line arrived (-1 without one)
_OK = array("b")
_PROMPT_N = array("i")
_COMPLETION_N = array("i")  # the server's usage.completion_tokens (-1 without usage)
_SERVER_MS_PER_TOKEN = array("d")
_LENS = array("i")
_STAMPS = array("q")
_META: dict[str, Any] = {}


class LlamaChatUser(FastHttpUser):
    """A closed-loop user: send, read the whole stream, send again (no think time)."""

    wait_time = constant(0)
    concurrency = 1  # one connection per user, like one stream
    network_timeout = 120.0
    connection_timeout = 10.0

    @task
    def chat(self) -> None:
        n = next(_COUNTER)
        body = _BODIES[n % len(_BODIES)]
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        stamps = array("q")
        ok, prompt_n, completion_n, per_token, end = False, -1, -1, float("nan"), -1
        clock = time.perf_counter_ns
        sent = clock()
        try:
            resp: Any = self.client.post(
                "/v1/chat/completions", data=body, headers=headers, stream=True, name="chat"
            )
            raw = getattr(resp, "_response", None)
            if resp.status_code == 200 and raw is not None:
                readline = raw.readline
                while True:
                    line = readline(b"\n")
                    t = clock()
                    if not line:
                        break
                    if _CONTENT in line and _EMPTY not in line:
                        stamps.append(t)
                    elif _USAGE in line:
                        final = json.loads(line[len(b"data: ") :])
                        prompt_n = int(final["usage"]["prompt_tokens"])
                        completion_n = int(final["usage"]["completion_tokens"])
                        timings = final.get("timings", {})
                        per_token = float(timings.get("predicted_per_token_ms", "nan"))
                    elif line.startswith(_DONE):
                        ok, end = True, t
        except Exception:  # a broken stream is a failed request, kept with its partial stamps
            ok = False
        _SENT.append(sent)
        _END.append(end)
        _OK.append(1 if ok else 0)
        _PROMPT_N.append(prompt_n)
        _COMPLETION_N.append(completion_n)
        _SERVER_MS_PER_TOKEN.append(per_token)
        _LENS.append(len(stamps))
        _STAMPS.extend(stamps)


def _on_start(**_: Any) -> None:
    _META["start_ns"] = time.perf_counter_ns()


def _on_quit(**_: Any) -> None:
    _META["quit_ns"] = time.perf_counter_ns()
    np.savez(
        Path(os.environ["PEAKLOAD_PEER_OUT"]),
        sent=np.frombuffer(_SENT, dtype=np.int64),
        end=np.frombuffer(_END, dtype=np.int64),
        ok=np.frombuffer(_OK, dtype=np.int8),
        prompt_n=np.frombuffer(_PROMPT_N, dtype=np.int32),
        completion_n=np.frombuffer(_COMPLETION_N, dtype=np.int32),
        server_ms_per_token=np.frombuffer(_SERVER_MS_PER_TOKEN, dtype=np.float64),
        lens=np.frombuffer(_LENS, dtype=np.int32),
        stamps=np.frombuffer(_STAMPS, dtype=np.int64),
        meta=np.array(json.dumps(_META)),
    )


events.test_start.add_listener(_on_start)  # type: ignore[no-untyped-call]
events.quitting.add_listener(_on_quit)  # type: ignore[no-untyped-call]
