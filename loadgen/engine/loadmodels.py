"""The load models: closed-loop users (send, wait for the answer, think, repeat), open-loop
dispatch at absolute offsets (a send the concurrency cap forbids is `not_sent`), and multi-turn
sessions (each turn's context is the conversation so far). Each drives `fold.execute`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from loadgen.engine.fold import execute
from loadgen.engine.shard import NS, LevelWindow, Shard

# Closed-loop users of a level start this far apart rather than all in one instant: a burst of
# N simultaneous sends is the generator's serialisation, not the server's latency.
SPAWN_INTERVAL_NS = 1_000_000


async def closed_loop_user(shard: Shard, window: LevelWindow, user: int) -> None:
    """One virtual user: send, wait for the answer, think, repeat until the level ends.
    The next prompt is built before its send time, so building it never delays the send."""
    think = int(shard.spec.load.think_time_s * NS)
    ready = window.start + user * SPAWN_INTERVAL_NS
    sessions = shard.spec.workload.sessions
    while not shard.stopping and ready < window.end:
        if sessions is not None:
            await shard.sleep_until(ready)
            ready = await run_session(shard, window, ready, think)
            if ready < 0:
                return
            continue
        index = shard.take_index()
        if index is None:
            return
        prompt = shard.workload.prompt(index)
        if not await shard.wait_to_send(index, window, ready):
            return
        await execute(shard, index, window, ready, prompt)
        ready = max(ready, shard.clock() + think)


async def run_session(shard: Shard, window: LevelWindow, ready: int, think: int) -> int:
    """One multi-turn session: each turn's context is the conversation so far. Returns when
    the next session may start (monotonic ns), or -1 when the shard's budget is spent."""
    sess = shard.spec.workload.sessions
    assert sess is not None
    first = shard.take_index()
    if first is None:
        return -1
    base = shard.workload.prompt(first)
    context = list(base.messages)
    index = first
    for turn in range(sess.turns):
        if turn:
            await shard.sleep_until(ready)
            if shard.stopping or ready >= window.end:
                break
            nxt = shard.take_index()
            if nxt is None:
                return -1
            index = nxt
            context = [
                *context,
                {"role": "user", "content": shard.workload.user_turn(first, turn)},
            ]
        answer = await execute(shard, index, window, ready, base, (first, turn), context)
        context = [*context, {"role": "assistant", "content": answer}]
        ready = max(ready, shard.clock() + think)
    return ready


async def open_loop(
    shard: Shard, window: LevelWindow, offsets: Any, forced: list[Any] | None = None
) -> None:
    """Dispatch requests at `window.start + offset`; `forced` gives per-request lengths.
    Each prompt is built before its send time; a send the cap forbids is `not_sent`."""
    cap = shard.plan.in_flight_cap()
    think = int(shard.spec.load.think_time_s * NS)
    sessions = shard.spec.workload.sessions is not None
    for j, off in enumerate(offsets):
        sched = window.start + int(off * NS)
        if sched >= window.end or shard.stopping:
            return
        coro: Any
        if sessions:
            if shard.next_index >= shard.plan.max_requests:
                return
            await shard.sleep_until(sched)
            if shard.stopping:
                return
            coro = run_session(shard, window, sched, think)  # takes its own indices
        else:
            index = shard.take_index()
            if index is None:
                return
            if forced:
                e = forced[j]
                prompt = shard.workload.prompt(
                    index, e.prompt_tokens, e.output_tokens, prefix_blocks=e.prefix_blocks
                )
            else:
                prompt = shard.workload.prompt(index)
            if not await shard.wait_to_send(index, window, sched):
                return
            if len(shard.in_flight) >= cap:
                shard.not_sent(index, window, sched, "concurrency_cap")
                continue
            coro = execute(shard, index, window, sched, prompt)
        shard.track(asyncio.create_task(coro))
