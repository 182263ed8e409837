"""A real engine for the tests: llama.cpp's `llama-server` serving SmolLM2-135M on a free loopback
port (binary and model from deploy/local/llama.sh, named by PEAKLOAD_TEST_LLAMA_SERVER and
PEAKLOAD_TEST_LLAMA_MODEL), alone or behind an HTTP proxy with a gateway's connection faults.
The second real engine, vLLM, lives in tests/support/vllm.py; its fixture is registered here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.httpproxy import HttpProxy
from tests.support.servers import LocalServer, healthy, launch, serving
from tests.support.vllm import vllm  # the second real engine's fixture, registered here

__all__ = ["vllm"]

SERVER_ENV = "PEAKLOAD_TEST_LLAMA_SERVER"
MODEL_ENV = "PEAKLOAD_TEST_LLAMA_MODEL"
SLOTS = 4  # --parallel: requests beyond it queue
CTX_SIZE = 8192  # shared by the slots: 2048 tokens each
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


@dataclass
class LlamaServer(LocalServer):
    """A running llama-server (its Prometheus counters and gauges, `llamacpp:...`, unlabelled)."""

    cpus: str | None = None  # the CPUs it is pinned to, or None


def server_ms_per_token(before: dict[str, float], after: dict[str, float]) -> float:
    """The server's own decode time per generated token and stream between two scrapes:
    delta tokens_predicted_seconds_total / delta tokens_predicted_total, in ms."""
    tokens = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    seconds = (
        after["llamacpp:tokens_predicted_seconds_total"]
        - before["llamacpp:tokens_predicted_seconds_total"]
    )
    if tokens <= 0:
        raise AssertionError("the server predicted no tokens between the two scrapes")
    return 1000.0 * seconds / tokens


def engine_paths() -> tuple[str, str] | None:
    """(llama-server, model.gguf) from the environment, or None when either is unset."""
    binary = os.environ.get(SERVER_ENV, "").strip()
    model = os.environ.get(MODEL_ENV, "").strip()
    return (binary, model) if binary and model else None


def split_cpus() -> tuple[str | None, str | None]:
    """(server CPUs, client CPUs) for taskset: the last CPU for the server and the rest for the
    client, so neither steals the other's core; (None, None) where that is not possible."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return None, None
    if len(cpus) < 2 or shutil.which("taskset") is None:
        return None, None
    return str(cpus[-1]), ",".join(str(c) for c in cpus[:-1])


def llama_command(
    binary: str, model: str, port: int, cpus: str | None = None, extra: Sequence[str] = ()
) -> list[str]:
    cmd = [
        binary,
        "--model",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--parallel",
        str(SLOTS),
        "--ctx-size",
        str(CTX_SIZE),
        "--threads",
        "1",
        "--threads-batch",
        "1",
        "--metrics",
        *extra,
    ]
    return ["taskset", "-c", cpus, *cmd] if cpus else cmd


@contextlib.contextmanager
def start_llama(
    binary: str, model: str, log_dir: Path, cpus: str | None = None, extra: Sequence[str] = ()
) -> Iterator[LlamaServer]:
    """Start llama-server (pinned to `cpus` if given; `extra` arguments appended) and wait until
    /health answers 200 (the model is loaded); stop it, and only it, on exit. RuntimeError with
    its log if it dies."""
    for path, what in ((binary, SERVER_ENV), (model, MODEL_ENV)):
        if not Path(path).is_file():
            raise RuntimeError(f"{what}={path} does not exist (run deploy/local/llama.sh)")
    base = launch(
        "llama-server",
        lambda port: llama_command(binary, model, port, cpus, extra),
        log_dir,
        stop_timeout_s=STOP_TIMEOUT_S,
    )
    server = LlamaServer(**vars(base), cpus=cpus)
    with serving(server, healthy, START_TIMEOUT_S):
        yield server


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    """One llama-server per test module (the model loads in about a second), pinned to its own
    CPU where there are two or more. Skipped only when the engine is not configured."""
    paths = engine_paths()
    if paths is None:
        pytest.skip(
            f"{SERVER_ENV} / {MODEL_ENV} are not set (build and install the engine: "
            'eval "$(deploy/local/llama.sh)")'
        )
    server_cpus, _ = split_cpus()
    with (
        tempfile.TemporaryDirectory(prefix="peakload-llama-") as tmp,
        start_llama(*paths, Path(tmp), server_cpus) as server,
    ):
        yield server


@pytest.fixture(params=[True, False], ids=["says-close", "silent-close"])
def llama_close_proxy(llama: LlamaServer, request: pytest.FixtureRequest) -> Iterator[HttpProxy]:
    """llama-server behind a gateway that closes the client's connection after every response,
    saying `Connection: close` first (says-close) or not (silent-close)."""
    announce = bool(request.param)
    with HttpProxy(
        "127.0.0.1", llama.port, close_after_response=True, announce_close=announce
    ) as proxy:
        yield proxy


IDLE_TIMEOUT_S = 0.4


@pytest.fixture
def llama_idle_proxy(llama: LlamaServer) -> Iterator[HttpProxy]:
    """llama-server behind a keep-alive gateway that silently closes a client connection idle
    for IDLE_TIMEOUT_S between requests (it says nothing about its timeout, as most don't)."""
    with HttpProxy("127.0.0.1", llama.port, idle_timeout_s=IDLE_TIMEOUT_S) as proxy:
        yield proxy
