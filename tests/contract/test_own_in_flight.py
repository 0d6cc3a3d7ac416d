"""Issue 45, item 4: SparkOps's own requests the engine has finished but its client has not yet
counted (the engine counts a request a moment before the client reads its end; 32 streams of a
sweep end together) are in flight at the poll, and are never judged as the operator's. The real
simulated vLLM, the real poller and rules, Redis."""

import pytest

from sparkops.collectors import own
from tests.contract.test_own_traffic import tick, truncated, wide_window  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_requests_in_flight_at_the_poll_are_not_the_operators(sim, engines, wide_window):
    vllm = engines["vllm"]
    tick(engines)
    # 32 of SparkOps's requests leave; the engine finishes them (length: pinned output) and the
    # poll comes before the client has read their ends.
    tokens = [own.begin(vllm.url, timeout_s=600) for _ in range(32)]
    sim.traffic("ctr-vllm", 32, finish_reason="length")
    reading = tick(engines)
    assert reading["own"]["in_flight"] == 32 and reading["own"]["judged"], reading["own"]
    assert reading["requests"] == 0 and reading["finished"]["length"] == 0, reading
    assert truncated() is None
    # Counted as they end: excluded, no longer in flight.
    for token in tokens:
        own.record(vllm.url, "length", token)
    reading = tick(engines)
    assert reading["own"]["in_flight"] == 0 and reading["own"]["excluded"] == 32
    assert reading["requests"] == 0 and truncated() is None
    # The operator's own truncated answers, beside one of SparkOps's requests in flight, still fire:
    # counted low by the one that may be SparkOps's, not ignored.
    flying = own.begin(vllm.url, timeout_s=600)
    sim.traffic("ctr-vllm", 10, finish_reason="length")
    reading = tick(engines)
    assert reading["requests"] == 9 and reading["finished"]["length"] == 9, reading
    assert truncated() is not None and truncated().state == "firing"
    own.record(vllm.url, "stop", flying)


def test_a_request_whose_process_died_stops_counting_as_in_flight(sim, engines):
    """A process killed mid-request never counts its request: it leaves the in-flight set when its
    timeout (and a minute) has passed by Redis's clock, not the killed process's."""
    vllm = engines["vllm"]
    own.begin(vllm.url, timeout_s=-own.FLIGHT_SLACK_S)  # its time already up
    assert own.counts(vllm.url)[own.IN_FLIGHT] == 0
    token = own.begin(vllm.url, timeout_s=600)
    assert own.counts(vllm.url)[own.IN_FLIGHT] == 1
    own.record(vllm.url, "length", token)
    assert own.counts(vllm.url)[own.IN_FLIGHT] == 0 and own.counts(vllm.url)["length"] == 1
