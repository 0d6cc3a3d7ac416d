"""The Prometheus text reader: prometheus_client's parser behind a memo of sample identities."""

import pytest

from dashboard.http import BadBody
from sparkops.collectors import prom

NAMES = prom.wanted_names(["vllm:num_requests_running", "vllm:time_to_first_token_seconds"])
TEXT = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m, {odd} \\"name\\""} %s
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} %s 1700000000000
vllm:unwanted_total{engine="0"} 1.0
"""


@pytest.fixture(autouse=True)
def _fresh_memo(monkeypatch):
    monkeypatch.setattr(prom, "_known", {})


def test_a_known_identity_reads_only_its_new_value():
    first = prom.parse(TEXT % ("2.0", "5"), NAMES)
    assert first["vllm:num_requests_running"] == [({"engine": "0", "model_name": 'm, {odd} "name"'}, 2.0)]
    assert first["vllm:time_to_first_token_seconds_bucket"][1] == (
        {"engine": "0", "le": "+Inf", "model_name": "m"},
        5.0,
    )
    assert "vllm:unwanted_total" not in first and len(prom._known) == 3  # unwanted lines never reach the parser
    second = prom.parse(TEXT % ("7.5", "NaN"), NAMES)
    assert second["vllm:num_requests_running"][0][1] == 7.5
    assert len(second["vllm:time_to_first_token_seconds_bucket"]) == 1  # a NaN value is dropped, its +Inf label is not


@pytest.mark.parametrize("value", ["seven", "", "0x1F"])
def test_a_bad_value_is_a_bad_body_whether_the_identity_is_known_or_not(value):
    prom.parse(TEXT % ("1", "1"), NAMES)
    with pytest.raises(BadBody):
        prom.parse(TEXT % (value, "1"), NAMES)
    prom._known.clear()
    with pytest.raises(BadBody):
        prom.parse(TEXT % (value, "1"), NAMES)


def test_the_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(prom, "_KNOWN_MAX", 4)
    names = prom.wanted_names(["x"])
    for i in range(10):
        assert prom.parse(f'x{{id="{i}"}} {i}\n', names) == {"x": [({"id": str(i)}, float(i))]}
        assert len(prom._known) <= 4
