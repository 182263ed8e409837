"""Locust mode: `LLMUser`, a Locust user whose requests are peakload's (same spec, target, stamps
and records), and the listeners that make one Locust test one peakload run: the master (or a
single process) opens the run, sends its id to every worker and records the user count's shape as
levels; each process that runs users drives a peakload engine process (loadgen.locust.engine).

Layering: this module imports neither Celery nor a database driver. Where runs and records go is a
`RunStore` a workers/ module installs (`workers.locust_store.install()`), which also names the
engine's command, so the engine's records reach the store from the engine process itself.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar, Protocol, cast

import gevent
from locust import User, constant, events, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner

from loadgen.errors import PeakloadError, SpecError
from loadgen.locust.client import EngineClient, LLMResponse, RequestFailed
from loadgen.locust.spec import locust_spec
from loadgen.runspec.secrets import literal_secrets
from loadgen.runspec.spec import RunSpec

__all__ = ["LLMResponse", "LLMUser", "RequestFailed", "RunStore", "use_store"]

log = logging.getLogger("peakload.locust")

RUN_MESSAGE = "peakload_run"
LEVEL_MESSAGE = "peakload_level"
FAILED_MESSAGE = "peakload_shard_failed"  # worker -> master: its engine could not start
FINISH_WAIT_S = 90.0  # the master waiting for every worker's shard to end
LEVEL_POLL_S = 0.05


class RunStore(Protocol):
    """What a store does with a Locust test (installed with `use_store`)."""

    engine_command: list[str]  # the engine process; `--fd N` is appended

    def begin(self, run_id: str, spec: RunSpec, *, mode: str) -> None: ...

    def level(self, run_id: str, row: dict[str, Any]) -> None: ...

    def finish(
        self,
        run_id: str,
        levels: list[dict[str, Any]],
        expected_shards: list[str],
        failed_shards: dict[str, str],
        wait_s: float,
    ) -> tuple[str, list[str]]:
        """End the run; its status and, when it is not valid, why."""
        ...


_store: RunStore | None = None


def use_store(store: RunStore) -> None:
    """Send every Locust test's run and records to `store` (workers.locust_store installs it)."""
    global _store  # one per Locust process, as Locust's own `events` are
    _store = store


class LLMUser(User):
    """A Locust user sending peakload requests, closed loop: by default each user sends the
    spec's workload one request after another (`journey`); override `journey` for a custom user
    journey built from `chat()`.

    Configure with `spec = "my.toml"` (a peakload spec, relative to the locustfile; its [load]
    is ignored, Locust's users make the load) or with the plain attributes below and `host`
    (Locust's `--host`, the base URL such as http://127.0.0.1:8000/v1; it also overrides a
    spec's `target.base_url`)."""

    abstract = True
    wait_time = constant(0)
    spec: ClassVar[str | None] = None
    api: ClassVar[str] = "openai-chat"
    model: ClassVar[str] = "default"
    api_key_env: ClassVar[str | None] = None
    prompt_tokens: ClassVar[int | dict[str, Any]] = 128
    output_tokens: ClassVar[int | dict[str, Any]] = 128
    name: ClassVar[str] = "locust"  # the run's name in the store
    request_name: ClassVar[str] = "chat"  # the name column of Locust's statistics

    _session_ids = itertools.count()

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self._session = next(LLMUser._session_ids)
        self._turn = 0

    @classmethod
    def peakload_spec(cls, host: str | None = None) -> RunSpec:
        """The run spec this class describes; `SpecError` naming the file and field."""
        path = None
        if cls.spec is not None:
            path = Path(cls.spec)
            if not path.is_absolute():  # relative to the file of the class that names it
                owner = next(k for k in cls.__mro__ if "spec" in vars(k))
                path = Path(inspect.getfile(owner)).resolve().parent / path
        attrs = {
            "name": cls.name,
            "api": cls.api,
            "model": cls.model,
            "api_key_env": cls.api_key_env,
            "prompt_tokens": cls.prompt_tokens,
            "output_tokens": cls.output_tokens,
        }
        return locust_spec(path, attrs, host, where=f"{cls.__name__} attributes")

    @task
    def _journey_task(self) -> None:
        self.journey()

    def journey(self) -> None:
        """One iteration of this user's loop: one request of the spec's workload."""
        self.chat()

    def new_conversation(self) -> None:
        """The next `chat(session=True)` opens a new conversation (a new session id, turn 0)."""
        self._session = next(LLMUser._session_ids)
        self._turn = 0

    def chat(
        self,
        messages: list[dict[str, str]] | None = None,
        *,
        max_tokens: int | None = None,
        session: bool = False,
    ) -> LLMResponse:
        """Send one request and wait for its end. `messages` replaces the workload's prompt;
        `session=True` makes it the next turn of this user's conversation (its record carries
        the session and turn) and returns the answer's text."""
        engine = _engine
        if engine is None:
            raise PeakloadError("no peakload engine in this process (is it a Locust master?)")
        body: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens}
        if session:
            body["session"] = [self._session, self._turn]
            self._turn += 1
        try:
            result: LLMResponse = engine.request(body, self.request_name).get()
        except PeakloadError:  # the engine failed: said once, and the test is stopping
            raise StopUser() from None
        return result


