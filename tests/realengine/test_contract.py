"""Issue 17's request contract read off a real llama.cpp server: a prompt that fits with max_tokens
reaching past the window ends at the window with finish_reason "length" (llama.cpp clamps); a prompt
alone over the window is an HTTP 400 whose message llama.cpp wrote. The simulated engines are told
which to do; this is what the build CI pins actually does."""

import json

import pytest

from dashboard.models import Engine, Host
from sparkops.benchmarks.client import StreamResult
from sparkops.probes.contract import behaviour
from tests.polls import poll_one
from tests.realengine.conftest import N_CTX
from tests.realengine.test_needle import cli

pytestmark = pytest.mark.django_db(transaction=True)


def test_contract_probe_reads_llamacpp_clamp_and_400(llama_server):
    host = Host.objects.create(name="spark-real")
    engine = Engine.objects.create(name="llama-real", kind="llamacpp", url=llama_server.url, host=host)
    assert poll_one(engine)["window"] == N_CTX

    out = json.loads(cli("run", "--engine", "llama-real", "--kind", "contract", "--json"))

    assert out["status"] == "done", out["reason"]
    cases = out["result"]["cases"]
    over, alone = cases["prompt+max_tokens"], cases["prompt alone"]
    assert over["behaviour"] == "clamped" and over["finish_reason"] == "length", (over, out["cases"])
    assert 0 <= over["completion_tokens"] < over["max_tokens"]
    # It stopped at the window: the prompt as the engine saw it (the chat template's tokens with the
    # counted text) plus what it generated fill the window.
    (sent,) = [c for c in out["cases"] if c["label"] == "prompt+max_tokens"]
    assert sent["prompt_tokens"] > over["prompt_tokens_counted"]
    assert N_CTX - 2 <= sent["prompt_tokens"] + sent["completion_tokens"] <= N_CTX
    assert alone["behaviour"] == "rejected" and alone["http_status"] == 400
    assert "exceeds the available context size" in alone["message"] and f"({N_CTX} tokens)" in alone["message"]
    assert out["headline"].startswith("prompt + max_tokens over: clamped (finish_reason length after ")
    assert out["headline"].endswith("prompt alone over: HTTP 400")


def test_an_answer_cut_to_nothing_visible_by_the_window_is_a_clamp():
    """What the real server sends now and then for the case above: room for a few tokens, all of them
    bytes of an unfinished UTF-8 character (llama.cpp holds those back), so the stream has no content
    and the client's bucket is "empty" — but the engine clamped, and finish_reason says so."""
    cut = StreamResult(status=200, finish_reason="length", done=True, usage={"completion_tokens": 3})
    cut.fail("empty", "no tokens (finish_reason=length)")
    assert behaviour(cut, 256) == ("clamped", {"completion_tokens": 3, "finish_reason": "length"})
    stopped = StreamResult(status=200, finish_reason="stop", done=True, usage={"completion_tokens": 0})
    stopped.fail("empty", "no tokens (finish_reason=stop)")
    assert behaviour(stopped, 256)[0] == "error"  # an answer that ended on its own with nothing is not a clamp
