"""Issue 17: the needle probe end to end against a real llama.cpp server. The model is tiny and its
weights random (tests/realengine/make_tiny_gguf.py), so it cannot retrieve anything: every case is a
MISS and the result says so — a probe that reported a HIT here would be scoring something other than
the answer. The haystack is counted by the server's own /tokenize, and the server saw every prompt."""

import json
from io import StringIO

import httpx
import pytest
from django.core.management import call_command

from dashboard.models import Engine, Host
from sparkops.probes.models import ProbeRun
from tests.polls import poll_one
from tests.realengine.conftest import ALIAS, N_CTX

pytestmark = pytest.mark.django_db(transaction=True)

TOKENS = 2000
DEPTHS = (10, 50, 90)
REPS = 3


def cli(*args):
    out = StringIO()
    call_command("probe", *args, stdout=out)
    return out.getvalue()


def counters(url):
    text = httpx.get(url + "/metrics", timeout=5).text
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line and line[0] != "#"}


def test_needle_probe_on_a_real_llama_server_misses_and_says_so(llama_server):
    host = Host.objects.create(name="spark-real")
    engine = Engine.objects.create(name="llama-real", kind="llamacpp", url=llama_server.url, host=host)
    reading = poll_one(engine)  # the window the probe plans with is the collector's reading of /props
    assert reading["up"] is True and reading["window"] == N_CTX, json.dumps(reading, default=str)[:2500]
    before = counters(llama_server.url)

    depths = ",".join(map(str, DEPTHS))
    args = ["--engine", "llama-real", "--kind", "needle", "--tokens", str(TOKENS), "--depths", depths]
    out = json.loads(cli("run", *args, "--decoys", "2", "--reps", str(REPS), "--json"))

    assert out["status"] == "done", out["reason"]
    assert out["kind"] == "needle" and out["engine"] == "llama-real"
    result = out["result"]
    assert result["counted_by"] == "tokenize"  # the engine's tokenizer, not an estimate
    (row,) = result["rows"]
    assert [row["cells"][str(d)]["verdict"] for d in DEPTHS] == ["MISS"] * len(DEPTHS)
    assert all(set(row["cells"][str(d)]["counts"]) == {"MISS"} for d in DEPTHS), row["cells"]
    assert out["passed"] is False and out["headline"] == "MISS MISS MISS"
    assert row["seconds_per_case"] > 0

    cases = out["cases"]
    assert len(cases) == len(DEPTHS) * REPS
    # Random weights can, rarely, answer nothing visible (EOS first, or only bytes of an unfinished
    # character): that case is in the "empty" bucket, unscored — never a MISS, never a HIT.
    failed = [c for c in cases if not c["ok"]]
    assert len(failed) <= 1 and all(c["bucket"] == "empty" and c["verdict"] == "" for c in failed), failed
    assert result["errors"] == ({"empty": 1} if failed else {})
    scored = [c for c in cases if c["ok"]]
    assert {c["verdict"] for c in scored} == {"MISS"}  # never HIT, never DECOY
    assert any(c["answer"].strip() for c in scored)  # the answers were read (gibberish), not lost
    for c in scored:
        assert c["http_status"] == 200 and c["bucket"] == ""
        detail = c["detail"]
        assert detail["needle"] not in c["answer"] and all(d["value"] not in c["answer"] for d in detail["decoys"])
        # The haystack is the target length on the server's tokenizer, and the server was sent all of it.
        assert abs(detail["haystack_tokens"] - TOKENS) <= TOKENS * 0.05, detail["haystack_tokens"]
        assert detail["haystack_tokens"] <= c["prompt_tokens"] <= detail["haystack_tokens"] + 64
        assert c["completion_tokens"] >= 1
    run = ProbeRun.objects.get(pk=out["run"])
    assert run.config["engine"]["models"] == [ALIAS] and run.config["engine"]["window"] == N_CTX
    assert run.config["engine"]["version"].startswith("b")  # /props build_info, from the real build

    # The engine's own counters: at least every case's prompt went through llama.cpp (a warm-up and
    # the calibration's /tokenize calls do not decode, the warm-up adds its own few tokens).
    after = counters(llama_server.url)
    prompt = after["llamacpp:prompt_tokens_total"] + after["llamacpp:prompt_tokens_cached_total"]
    prompt -= before["llamacpp:prompt_tokens_total"] + before["llamacpp:prompt_tokens_cached_total"]
    assert prompt >= sum(c["prompt_tokens"] for c in scored)
    generated = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    assert generated >= sum(c["completion_tokens"] for c in scored)
