"""Sweep fixtures: the benchmark suite's simulated engines and engine rows (tests/bench/conftest.py)."""

from tests.bench.conftest import host, loop_thread, make_engine, scripted, sim  # noqa: F401
