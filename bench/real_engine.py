"""peakload beside a peer (Locust FastHttpUser) against a real engine: llama.cpp's `llama-server`
serving SmolLM2-135M (deploy/local/llama.sh), or vLLM for CPUs serving the same model
(`--engine vllm`, deploy/local/vllm.sh), pinned to its own core, the client on the other.

    .venv/bin/python bench/real_engine.py [--engine llamacpp|vllm] [--concurrency 4]
        [--duration 30] [--rounds 2]

llama-server starts in about a second: a fresh one per run. vLLM takes about a minute: one
server for all runs, and prompts distinct across runs (each run takes its own slice of the
dataset), so no run reads another's prefix cache (only the chat template's few tokens repeat).

Both tools send the same prompts (a JSONL dataset of distinct prompts, each exactly
--prompt-tokens tokens of user text by the server's own /tokenize; the chat template adds a few),
the same output length (`ignore_eos` with `max_tokens`), closed loop at the same concurrency,
each against a fresh server (nothing cached from the other tool's run), tools alternating per
round. The server's usage is checked: prompt tokens per request as the server counted them.

Metrics, the same definitions for both (peakload's are its own summary, `peakload run --json`;
Locust's are computed here from its raw stamps), over requests sent in the steady window
[start + warmup, start + duration - cooldown):
  TTFT = first non-empty content event - send; ITL = gaps between consecutive content events
  (one token each here; empty-content events, which llama-server sends for tokens that render
  as nothing, are not tokens to either tool); E2E = end of the stream ([DONE]) - send; output
  tok/s = the output tokens (server usage) of the requests in the window / window (peakload's
  `output_token_rate`); errors = failed requests of the whole run.
The server's own view of each run: decode time per token and stream from /metrics
(llama.cpp: delta tokens_predicted_seconds_total / delta tokens_predicted_total; vLLM: delta
sum / count of vllm:inter_token_latency_seconds).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.engine.workload import _VOCAB  # noqa: E402
from tests.support.engine import (  # noqa: E402
    LlamaServer,
    engine_paths,
    server_ms_per_token,
    split_cpus,
    start_llama,
)
from tests.support.stores import FreshDatabase  # noqa: E402
from tests.support.vllm import VllmServer, server_itl_ms, start_vllm, vllm_paths  # noqa: E402

TOOLS = ("peakload", "locust")  # also "peakload-httpx": peakload on its httpx transport
N_PROMPTS = 500
# no prefix reuse between requests: prefill every prompt (llama.cpp's switch; vLLM's prompts
# are distinct, see above)
EXTRA_BODY: dict[str, dict[str, Any]] = {"llamacpp": {"cache_prompt": False}, "vllm": {}}
Server = LlamaServer | VllmServer


def _tokens(server: Server, text: str) -> int:
    if isinstance(server, VllmServer):
        body: dict[str, Any] = {"model": server.model, "prompt": text, "add_special_tokens": False}
    else:
        body = {"content": text}
    r = httpx.post(server.url + "/tokenize", json=body, timeout=10.0)
    return len(r.raise_for_status().json()["tokens"])


def make_dataset(server: Server, path: Path, prompt_tokens: int, output_tokens: int) -> None:
    """N_PROMPTS distinct prompts of exactly `prompt_tokens` server tokens each: words that are
    one token after a space, checked whole by /tokenize (the rare merge is dropped)."""
    single = [w for w in _VOCAB if _tokens(server, " " + w) == 1]
    rng = np.random.default_rng(0xE461)
    lines: list[str] = []
    while len(lines) < N_PROMPTS:
        text = " ".join(rng.choice(single, size=prompt_tokens))
        if _tokens(server, text) == prompt_tokens:
            lines.append(json.dumps({"prompt": text, "output_tokens": output_tokens}))
    path.write_text("\n".join(lines) + "\n")


def _pct(values: Any, q: float = 50) -> float:
    v = np.asarray(values, dtype=np.float64)
    return float(np.percentile(v, q)) if v.size else float("nan")


def _pin(cpus: str | None) -> list[str]:
    return ["taskset", "-c", cpus] if cpus else []


# ------------------------------------------------------------------ one run per tool


# no probe, no preflight: the server's histograms between the scrapes around a run then hold
# the run's own requests only
ONLY = ("--no-probe", "--no-preflight")


def run_peakload(
    server: Server,
    dataset: Path,
    args: argparse.Namespace,
    cpus: str | None,
    tmp: Path,
    transport: str = "auto",
) -> dict[str, Any]:
    spec = tmp / "real-engine.toml"
    spec.write_text(
        f"""
