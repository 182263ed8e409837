"""Shared fixtures live in tests/support/ (one module per owner); this file only loads them."""

pytest_plugins = [
    "tests.support.cputime",
    "tests.support.ports",
    "tests.support.stores",
    "tests.support.sim",
    "tests.support.celery_workers",
    "tests.support.engine",
    "tests.support.people",
    "pytester",  # for tests of the suite's own plugins (tests/test_phases.py)
]
