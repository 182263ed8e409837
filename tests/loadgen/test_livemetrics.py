"""The live metrics sink and server (loadgen.engine.livemetrics): a write hands the batch over
and returns while counting waits, so the event loop never waits for a scrape or a count; close
waits until everything is counted; in flight sums a region's shards and is 0 once the run's sink
closes; the final-scrape wait; names as the OTel Prometheus conversion makes them; an address
that cannot be bound is one clear error."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import numpy as np
import pytest

from loadgen.engine import scrape_server
from loadgen.engine.livemetrics import LiveMetrics, MetricsSink
from loadgen.errors import MetricsError
from loadgen.results import formulas, genai
from loadgen.results.choices import has_choices, per_choice_gaps
from loadgen.results.records import Batch, Outcome, RequestRecord, Tick


class ListSink:
    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self.closed = False

    def write(self, batch: Batch) -> None:
        self.batches.append(batch)

    def close(self) -> None:
        self.closed = True


class HeldMetrics(LiveMetrics):
    """Counting blocks until `release` is set: what a slow count would do to a caller."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def add_records(self, records: list[RequestRecord]) -> None:
        self.release.wait()
        super().add_records(records)


def record(i: int, region: str = "eu", outcome: Outcome = Outcome.OK) -> RequestRecord:
    return RequestRecord(
        f"id{i}", "run1", "s0", region, 0, i, 0, outcome=outcome,
        sent_ns=0, first_token_ns=50_000_000, end_ns=100_000_000, output_tokens=3,
        chunk_offsets_us=[50_000, 60_000, 75_000], chunk_tokens=[1, 1, 1],
    )  # fmt: skip


def tick(shard: str, region: str, in_flight: int) -> Tick:
    return Tick("run1", shard, region, 0, 0, in_flight, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0)


def value(m: LiveMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, {"run_id": "run1", **labels})


def requests(m: LiveMetrics, region: str, outcome: str) -> float | None:
    return value(m, "peakload_requests_total", region=region, outcome=outcome)


def test_writes_return_while_counting_waits_and_close_counts_everything() -> None:
    metrics = HeldMetrics()
    inner = ListSink()
    sink = MetricsSink(inner, metrics)
    for b in range(50):
        sink.write(Batch([record(10 * b + i) for i in range(10)]))
    # every batch reached the store's sink, none is counted yet: nothing waited for counting
    assert len(inner.batches) == 50
    assert value(metrics, "peakload_requests_total", region="eu", outcome="ok") is None
    metrics.release.set()
    sink.close()
    assert inner.closed
    assert value(metrics, "peakload_requests_total", region="eu", outcome="ok") == 500
    labels = {"run_id": "run1", "region": "eu"}
    assert (
        value(metrics, "gen_ai_client_operation_time_to_first_chunk_seconds_count", **labels) == 500
    )
    assert (
        value(metrics, "gen_ai_client_operation_time_per_output_chunk_seconds_count", **labels)
        == 1000
    )
    assert (
        value(metrics, "gen_ai_client_token_usage_sum", gen_ai_token_type="output", **labels)
        == 1500
    )


def test_in_flight_sums_a_regions_shards_and_is_zero_after_close() -> None:
    metrics = LiveMetrics()
    sink = MetricsSink(ListSink(), metrics)
    sink.write(Batch(ticks=[tick("eu-0", "eu", 3), tick("eu-1", "eu", 4), tick("us-0", "us", 2)]))
    sink.write(Batch(ticks=[tick("eu-0", "eu", 1)]))
    sink.write(Batch([record(1, "us", Outcome.HTTP_ERROR)]))
    sink._queue.put(None)  # a malformed item: logged, the feed goes on
    sink.write(Batch(ticks=[tick("us-0", "us", 5)]))
    sink.close()
    assert value(metrics, "peakload_requests_in_flight", region="eu") == 0
    assert value(metrics, "peakload_requests_total", region="us", outcome="http_error") == 1
    assert value(
        metrics, "gen_ai_client_operation_duration_seconds_count",
        region="us", error_type="http_error",
    ) == 1  # fmt: skip


def test_in_flight_live_values() -> None:
    metrics = LiveMetrics()
    metrics.add_ticks([tick("eu-0", "eu", 3), tick("eu-1", "eu", 4), tick("us-0", "us", 2)])
    metrics.add_ticks([tick("eu-0", "eu", 1)])
    assert value(metrics, "peakload_requests_in_flight", region="eu") == 5
    assert value(metrics, "peakload_requests_in_flight", region="us") == 2
    metrics.ended("run1")
    assert value(metrics, "peakload_requests_in_flight", region="us") == 0


def test_served_and_the_final_scrape_is_waited_for() -> None:
    metrics = LiveMetrics()
    port = metrics.start(0)
    try:
        assert port > 0 and metrics.url == f"http://127.0.0.1:{port}/metrics"
        metrics.add_records([record(1)])
        assert not metrics.wait_for_scrape(0.2)  # nobody scraped
        got: list[str] = []
        timer = threading.Timer(0.3, lambda: got.append(httpx.get(metrics.url).text))
        timer.start()
        assert metrics.wait_for_scrape(10)
        timer.join()
        assert 'peakload_requests_total{outcome="ok",region="eu",run_id="run1"} 1.0' in got[0]
    finally:
        metrics.stop()


