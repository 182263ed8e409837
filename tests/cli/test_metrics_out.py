"""Live metrics out: `peakload run --metrics-port` scraped by a real Prometheus (Debian's binary)
while it runs against the simulated engine; what Prometheus holds after the run equals the store
(requests by outcome, TTFT and chunk-gap counts), and it saw requests in flight while the run
went. The same run pushed as OTLP JSON to a loopback receiver (`--otlp-endpoint`) and exported
(`peakload export --format otlp`) gives the same payload, whose counts and buckets equal the
store's and Prometheus's. Bad metrics options get one message and exit 2 before anything runs."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.cli.test_run_command import LOOSE_VALIDITY, peakload
from tests.support.cli import PEAKLOAD, ROOT
from tests.support.ports import free_port
from tests.support.prometheus import start_prometheus
from tests.support.sim import SimProcess

pytestmark = pytest.mark.integration

WINDOW = "[10m]"  # range lookups: after the run the series are stale, their samples kept


def spec_text(base_url: str) -> str:
    return (
        f"""
name = "metrics-out"
[target]
api = "openai-chat"
base_url = "{base_url}"
model = "m"
[workload]
prompt_tokens = 16
output_tokens = 8
[load]
concurrency = [4]
duration_s = 3
warmup_s = 0.3
"""
        + LOOSE_VALIDITY
    )


def store_counts(db_url: str, run_id: str) -> tuple[dict[str, int], int, int, str]:
    """Requests by outcome, ok requests with a first token, their chunk gaps, the region."""
    with psycopg.connect(db_url) as conn:
        outcomes: dict[str, int] = dict(
            conn.execute(
                "SELECT outcome, count(*) FROM requests WHERE run_id = %s GROUP BY outcome",
                (run_id,),
            ).fetchall()
        )
        rows = conn.execute(
            "SELECT chunk_tokens, region FROM requests WHERE run_id = %s AND outcome = 'ok'"
            " AND first_token_ns IS NOT NULL",
            (run_id,),
        ).fetchall()
    gaps = sum(max(0, sum(1 for k in tokens if k > 0) - 1) for tokens, _ in rows)
    regions = {r for _, r in rows}
    assert len(regions) == 1
    return {str(k): int(v) for k, v in outcomes.items()}, len(rows), gaps, regions.pop()


def last_values(prom: Any, expr: str, by: str) -> dict[str, float]:
    result = prom.query(f"sum by ({by}) (last_over_time({expr}{WINDOW}))")
    return {r["metric"].get(by, ""): float(r["value"][1]) for r in result}


class OtlpReceiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP metrics endpoint on loopback: keeps every JSON body POSTed to /v1/metrics."""

    bodies: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.bodies.append((self.path, self.headers.get("Content-Type", ""), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def otlp_receiver() -> Iterator[tuple[str, list[tuple[str, str, bytes]]]]:
    handler: type[OtlpReceiver] = type("Receiver", (OtlpReceiver,), {"bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1/metrics", handler.bodies
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def otlp_points(payload: dict[str, Any], name: str) -> list[dict[str, Any]]:
    (resource,) = payload["resourceMetrics"]
    (scope,) = resource["scopeMetrics"]
    (metric,) = [m for m in scope["metrics"] if m["name"] == name]
    data = metric.get("sum") or metric["histogram"]
    assert data["aggregationTemporality"] == 2
    return list(data["dataPoints"])


def attrs(point: dict[str, Any]) -> dict[str, str]:
    return {a["key"]: a["value"]["stringValue"] for a in point["attributes"]}


def test_prometheus_scrapes_a_run_and_holds_the_stores_counts(
    sim_factory: Any,
    plain_url: str,
    fresh_database: Any,
    tmp_path: Path,
    otlp_receiver: tuple[str, list[tuple[str, str, bytes]]],
) -> None:
    sim: SimProcess = sim_factory(
        # by arrival, seed 1: the preflight and calibration (arrivals 1-4) are answered
        [
            *("--preset", "fixed", "--seed", "1", "--fault", "http_503=0.1"),
            *("--fault", "error_event=0.05", "--fault-draw", "arrival"),
        ]
    )
    db = fresh_database(plain_url)
    spec = tmp_path / "spec.toml"
    # in flight shows from the first tick (1 s) to the run's end: 3 s of it, scraped every 0.5 s
    # with as long to answer (in CI a 0.2-s timeout lost every mid-run scrape on the loaded
    # host: 6 scrapes, 2 answered, both after the run)
    spec.write_text(spec_text(sim.base_url).replace("duration_s = 3", "duration_s = 4"))
    port = free_port()
    out = tmp_path / "summary.json"
    with start_prometheus([f"127.0.0.1:{port}"], interval_s=0.5) as prom:
        proc = peakload(
            [
                "run", str(spec), "--json", str(out), "--no-probe", "--quiet",
                "--metrics-port", str(port), "--metrics-linger", "10",
                "--otlp-endpoint", otlp_receiver[0],
            ],
            db.url,
            tmp_path,
        )  # fmt: skip
        assert proc.returncode in (0, 1, 3), proc.stderr
        assert f"metrics at http://127.0.0.1:{port}/metrics" in proc.stdout
        run_id = json.loads(out.read_text())["run_id"]
        outcomes, with_ttft, gaps, region = store_counts(db.url, run_id)
        assert outcomes.get("ok", 0) > 20 and outcomes.get("http_error", 0) > 0, outcomes

        sel = f'{{run_id="{run_id}"}}'
        assert last_values(prom, f"peakload_requests_total{sel}", "outcome") == {
            k: float(v) for k, v in outcomes.items()
        }
        ttft = last_values(
            prom, f"gen_ai_client_operation_time_to_first_chunk_seconds_count{sel}", "region"
        )
        assert ttft == {region: float(with_ttft)}
        itl = last_values(
            prom, f"gen_ai_client_operation_time_per_output_chunk_seconds_count{sel}", "region"
        )
        assert itl == {region: float(gaps)}
        # the fixed preset's first token comes 50 ms after arrival: the median bucket says so
        p50 = prom.query(
            "histogram_quantile(0.5, sum by (le) (last_over_time("
            f"gen_ai_client_operation_time_to_first_chunk_seconds_bucket{sel}{WINDOW})))"
        )
        assert 0.04 <= float(p50[0]["value"][1]) <= 0.25
        # seen live: requests were in flight at some scrape, and none after the end
        seen = prom.query(f"max_over_time(peakload_requests_in_flight{sel}{WINDOW})")
        scrapes = (
            prom.query(f"count_over_time(up{WINDOW})"),
            prom.query(f"sum_over_time(up{WINDOW})"),
        )
        assert float(seen[0]["value"][1]) >= 1, ("scrapes, answered", scrapes)
        final = last_values(prom, f"peakload_requests_in_flight{sel}", "region")
        assert final == {region: 0.0}
        buckets = prom.query(
            "sum by (le) (last_over_time("
            f"gen_ai_client_operation_time_to_first_chunk_seconds_bucket{sel}{WINDOW}))"
        )
        prom_cumulative = {float(r["metric"]["le"]): float(r["value"][1]) for r in buckets}

    # the push at the run's end and the export afterwards: one payload, the store's counts
    exported = tmp_path / "run.otlp.json"
    done = peakload(
        ["export", run_id, "--format", "otlp", "--out", str(exported)], db.url, tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = exported.read_text().splitlines()
    assert len(lines) == 1
    payload = json.loads(lines[0])
    ((path, ctype, body),) = otlp_receiver[1]
    assert (path, ctype) == ("/v1/metrics", "application/json")
    assert json.loads(body) == payload
    resource = attrs(payload["resourceMetrics"][0]["resource"])
    assert resource["service.name"] == "peakload" and resource["peakload.run.id"] == run_id
    by_outcome = {
        attrs(p)["outcome"]: int(p["asInt"]) for p in otlp_points(payload, "peakload.requests")
    }
    assert by_outcome == outcomes
    (ttft_point,) = otlp_points(payload, "gen_ai.client.operation.time_to_first_chunk")
    assert attrs(ttft_point) == {"run_id": run_id, "region": region}
    assert int(ttft_point["count"]) == with_ttft
    counts = [int(c) for c in ttft_point["bucketCounts"]]
    cumulative = [sum(counts[: i + 1]) for i in range(len(counts))]
    bounds = [*ttft_point["explicitBounds"], float("inf")]
    assert dict(zip(bounds, map(float, cumulative), strict=True)) == prom_cumulative
    (itl_point,) = otlp_points(payload, "gen_ai.client.operation.time_per_output_chunk")
    assert int(itl_point["count"]) == gaps
    durations = {
        attrs(p).get("error.type", "ok"): int(p["count"])
        for p in otlp_points(payload, "gen_ai.client.operation.duration")
    }
    assert durations["ok"] == outcomes["ok"]


def test_port_zero_picks_a_free_port_and_prints_it_before_the_run(
    plain_url: str, fresh_database: Any, tmp_path: Path
) -> None:
    """The address is printed before the run starts (here it never does: nothing listens at
    the target), and a run that never ran does not wait for a final scrape."""
    db = fresh_database(plain_url)
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text(f"http://127.0.0.1:{free_port()}/v1"))
    proc = peakload(
        ["run", str(spec), "--no-probe", "--quiet", "--metrics-port", "0"], db.url, tmp_path
    )
    assert proc.returncode == 2, proc.stderr
    found = re.search(r"metrics at http://127\.0\.0\.1:(\d+)/metrics", proc.stdout)
    assert found is not None and int(found.group(1)) > 0, proc.stdout


def test_bad_metrics_options_fail_before_anything_runs(
    sim: SimProcess, plain_url: str, fresh_database: Any, tmp_path: Path
) -> None:
    db = fresh_database(plain_url)
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text(sim.base_url))
    busy = subprocess.Popen(  # a listener holding a port
        [PEAKLOAD[0], "-c", "import socket,time;s=socket.socket();s.bind(('127.0.0.1',0));"
         "s.listen();print(s.getsockname()[1],flush=True);time.sleep(60)"],
        stdout=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    try:
        assert busy.stdout is not None
        taken = busy.stdout.readline().decode().strip()
        cases = {
            ("--metrics-port", taken): f"--metrics-port {taken} on 127.0.0.1: cannot listen",
        }
        for args, message in cases.items():
            proc = peakload(["run", str(spec), "--no-probe", *args], db.url, tmp_path)
            assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
            assert message in proc.stderr, (args, proc.stderr)
            assert "Traceback" not in proc.stderr
    finally:
        busy.kill()
        busy.wait()
        if busy.stdout is not None:
            busy.stdout.close()
    with psycopg.connect(db.url) as conn:
        row = conn.execute("SELECT count(*) FROM runs").fetchone()
        assert row is not None and row[0] == 0


@pytest.mark.slow  # three processes and a Prometheus: about 30 s on a loaded 2-core machine
def test_measuring_processes_are_served_as_one_run(
    sim: SimProcess, plain_url: str, fresh_database: Any, tmp_path: Path
) -> None:
    """`--processes 2`: each measuring process counts into the parent's folder; the parent
    serves their sum, which Prometheus holds after the run as the store does."""
    db = fresh_database(plain_url)
    spec = tmp_path / "spec.toml"
    # in flight shows from the first tick (1 s) to the run's end: 3 s of it, scraped every
    # 0.5 s with as long to answer (a 0.2-s timeout lost every mid-run scrape on a loaded host)
    spec.write_text(spec_text(sim.base_url).replace("duration_s = 3", "duration_s = 4"))
    port = free_port()
    out = tmp_path / "summary.json"
    with start_prometheus([f"127.0.0.1:{port}"], interval_s=0.5) as prom:
        proc = peakload(
            [
                "run", str(spec), "--json", str(out), "--no-probe", "--quiet", "--processes", "2",
                "--metrics-port", str(port), "--metrics-linger", "10",
            ],
            db.url,
            tmp_path,
        )  # fmt: skip
        assert proc.returncode in (0, 1, 3), proc.stderr
        run_id = json.loads(out.read_text())["run_id"]
        outcomes, with_ttft, gaps, region = store_counts(db.url, run_id)
        with psycopg.connect(db.url) as conn:
            shards = conn.execute(
                "SELECT count(DISTINCT shard_id) FROM requests WHERE run_id = %s", (run_id,)
            ).fetchone()
        assert shards is not None and shards[0] == 2  # one shard per measuring process
        sel = f'{{run_id="{run_id}"}}'
        assert last_values(prom, f"peakload_requests_total{sel}", "outcome") == {
            k: float(v) for k, v in outcomes.items()
        }
        ttft = last_values(
            prom, f"gen_ai_client_operation_time_to_first_chunk_seconds_count{sel}", "region"
        )
        assert ttft == {region: float(with_ttft)}
        itl = last_values(
            prom, f"gen_ai_client_operation_time_per_output_chunk_seconds_count{sel}", "region"
        )
        assert itl == {region: float(gaps)}
        seen = prom.query(f"max_over_time(peakload_requests_in_flight{sel}{WINDOW})")
        scrapes = (
            prom.query(f"count_over_time(up{WINDOW})"),
            prom.query(f"sum_over_time(up{WINDOW})"),
        )
        assert float(seen[0]["value"][1]) >= 1, ("scrapes, answered", scrapes)
        final = last_values(prom, f"peakload_requests_in_flight{sel}", "region")
        assert final == {region: 0.0}
