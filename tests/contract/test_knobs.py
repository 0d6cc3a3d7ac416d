"""The simulator's traffic knobs refuse bad input with a message and account nothing."""

import pytest

from dashboard.http import sync_client


@pytest.mark.parametrize(
    "body, message",
    [
        ({"count": 0}, "'count' must be an integer from 1 to 10000"),
        ({"count": 3, "finish_reason": "timeout"}, "finish reason must be one of stop, length"),
        ({"count": 3, "finish_reason": {"stop": 0}}, "weights add up to 0"),
        ({"count": 3, "e2e_s": -1}, "'e2e_s' must be a number of seconds above 0"),
        ({"count": 3, "status": 404}, "'status' must be 200, 400 or 500"),
        ({"count": 3, "peg_native": "<think>"}, "'peg_native' is llama.cpp's parser failure; this engine is vllm"),
        ({"count": 3, "colour": "red"}, "unknown traffic knob(s): colour"),
    ],
)
def test_bad_knobs_are_refused_and_change_nothing(sim, body, message):
    before = sync_client().get(sim.url("ctr-vllm") + "/metrics").text
    r = sync_client().post(sim.control + "/_sim/units/ctr-vllm/traffic", json=body)
    assert r.status_code == 400 and message in r.json()["error"]
    after = sync_client().get(sim.url("ctr-vllm") + "/metrics").text
    success = [line for line in after.splitlines() if line.startswith("vllm:request_success_total")]
    assert success == [line for line in before.splitlines() if line.startswith("vllm:request_success_total")]


def test_a_stopped_engine_is_said_to_be_stopped(sim):
    sim.stop_unit("ctr-llama")
    r = sync_client().post(sim.control + "/_sim/units/ctr-llama/traffic", json={"count": 1})
    assert r.status_code == 409 and "is not running" in r.json()["error"]