name = "bench-real-engine"
[target]
api = "openai-chat"
base_url = "{server.base_url}"
model = "smollm2"
transport = "{transport}"
ignore_eos = true
extra_body = {json.dumps(EXTRA_BODY[args.engine]).replace('": ', '" = ')}
[workload]
dataset = "{dataset}"
output_tokens = {args.output_tokens}
[load]
concurrency = [{args.concurrency}]
duration_s = {args.duration}
warmup_s = {args.warmup}
cooldown_s = {args.cooldown}
[labels]
engine = "{args.engine}"
model = "SmolLM2-135M-Instruct"
quantization = "{"bf16" if args.engine == "vllm" else "Q4_1"}"
"""
    )
    admin = os.environ.get("PEAKLOAD_BENCH_URL") or os.environ.get("PEAKLOAD_TEST_TIMESCALE_URL")
    if not admin:
        raise SystemExit("set PEAKLOAD_BENCH_URL (or PEAKLOAD_TEST_TIMESCALE_URL)")
    db = FreshDatabase(admin)
    out = tmp / "summary.json"
    env = {
        **os.environ,
        "PEAKLOAD_DATABASE_URL": db.url,
        "PEAKLOAD_HOME": str(tmp / "home"),
        "PEAKLOAD_ALLOW_PRIVATE_TARGETS": "1",
    }
    try:
        proc = subprocess.run(
            [*_pin(cpus), sys.executable, "-m", "ui", "run", str(spec), "--json", str(out), *ONLY],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=args.duration + 300,
            check=False,
        )
        if not out.exists():
            raise SystemExit(f"peakload run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        summary = json.loads(out.read_text())
        with psycopg.connect(db.url) as conn:
            prompt = conn.execute(
                "SELECT min(usage_prompt_tokens), max(usage_prompt_tokens), "
                "min(output_tokens), max(output_tokens) FROM requests "
                "WHERE run_id = %s AND outcome = 'ok'",
                (summary["run_id"],),
            ).fetchone()
    finally:
        db.drop()
    lv = summary["levels"][0]
    assert prompt is not None
    return {
        "exit_code": proc.returncode,
        "valid": summary.get("valid"),
        "invalid_reasons": summary.get("invalid_reasons"),
        "requests": lv["requests_ok"] + lv["requests_failed"],
        "errors": lv["requests_failed"],
        "failures_by_kind": lv.get("failures_by_kind"),
        "window_requests": lv["samples"]["ttft_ms"],
        "ttft_p50_ms": lv["ttft_ms"]["p50"],
        "itl_p50_ms": lv["itl_ms"]["p50"],
        "e2e_p50_ms": lv["e2e_ms"]["p50"],
        "output_tok_s": lv["output_tokens_per_s"],
        "server_prompt_tokens": [prompt[0], prompt[1]],
        "output_tokens": [prompt[2], prompt[3]],
    }


def run_locust(
    server: Server, dataset: Path, args: argparse.Namespace, cpus: str | None, tmp: Path
) -> dict[str, Any]:
    out = tmp / "locust.npz"
    env = {
        **os.environ,
        "PEAKLOAD_PEER_OUT": str(out),
        "PEAKLOAD_PEER_DATASET": str(dataset),
        "PEAKLOAD_PEER_EXTRA_BODY": json.dumps(EXTRA_BODY[args.engine]),
    }
    locust = str(Path(sys.executable).parent / "locust")
    cmd = [
        *_pin(cpus),
        locust,
        "-f",
        str(ROOT / "bench" / "peer_llama_locustfile.py"),
        "--headless",
        "--only-summary",
        "-u",
        str(args.concurrency),
        "-r",
        "1000",
        "--run-time",
        f"{round(args.duration)}s",
        "--stop-timeout",
        "60",
        "--host",
        server.url,
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=args.duration + 120, check=False
    )
    if not out.exists():
        raise SystemExit(f"locust failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    d = np.load(out)
    # a token per content event is how this peer counts: say where the server's usage disagrees
    odd = [
        (i, int(d["lens"][i]), int(d["completion_n"][i]))
        for i in np.flatnonzero(d["ok"].astype(bool) & (d["lens"] != d["completion_n"]))
    ]
    if odd:
        print(f"locust: content events != usage.completion_tokens (i, events, usage): {odd}")
    meta = json.loads(str(d["meta"]))
    sent, ok, lens, stamps = d["sent"], d["ok"].astype(bool), d["lens"], d["stamps"]
    starts = np.r_[0, np.cumsum(lens)[:-1]]
    w0 = meta["start_ns"] + int(args.warmup * 1e9)
    w1 = meta["start_ns"] + int((args.duration - args.cooldown) * 1e9)
    window = (sent >= w0) & (sent < w1)
    ttft, e2e, itl = [], [], []
    for i in np.flatnonzero(window & ok & (lens > 0)):
        s = stamps[starts[i] : starts[i] + lens[i]]
        ttft.append((s[0] - sent[i]) / 1e6)
        e2e.append((d["end"][i] - sent[i]) / 1e6)
        itl.extend((np.diff(s) / 1e6).tolist())
    # peakload's definition (analysis.metrics.output_token_rate): the output tokens of every
    # request sent in the window, by the server's usage where it came, over the window
    tokens = np.where(d["completion_n"] >= 0, d["completion_n"], lens)
    produced = int(tokens[window].sum())
    prompt_n = d["prompt_n"][ok]
    return {
        "exit_code": proc.returncode,
        "requests": int(sent.size),
        "errors": int((~ok).sum()),
        "window_requests": int((window & ok).sum()),
        "ttft_p50_ms": _pct(ttft),
        "itl_p50_ms": _pct(itl),
        "e2e_p50_ms": _pct(e2e),
        "output_tok_s": produced / ((w1 - w0) / 1e9),
        "server_prompt_tokens": [int(prompt_n.min()), int(prompt_n.max())] if prompt_n.size else [],
        "output_tokens": [int(lens[ok].min()), int(lens[ok].max())] if ok.any() else [],
        "server_ms_per_token_p50_from_timings": _pct(d["server_ms_per_token"][ok]),
    }


def run_peakload_httpx(
    server: Server, dataset: Path, args: argparse.Namespace, cpus: str | None, tmp: Path
) -> dict[str, Any]:
    return run_peakload(server, dataset, args, cpus, tmp, transport="httpx")


RUNNERS = {
    "peakload": run_peakload,
    "peakload-httpx": run_peakload_httpx,
    "locust": run_locust,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--cooldown", type=float, default=2.0)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--engine", choices=("llamacpp", "vllm"), default="llamacpp")
    args = ap.parse_args()
    paths = engine_paths() if args.engine == "llamacpp" else vllm_paths()
    if paths is None:
        raise SystemExit(
            "PEAKLOAD_TEST_LLAMA_SERVER / PEAKLOAD_TEST_LLAMA_MODEL are not set: "
            'eval "$(deploy/local/llama.sh)"'
            if args.engine == "llamacpp"
            else "PEAKLOAD_TEST_VLLM_PYTHON / PEAKLOAD_TEST_VLLM_MODEL are not set: "
            'eval "$(deploy/local/vllm.sh)"'
        )
    server_cpus, client_cpus = split_cpus()
    start = start_llama if args.engine == "llamacpp" else start_vllm
    tools = [t for t in args.tools.split(",") if t]
    load_start = os.getloadavg()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix=f"peakload-bench-{args.engine}-") as tmp_s:
        tmp = Path(tmp_s)
        dataset = tmp / "prompts.jsonl"
        shared = start(*paths, tmp, server_cpus) if args.engine == "vllm" else None
        with shared or contextlib.nullcontext() as kept:
            runs = [
                (r, t) for r in range(args.rounds) for t in (tools if r % 2 == 0 else tools[::-1])
            ]
            with _server(kept, start, paths, tmp, server_cpus) as server:
                make_dataset(server, dataset, args.prompt_tokens, args.output_tokens)
            for i, (rnd, tool) in enumerate(runs):
                run_dir = tmp / f"{tool}-{rnd}"
                run_dir.mkdir()
                part = _slice(dataset, i, len(runs), args.output_tokens, run_dir)
                with _server(kept, start, paths, run_dir, server_cpus) as server:
                    before = server.metrics()
                    res = RUNNERS[tool](server, part, args, client_cpus, run_dir)
                    after = server.metrics()
                res |= {"tool": tool, "round": rnd}
                res["server_ms_per_token"] = (
                    server_itl_ms(before, after)
                    if args.engine == "vllm"
                    else server_ms_per_token(before, after)
                )
                # the server's speed drifts between runs on a shared machine: each tool's ITL
                # against the server's own time per token in the same run does not
                res["itl_over_server"] = res["itl_p50_ms"] / res["server_ms_per_token"]
                results.append(res)
                print(json.dumps(res), flush=True)
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        "?",
    )
    report = {
        "engine": args.engine,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "server_cpus": server_cpus,
        "client_cpus": client_cpus,
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "args": vars(args),
        "runs": results,
    }
    print_table(results)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}))


def _slice(dataset: Path, i: int, n: int, output_tokens: int, run_dir: Path) -> Path:
    """The i-th of n disjoint slices of the dataset, each row asking `output_tokens`."""
    rows = [json.loads(x) for x in dataset.read_text().splitlines() if x.strip()]
    part = run_dir / "prompts.jsonl"
    mine = [{**r, "output_tokens": output_tokens} for r in rows[i::n]]
    part.write_text("".join(json.dumps(r) + "\n" for r in mine))
    return part


@contextlib.contextmanager
def _server(
    kept: Server | None, start: Any, paths: tuple[str, str], run_dir: Path, cpus: str | None
) -> Iterator[Server]:
    """The shared server (vLLM), or a fresh one for this run (llama.cpp)."""
    if kept is not None:
        yield kept
    else:
        with start(*paths, run_dir, cpus) as server:
            yield server


def print_table(results: list[dict[str, Any]]) -> None:
    cols = (
        "ttft_p50_ms",
        "itl_p50_ms",
        "e2e_p50_ms",
        "output_tok_s",
        "server_ms_per_token",
        "itl_over_server",
    )
    print("| tool | round | requests | errors | " + " | ".join(cols) + " | prompt tok | out tok |")
    print("|---" * (len(cols) + 6) + "|")
    results = sorted(results, key=lambda r: (r["tool"], r["round"]))
    for r in results:
        vals = " | ".join(f"{r[c]:.2f}" for c in cols)
        print(
            f"| {r['tool']} | {r['round']} | {r['requests']} | {r['errors']} | {vals} | "
            f"{r['server_prompt_tokens']} | {r['output_tokens']} |"
        )


if __name__ == "__main__":
    main()
