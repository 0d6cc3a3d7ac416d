"""Issue 45, item 4: every request SparkOps sends to an engine's chat API (the page's and the CLI's
benchmark runs, the scheduler's, sweeps, rate runs, A/B pairs, probes, their warm-ups) goes through
the one client that counts it as SparkOps's own (sparkops/benchmarks/client.py's stream_chat):
a new path that built the chat URL and sent it some other way would be judged as the operator's."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _sources():
    for path in sorted([*(ROOT / "dashboard").rglob("*.py"), *(ROOT / "sparkops").rglob("*.py")]):
        if "simulator" not in path.parts and "migrations" not in path.parts:
            yield path, ast.parse(path.read_text(encoding="utf-8"))


def _name(func):
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def test_the_chat_url_is_only_ever_sent_by_stream_chat():
    stray, senders = [], set()
    for path, tree in _sources():
        inside = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _name(node.func) == "stream_chat":
                inside |= {id(arg) for arg in node.args}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _name(node.func) == "chat_url":
                senders.add(path.relative_to(ROOT).as_posix())
                if id(node) not in inside:
                    stray.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not stray, f"the chat URL sent other than through stream_chat (not counted as SparkOps's own): {stray}"
    # the benchmark runs and their warm-ups, rate runs, A/B pairs, probes: the paths this guards
    assert {
        "sparkops/benchmarks/session.py",
        "sparkops/benchmarks/rate.py",
        "sparkops/benchmarks/pair.py",
        "sparkops/probes/session.py",
    } <= senders


def test_only_stream_chat_streams_from_an_engine():
    streams = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _name(node.func) == "astream"
    ]
    assert len(streams) == 1 and streams[0].startswith("sparkops/benchmarks/client.py:"), streams