# ---------------------------------------------------------------- one test, one run

_engine: EngineClient | None = None


class _Conductor:
    """On the master (or the only process): the run's id, its levels and its end."""

    def __init__(self, env: Environment, store: RunStore) -> None:
        self.env, self.store = env, store
        self.run_id = ""
        self.levels: list[dict[str, Any]] = []
        self.level_mono = 0
        self.shards: list[str] = []
        self.failed: dict[str, str] = {}  # shard -> why its engine never ran it
        self.tracker: gevent.Greenlet[Any, Any] | None = None
        self.finisher: gevent.Greenlet[Any, Any] | None = None

    def spec(self) -> RunSpec:
        classes = [c for c in self.env.user_classes if issubclass(c, LLMUser)]
        if not classes:
            raise SpecError("the locustfile has no LLMUser class", where="locustfile")
        specs = [c.peakload_spec(self.env.host or c.host) for c in classes]
        if any(s.public_dict() != specs[0].public_dict() for s in specs[1:]):
            raise SpecError(
                "LLMUser classes describe different specs: one Locust test is one peakload run "
                "with one target and workload",
                where="locustfile",
            )
        literal = literal_secrets(specs[0].target)
        if literal:  # engines get the spec redacted (loadgen.runspec.secrets), even in this process
            raise SpecError(
                f"{', '.join(literal)} would reach the engines redacted; give each value by "
                "reference (headers_env) or declare it public (public_headers, public_query)",
                where="locustfile",
            )
        return specs[0]

    def begin(self) -> None:
        runner = self.env.runner
        assert runner is not None
        spec = self.spec()
        self.run_id = str(uuid.uuid4())
        self.levels, self.shards, self.failed = [], [], {}
        distributed = isinstance(runner, MasterRunner)
        self.store.begin(self.run_id, spec, mode="distributed" if distributed else "local")
        users = int(getattr(runner, "target_user_count", 0) or 0)
        self._new_level(users, broadcast=False)
        start = {
            "run_id": self.run_id,
            "spec": spec.public_dict(),
            "level": {"index": 0, "users": users, "steady": False},
        }
        if distributed:
            assert isinstance(runner, MasterRunner)
            for client in runner.clients.all:
                self.send_run(client.id, start)
        else:
            self.shards.append("locust")
            assert _engine is not None
            _engine.start({**start, "shard_id": "locust", "seed": 0})
        log.info("peakload: run %s (Locust test) started", self.run_id)
        self.tracker = gevent.spawn(self._track)

    def send_run(self, client_id: str, start: dict[str, Any]) -> None:
        runner = self.env.runner
        assert isinstance(runner, MasterRunner)
        index = int(cast(Any, runner).get_worker_index(client_id))
        shard = f"locust-w{index}"
        if shard not in self.shards:
            self.shards.append(shard)
        runner.send_message(
            RUN_MESSAGE, {**start, "shard_id": shard, "seed": index}, client_id=client_id
        )

    def _track(self) -> None:
        runner = self.env.runner
        while True:
            gevent.sleep(LEVEL_POLL_S)
            users = int(getattr(runner, "target_user_count", 0) or 0)
            if self.levels and users != self.levels[-1]["value"]:
                self._new_level(users)

    # Each step changes the levels in memory, then tells the engines, then writes the store:
    # a store write yields to other greenlets (psycopg under gevent), which must see the new
    # state, or a spawn completing meanwhile would open the same level twice.

    def _new_level(self, users: int, broadcast: bool = True) -> None:
        now = time.perf_counter_ns()
        ended = self._end_level(now)
        row = {
            "level": len(self.levels),
            "kind": "concurrency",
            "value": users,
            "duration_s": 0.0,
            "warmup_s": 0.0,
            "cooldown_s": 0.0,
            "started_at_ns": time.time_ns(),
        }
        self.levels.append(row)
        self.level_mono = now
        if broadcast:
            self._broadcast({"index": row["level"], "users": users, "steady": False})
        for r in (*ended, row):
            self.store.level(self.run_id, _stored(r))

    def _end_level(self, now: int) -> list[dict[str, Any]]:
        """Close the current level at `now` (monotonic ns); the row to store, if any."""
        if not self.levels or "ended_at_ns" in self.levels[-1]:
            return []
        row = self.levels[-1]
        row["duration_s"] = (now - self.level_mono) / 1e9
        row["ended_at_ns"] = row["started_at_ns"] + (now - self.level_mono)
        if row.get("steady") is None:  # never ramped to its count: all of it was warm-up
            row["warmup_s"] = row["duration_s"]
            row["steady_start_ns"] = row["ended_at_ns"]  # an empty steady window
        # the steady window every throughput divides by: from the spawn's end to the level's
        row["steady_end_ns"] = row["ended_at_ns"]
        return [row]

    def spawned(self, user_count: int) -> None:
        if not self.run_id:
            return
        if not self.levels or self.levels[-1]["value"] != user_count:
            self._new_level(user_count)
        row = self.levels[-1]
        if row.get("steady"):
            return
        row["steady"] = True
        since = time.perf_counter_ns() - self.level_mono
        row["warmup_s"] = since / 1e9
        row["steady_start_ns"] = row["started_at_ns"] + since
        self._broadcast({"index": row["level"], "users": user_count, "steady": True})
        self.store.level(self.run_id, _stored(row))

    def _broadcast(self, level: dict[str, Any]) -> None:
        runner = self.env.runner
        if isinstance(runner, MasterRunner):
            runner.send_message(LEVEL_MESSAGE, level)
        elif _engine is not None:
            _engine.send({"op": "level", **level})

    def end(self) -> None:
        """The test stopped: end the last level, then the run once every shard has ended."""
        if not self.run_id:
            return
        if self.tracker is not None:
            self.tracker.kill()
        self._end_level(time.perf_counter_ns())
        run_id, shards = self.run_id, list(self.shards)
        levels = [_stored(r) for r in self.levels]
        self.run_id = ""
        if not isinstance(self.env.runner, MasterRunner) and _engine is not None:
            _engine.stop()
        failed = dict(self.failed)
        self.finisher = gevent.spawn(self._finish, run_id, levels, shards, failed)
        if not isinstance(self.env.runner, MasterRunner):
            self.finisher.join()

    def _finish(
        self,
        run_id: str,
        levels: list[dict[str, Any]],
        shards: list[str],
        failed: dict[str, str],
    ) -> None:
        try:
            status, reasons = self.store.finish(run_id, levels, shards, failed, FINISH_WAIT_S)
        except PeakloadError as exc:
            log.error("peakload: run %s could not be finished: %s", run_id, exc)
            self.env.process_exit_code = 1
            return
        log.info("peakload: run %s ended %s; see `peakload report %s`", run_id, status, run_id)
        if status != "completed":  # the run did not happen as asked: Locust must not exit 0
            self.env.process_exit_code = 1
        if reasons:  # verdicts are `peakload sla`'s and `report`'s (exit 4 for these)
            log.warning("peakload: run %s is not valid: %s", run_id, "; ".join(reasons))


