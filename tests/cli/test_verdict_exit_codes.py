"""The exit-code table end to end (analysis.verdicts.exitcodes): `peakload run` against the
simulated engine with seeded faults, then `sla`, `report --claims`, `compare` and `export` on the
stored runs. Validity bounds are set far off (or impossibly tight) so the test checks the rule, not
this machine's speed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.test_run_command import peakload, spec_text
from tests.support.sim import SimProcess

pytestmark = pytest.mark.integration

LOOSE = (
    "[validity]\nmax_loop_lag_p99_ms = 1e6\nmax_dispatch_delay_p99_ms = 1e6\n"
    "max_cpu_percent = 1e6\n"
)
TIGHT = "[validity]\nmax_dispatch_delay_p99_ms = 1e-9\n"


# the table is the commands' rule, not the store's: one store (the other runs every command
# elsewhere, e.g. tests/cli/test_exit_code_matrix.py)
@pytest.mark.slow  # about 55 s: four runs, then fourteen commands, each as a user types it
@pytest.mark.parametrize("store_kind", ["plain"])
def test_every_command_exits_by_the_one_table(
    sim: SimProcess, sim_factory: Callable[[list[str]], SimProcess], store_url: str, tmp_path: Path
) -> None:
    # faults by arrival number: with seed 3 the first request (the run's preflight) is answered
    # and about half of the rest get a 429; drawn by request id (random per run), all five
    # preflight attempts got a 429 one time in 32 (a CI failure, 2026-12-05)
    flaky = sim_factory(
        ["--preset", "fixed", "--fault", "http_429=0.5", "--seed", "3", "--fault-draw", "arrival"]
    )

    def run(
        name: str, base_url: str, extra: str, duration_s: float = 1.5
    ) -> tuple[int, dict[str, object]]:
        spec = tmp_path / f"{name}.toml"
        text = spec_text(base_url).replace('name = "cli-smoke"', f'name = "{name}"')
        text = text.replace("duration_s = 1.5", f"duration_s = {duration_s}")
        # top-level keys must come before the first table
        head, _, rest = extra.partition("[validity]")
        spec.write_text(head + text + ("[validity]" + rest if rest else ""))
        out = tmp_path / f"{name}.json"
        # no probe: its checks go out together, so which of them draw the sim's seeded 429s
        # (and whether the run is refused before it starts) would depend on their order
        args = ["run", str(spec), "--json", str(out), "--quiet", "--no-probe"]
        proc = peakload(args, store_url, tmp_path)
        assert out.exists(), (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
        return proc.returncode, json.loads(out.read_text())

    # twice the others' length: the verdicts below on its half-failed requests must be provable
    # from the requests a slow host gets through in it (each level's error budget too)
    code, failing = run("lossy", flaky.base_url, LOOSE, duration_s=3.0)
    assert code == 1, failing["verdict"]
    budget = failing["verdict"]["criteria"][-1]  # type: ignore[index]
    assert budget["metric"] == "error_rate" and budget["verdict"] == "fail"
    code, clean = run("clean", sim.base_url, LOOSE)
    assert code == 3, clean["verdict"]  # ~50 clean requests cannot prove 1% at 99%
    code, lenient = run("lenient", sim.base_url, "max_error_rate = 1.0\n" + LOOSE)
    assert code == 0, lenient["verdict"]
    code, invalid = run("invalid", sim.base_url, TIGHT)
    assert code == 4 and invalid["valid"] is False, invalid["verdict"]

    claims = tmp_path / "claims.toml"
    claims.write_text(
        'max_error_rate = 0.9\n[[claims]]\nmetric = "ttft_ms"\npercentile = 10\nthreshold = 10000\n'
    )

    def cli(*args: str) -> int:
        return peakload(list(args), store_url, tmp_path).returncode

    # ~50% failed < the file's 90%, and <= 90% of requests over 10 s (failures count): provable
    # from a handful of requests, so exactly 0 however many the run sent
    assert cli("sla", "lossy", "--claims", str(claims)) == 0
    tight = tmp_path / "tight.toml"
    tight.write_text('[[claims]]\nmetric = "ttft_ms"\npercentile = 50\nthreshold = 10000\n')
    assert cli("sla", "lossy", "--claims", str(tight)) == 1  # the run spec's 1% budget
    assert cli("report", "lossy", "--claims", str(tight)) == 1
    assert cli("sla", "invalid", "--claims", str(claims)) == 4
    assert cli("report", "invalid", "--claims", str(claims)) == 4
    assert cli("report", "clean") == 0
    # the error rate as the one primary test (per level pair): half the requests failing is a
    # regression Holm (two level pairs) finds once a level has 10 requests a side (0/10 vs 5/10:
    # Fisher p = 0.016 < 0.025), which the 4-stream level gives even on a host 4x slower than this
    # one; over the whole family (12 rows) a slow host's few requests may not be
    assert cli("compare", "lenient", "lossy", "--metric", "ttft_ms", "--primary", "error_rate") == 1
    assert cli("compare", "lenient", "invalid", "--metric", "ttft_ms") == 7
    for args in (
        ["sla", "nope", "--claims", str(claims)],
        ["report", "nope", "--claims", str(claims)],
        ["compare", "clean", "nope"],
        ["export", "nope", "--format", "csv", "--out", str(tmp_path / "x.csv")],
    ):
        assert cli(*args) == 6, args
    assert cli("sla", "clean", "--claims", str(tmp_path / "absent.toml")) == 2