def test_names_follow_the_otel_prometheus_conversion() -> None:
    assert genai.TTFT.prometheus_name == "gen_ai_client_operation_time_to_first_chunk_seconds"
    assert genai.ITL.prometheus_name == "gen_ai_client_operation_time_per_output_chunk_seconds"
    assert genai.DURATION.prometheus_name == "gen_ai_client_operation_duration_seconds"
    assert genai.TOKENS.prometheus_name == "gen_ai_client_token_usage"
    assert genai.DURATION.label_names == ("run_id", "region", "error_type")
    assert genai.TOKENS.label_names == ("run_id", "region", "gen_ai_token_type")
    for inst in genai.HISTOGRAMS:
        assert list(inst.buckets) == sorted(set(inst.buckets))
    values = np.asarray([0.05, 0.1, 0.1000001, 0.2, 0.3])
    assert genai.bucket_counts((0.1, 0.2), values) == [2, 2, 1]  # a bound closes its bucket


def test_an_address_that_cannot_be_bound_is_one_error() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(
            MetricsError, match=f"--metrics-port {port} on 127.0.0.1: cannot listen"
        ):
            LiveMetrics().start(port)


def test_batch_chunk_gaps_are_each_records_token_gaps() -> None:
    """genai.chunk_gaps_s over a batch = formulas.token_gaps (per_choice_gaps for n > 1) of
    each record, concatenated: no gap spans two records; chunks without tokens skipped."""
    rng = np.random.default_rng(3)
    records = []
    for i in range(200):
        k = int(rng.integers(0, 12))
        offs = np.cumsum(rng.integers(1, 50_000, size=k)).tolist()
        toks = rng.choice([0, 1, 2], size=k).tolist()
        rec = record(i)
        rec.chunk_offsets_us, rec.chunk_tokens = offs, toks
        rec.chunk_choices = (np.arange(k) % 3).tolist() if i % 7 == 0 else []
        records.append(rec)
    want = []
    for r in records:
        off, tok = np.asarray(r.chunk_offsets_us, dtype=np.int64), np.asarray(r.chunk_tokens)
        if has_choices(r.chunk_choices):
            gap, _ = per_choice_gaps(off, tok, np.asarray(r.chunk_choices))
        else:
            gap, _ = formulas.token_gaps(off, tok)
        want.append(gap)
    expected = np.sort(np.concatenate(want) / 1e6)
    assert expected.size > 500
    assert np.array_equal(np.sort(genai.chunk_gaps_s(records)), expected)


def test_a_long_lived_process_keeps_the_series_of_its_last_runs() -> None:
    metrics = LiveMetrics(keep_runs=2)
    for n in range(4):
        run = f"run{n}"
        rec, t = record(n), tick("s0", "eu", 1)
        rec.run_id = t.run_id = run
        sink = MetricsSink(ListSink(), metrics)
        sink.write(Batch([rec], [t]))
        sink.close()
    kept = {
        s.labels["run_id"]
        for family in metrics.registry.collect()
        for s in family.samples
        if "run_id" in s.labels
    }
    assert kept == {"run2", "run3"}
    got = metrics.registry.get_sample_value(
        "peakload_requests_total", {"run_id": "run3", "region": "eu", "outcome": "ok"}
    )
    assert got == 1


def test_a_scrape_answered_after_its_scrapers_timeout_is_not_the_final_one() -> None:
    """Prometheus drops an answer that comes after the timeout it states with the scrape: the
    run keeps waiting for one it keeps. A scraper that states no timeout keeps any answer."""
    log = scrape_server.ScrapeLog()
    mark = time.perf_counter_ns()
    log.note(mark + 1, mark + 2_000_000_000, timeout_s=0.5)  # answered 2 s later: dropped
    assert not log.wait_kept_after(mark, 0.05) and (log.answered, log.late) == (1, 1)
    log.note(mark + 3, mark + 400_000_000, timeout_s=0.5)
    assert log.wait_kept_after(mark, 0.05)
    assert not log.wait_kept_after(mark + 3, 0.05)  # began before the new mark: not final
    log.note(mark + 5, mark + 9_000_000_000, timeout_s=None)
    assert log.wait_kept_after(mark + 3, 0.05)


def test_the_scrapers_stated_timeout_is_read_from_its_header() -> None:
    metrics = LiveMetrics()
    metrics.start(0)
    try:
        headers = {"X-Prometheus-Scrape-Timeout-Seconds": "0.000001"}  # no answer is that fast
        assert httpx.get(metrics.url, headers=headers).status_code == 200
        answered(metrics, 1)  # the server notes it once the answer is written
        assert metrics.scrapes.late == 1
        assert not metrics.wait_for_scrape(0.1)
        headers["X-Prometheus-Scrape-Timeout-Seconds"] = "10"
        timer = threading.Timer(0.2, lambda: httpx.get(metrics.url, headers=headers))
        timer.start()
        assert metrics.wait_for_scrape(10)
        timer.join()
        answered(metrics, 2)
        assert metrics.scrapes.late == 1
    finally:
        metrics.stop()


def answered(metrics: LiveMetrics, n: int) -> None:
    deadline = time.monotonic() + 10
    while metrics.scrapes.answered < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert metrics.scrapes.answered == n