_conductor: _Conductor | None = None


def _stored(row: dict[str, Any]) -> dict[str, Any]:
    """A level row as the store takes it (without the in-memory `steady` flag)."""
    return {k: v for k, v in row.items() if k != "steady"}


def _fail_test(env: Environment, reason: str = "") -> None:
    """This process's engine could not run its shard (`reason`): the test stops, exit code 1,
    and the run ends without waiting for that shard (the master is told)."""
    env.process_exit_code = 1
    runner = env.runner
    shard = _engine.shard_id if _engine is not None else ""
    if reason and shard:
        if _conductor is not None:
            _conductor.failed[shard] = reason
        elif isinstance(runner, WorkerRunner):
            runner.send_message(FAILED_MESSAGE, {"shard_id": shard, "reason": reason})
    if runner is not None:
        gevent.spawn(runner.quit)


def _on_init(environment: Environment, **_: Any) -> None:
    global _engine, _conductor
    runner = environment.runner
    if runner is None or not any(issubclass(c, LLMUser) for c in environment.user_classes):
        return
    if _store is None:
        raise SystemExit(
            "peakload: LLMUser writes every record to peakload's store; install it in the "
            "locustfile: `from workers import locust_store; locust_store.install()`"
        )
    if not isinstance(runner, WorkerRunner):
        _conductor = _Conductor(environment, _store)
        try:
            _conductor.spec()  # a bad spec stops Locust now, with the file and field named
        except PeakloadError as exc:
            raise SystemExit(f"peakload: {exc}") from None
    if not isinstance(runner, MasterRunner):
        _engine = EngineClient(environment, _store.engine_command, _fail_test)
    if isinstance(runner, WorkerRunner):
        runner.register_message(RUN_MESSAGE, _on_run_message)
        runner.register_message(LEVEL_MESSAGE, _on_level_message)
    if isinstance(runner, MasterRunner):
        runner.register_message(FAILED_MESSAGE, _on_failed_message)


