"""Sweep fixtures: the benchmark suite's simulated engines and engine rows (tests/benchmarks/conftest.py)."""

from tests.benchmarks.conftest import host, loop_thread, make_engine, scripted, sim  # noqa: F401
