"""The house's rules, read off the code (docs/ARCHITECTURE.md): imports that run one way between
layers, no circle at any depth (TYPE_CHECKING imports count), no database or broker driver in
loadgen (the contracts in pyproject.toml's [tool.importlinter], checked by import-linter), and no
module of the product over 450 lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("loadgen", "workers", "analysis", "ui")
MAX_MODULE_LINES = 450


def test_every_import_contract_is_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout and "6 kept" in proc.stdout, proc.stdout


def test_no_module_of_the_product_is_over_450_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"over {MAX_MODULE_LINES} lines (split by role): {long}"