def _on_run_message(environment: Environment, msg: Any, **_: Any) -> None:
    if _engine is not None:
        _engine.start(dict(msg.data))


def _on_failed_message(environment: Environment, msg: Any, **_: Any) -> None:
    if _conductor is not None:
        _conductor.failed[str(msg.data["shard_id"])] = str(msg.data["reason"])


def _on_level_message(environment: Environment, msg: Any, **_: Any) -> None:
    if _engine is not None:
        _engine.send({"op": "level", **msg.data})


def _on_test_start(environment: Environment, **_: Any) -> None:
    if _conductor is None:
        return
    try:
        _conductor.begin()
    except PeakloadError as exc:
        log.error("peakload: %s", exc)
        _fail_test(environment)


def _on_spawning_complete(user_count: int, **_: Any) -> None:
    if _conductor is not None:
        _conductor.spawned(user_count)


def _on_worker_connect(client_id: str, **_: Any) -> None:
    """A worker joining a running test gets the run too (its shard is expected at the end)."""
    c = _conductor
    if c is not None and c.run_id and c.levels:
        spec = c.spec()
        lv = c.levels[-1]
        level = {"index": lv["level"], "users": lv["value"], "steady": bool(lv.get("steady"))}
        c.send_run(client_id, {"run_id": c.run_id, "spec": spec.public_dict(), "level": level})


def _on_test_stop(environment: Environment, **_: Any) -> None:
    if _conductor is not None:
        _conductor.end()
    elif _engine is not None:  # a worker: flush this shard (the master ends the run)
        _engine.stop()


def _on_quitting(environment: Environment, **_: Any) -> None:
    if _conductor is not None and _conductor.finisher is not None:
        _conductor.finisher.join(timeout=FINISH_WAIT_S + 5)
    if _engine is not None:
        _engine.close()


for _hook, _listener in (
    (events.init, _on_init),
    (events.test_start, _on_test_start),
    (events.spawning_complete, _on_spawning_complete),
    (events.worker_connect, _on_worker_connect),
    (events.test_stop, _on_test_stop),
    (events.quitting, _on_quitting),
):
    cast(Any, _hook).add_listener(_listener)
