"""The journal line classifier against real captures: llama-server's own log (the 400 of a
prompt over the slot context, reference/samples/llamacpp) and the lines of llama.cpp#27733."""

from pathlib import Path

from sparkops.collectors.contract import classify

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def kinds(name):
    lines = (FIXTURES / "llamacpp" / name).read_text().splitlines()
    return [(kind, line) for line in lines if (kind := classify(line))]


def test_llamacpp_capture_has_four_context_400s_and_nothing_else():
    found = kinds("b0-0c1e570_server_startup.log")
    assert [k for k, _ in found] == ["http_400"] * 4
    assert all("exceeds the available context size (256 tokens)" in line for _, line in found)


def test_peg_native_failure_is_the_unparsed_line_and_a_500():
    found = kinds("issue-27733_peg_native.log")
    assert [k for k, _ in found] == ["peg_native", "http_500"]
    assert found[0][1].endswith("unparsed peg-native output: <tool_call>")


def test_uvicorn_access_lines_of_vllm():
    line = '(APIServer pid=7) INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request'
    assert classify(line) == "http_400"
    assert classify(line.replace("400 Bad Request", "500 Internal Server Error")) == "http_500"
    assert classify(line.replace("400 Bad Request", "200 OK")) is None
    assert classify('INFO:     127.0.0.1:1 - "GET /metrics HTTP/1.1" 500 Internal Server Error') is None
