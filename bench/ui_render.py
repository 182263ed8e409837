"""Benchmark: time for the Streamlit Run page (one run of N requests) and Compare page (five
runs) to render: cold (empty Streamlit caches and analysis cache), a new server process whose
runs are in analysis.store.cache's files already, and cached (a new session in the same server),
each with the runs' summaries kept in the store (as `peakload run` and `submit` leave them at a
run's end: analysis.store.summaries) and without (a run stored before them, or imported),
with streamlit.testing.v1.AppTest: the time the page script takes on the server, which is what a
person waits for before the browser draws. Streamlit's scan of the installed components, which a
server makes once at its start and each new AppTest on its first run, is made once (before
2026-12-05 every figure here held it: about 0.5 s).

    python bench/ui_render.py [--requests 100000] [--chunks 64] [--runs 5]

Store: PEAKLOAD_BENCH_URL (an admin URL), else a temporary embedded PostgreSQL. Runs are
generated server-side by bench/analysis_load.py's generator (4 rate levels, 3 regions, every
200th request a 503) into the database `peakload_bench` and reused; their request_blocks are
packed once (bench/analysis_load.py's ensure_blocks). `--run ID`: only that stored run's Run
page, from PEAKLOAD_BENCH_URL's own database (bench/soak.py's run).
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from analysis_load import ensure_blocks, ensure_db, generate  # noqa: E402

APP = ROOT / "ui" / "app.py"


def run_ids(n: int, chunks: int, runs: int) -> list[str]:
    return [f"00000000-0000-0000-cccc-{k:02d}{n:06d}{chunks:04d}"[:36] for k in range(runs)]


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


@functools.cache
def _components() -> object:
    """Streamlit's registry of installed custom components, scanned once per bench process: a
    server scans the installed packages once, when it starts (Runtime.__init__), while each new
    AppTest scans them again on its first run (about 0.5 s here), which no page view waits for."""
    from streamlit.components.v2.component_manager import BidiComponentManager

    manager = BidiComponentManager()
    manager.discover_and_register_components(start_file_watching=False)
    return manager


def render(page: str, **params: str) -> float:
    """Seconds for one AppTest run of `page` (a new session), failing on any exception."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=600)
    at._bidi_component_manager = _components()  # as a running server has it (see _components)
    for k, v in params.items():
        at.query_params[k] = v
    at.switch_page(f"views/{page}.py")
    t = time.perf_counter_ns()
    at.run()
    dt = (time.perf_counter_ns() - t) / 1e9
    if at.exception:
        raise RuntimeError(f"{page}: {at.exception[0].value}")
    return dt


def clear_caches(cache_dir: Path | None) -> None:
    """Empty Streamlit's caches and, with `cache_dir`, analysis.store.cache's files too."""
    import streamlit as st

    from analysis.store.cache import wait_for_writes

    wait_for_writes()  # a page's entries are written beside it: on disk before the next view
    st.cache_data.clear()
    st.cache_resource.clear()
    if cache_dir is not None:
        shutil.rmtree(cache_dir, ignore_errors=True)


def forget_summaries(url: str, ids: list[str]) -> None:
    """Delete the runs' kept summaries (analysis.store.summaries): the page computes them."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM run_summaries WHERE run_id = ANY(%s::uuid[])", (ids,))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000, help="requests per run")
    ap.add_argument("--chunks", type=int, default=64, help="chunks per request")
    ap.add_argument("--runs", type=int, default=5, help="runs on the Compare page")
    ap.add_argument("--repeat", type=int, default=3, help="timed renders of each kind")
    ap.add_argument("--run", help="a stored run's id: only its Run page, from the URL's database")
    ap.add_argument(
        "--cold-only",
        action="store_true",
        help="only the cold renders (caches emptied before each), --repeat times each",
    )
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="peakload-bench-ui-"))
    server = None
    admin = os.environ.get("PEAKLOAD_BENCH_URL")
    if not admin:
        from tests.support.ports import free_port
        from workers.store import embedded

        server = embedded.ensure_running(tmp / "pg", tcp_port=free_port())
        admin = server.url("postgres")
    try:
        url = admin if args.run else ensure_db(admin)
        ids = [args.run] if args.run else run_ids(args.requests, args.chunks, args.runs)
        with psycopg.connect(url, autocommit=True) as conn:
            for rid in [] if args.run else ids:
                have = conn.execute(
                    "SELECT count(*) FROM requests WHERE run_id = %s", (rid,)
                ).fetchone()
                if not have or have[0] != args.requests:
                    print(f"generating run {rid}: {args.requests:,} x {args.chunks} chunks")
                    generate(conn, rid, args.requests, args.chunks)
            version = conn.execute("SHOW server_version").fetchone()
        for rid in ids:  # as the store writer would have written them
            ensure_blocks(url, rid)
        os.environ["PEAKLOAD_DATABASE_URL"] = url
        cache_dir = tmp / "analysis-cache"
        os.environ["PEAKLOAD_ANALYSIS_CACHE"] = str(cache_dir)
        from streamlit import config

        config.set_option("server.address", "127.0.0.1")

        results: dict[str, list[float]] = {}
        pages = {"Run page, 1 run": ("run", {"run": ids[0]})}
        if not args.run:
            pages[f"Compare page, {args.runs} runs"] = ("compare", {"runs": ",".join(ids)})
        from ui.results import summarize_run  # what `peakload run` and `submit` do at its end

        for label, (page, params) in pages.items():
            render(page, **params)  # the page's modules imported, as a running server has them
            hows = {True: "summary kept with the run", False: "no kept summary"}
            for _ in range(args.repeat):
                for kept, how in hows.items():  # alternated: neither gets the warmer caches
                    if not kept:  # a run from before analysis.store.summaries, or imported
                        forget_summaries(url, ids)
                    else:
                        for rid in ids:
                            summarize_run(rid, url)
                    clear_caches(cache_dir)
                    cold = render(page, **params)
                    if args.cold_only:
                        results.setdefault(f"{label}: cold (nothing cached), {how}", []).append(
                            cold
                        )
                        continue
                    cached = render(page, **params)
                    if not kept:
                        forget_summaries(url, ids)
                    clear_caches(None)  # a restarted server: the runs' files are on disk already
                    disk = render(page, **params)
                    for kind, dt in (
                        ("cold (nothing cached)", cold),
                        ("new server, runs on disk (analysis.store.cache)", disk),
                        ("cached (second visit)", cached),
                    ):
                        results.setdefault(f"{label}: {kind}, {how}", []).append(dt)
        print(
            "\nui_render: "
            + (
                f"stored run {args.run}"
                if args.run
                else f"{args.requests:,} requests x {args.chunks} chunks per run"
            )
            + "; "
            f"PostgreSQL {version[0] if version else '?'}; nproc {os.cpu_count()}; {cpu_model()}; "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        print("| page | median s | min s | max s |")
        print("|---|---|---|---|")
        for k, v in results.items():
            print(f"| {k} | {statistics.median(v):.2f} | {min(v):.2f} | {max(v):.2f} |")
    finally:
        if server is not None:
            from workers.store import embedded

            embedded.stop(tmp / "pg")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
