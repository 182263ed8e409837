"""The one table of exit codes every `peakload` command uses, so a CI job reads the same number
the same way whatever command it ran. The README's table is rendered from `TABLE` (a test keeps
them equal). Lives in analysis/ because the verdicts that pick a code are made here; ui/ only
passes the code to `sys.exit`.
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    """What a command's exit status means. Lower is not "better": match the code exactly."""

    PASSED = 0
    FAILED = 1
    # Click exits 2 on a usage error: that is bad input too, so the two agree
    BAD_INPUT = 2
    UNDECIDABLE = 3
    INVALID = 4
    PARTIAL = 5
    MISSING = 6
    CANNOT_COMPARE = 7


# code -> (name, meaning, the commands that can exit with it)
TABLE: dict[Exit, tuple[str, str]] = {
    Exit.PASSED: (
        "passed",
        "every criterion holds: SLOs and error budget met with the required confidence, no "
        "significant regression; for report/export/runs: done",
    ),
    Exit.FAILED: (
        "criteria failed",
        "an SLO or the error budget is disproved, or a significant regression "
        "(latency, throughput or error rate) was found",
    ),
    Exit.BAD_INPUT: (
        "bad input or infrastructure error",
        "malformed spec or claims file, bad option, store or broker unreachable; nothing written",
    ),
    Exit.UNDECIDABLE: (
        "undecidable",
        "no criterion failed but some lack samples (too few requests or runs to decide); "
        "also an empty run (no request measured in its steady phase)",
    ),
    Exit.INVALID: (
        "measurement invalid",
        "the generator's self-check flagged the run: its numbers may be the generator's",
    ),
    Exit.PARTIAL: (
        "partial or aborted",
        "the run ended partial, aborted, timed out or failed, or has not ended (`submit` "
        "without `--wait`: started, nothing judged); a command interrupted (Ctrl-C)",
    ),
    Exit.MISSING: (
        "missing run",
        "no stored run (or schedule) matches the reference: `sla`, `report`, `compare`, "
        "`export`, `abort`, `nightly`, `schedule remove`",
    ),
    Exit.CANNOT_COMPARE: (
        "cannot compare",
        "compare: a side is invalid, partial or empty, so no regression can be judged",
    ),
}


def run_state_code(status: str | None, valid: bool | None) -> Exit | None:
    """The code a run's own state forces before any criterion is judged: partial/aborted/not
    ended (PARTIAL) dominates an invalid measurement (INVALID); None for a completed, valid run.
    `valid` None (not yet judged) counts as not ended."""
    if status != "completed":
        return Exit.PARTIAL
    if valid is None:
        return Exit.PARTIAL
    if not valid:
        return Exit.INVALID
    return None


def markdown_table() -> str:
    """The README's table."""
    lines = ["| code | meaning | when |", "|---:|---|---|"]
    for code, (name, when) in TABLE.items():
        lines.append(f"| {int(code)} | {name} | {when} |")
    return "\n".join(lines)
