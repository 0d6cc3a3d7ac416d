"""Probe fixtures: the benchmarks' simulated engines (served from a loop thread, so the sync services
under test drive real sockets) and a DB engine registered for each."""

from tests.benchmarks.conftest import host, loop_thread, make_engine, scripted, sim  # noqa: F401
