"""Each probe against the simulated engines, through the real client and the real services: every
outcome of every kind shows, scored in code, and a failed request lands in its bucket, not a score."""

import pytest

from sparkops.probes.models import ProbeRun
from sparkops.probes.services import probe_run_create, probe_run_execute
from sparkops.probes.spec import ProbeSpec

pytestmark = pytest.mark.django_db


def probe(engine, kind, **kw):
    spec = ProbeSpec(engine_name=engine.name, engine_kind=engine.kind, base_url=engine.base_url, kind=kind, **kw)
    assert spec.problems() == []
    return probe_run_execute(run=probe_run_create(engine=engine, spec=spec, trigger=ProbeRun.Trigger.CLI))


def cells(run, corpus="lighthouse"):
    (row,) = [r for r in run.result["rows"] if r["corpus"] == corpus]
    return {d: c["verdict"] for d, c in row["cells"].items()}


def test_needle_hits_everywhere_on_a_model_that_recalls(sim, make_engine):
    eng = sim("vllm")
    run = probe(make_engine(eng.url), "needle", tokens=2000, depths=[10, 50, 90], decoys=2)
    assert run.status == "done", run.reason
    assert cells(run) == {"10": "HIT", "50": "HIT", "90": "HIT"} and run.passed is True
    assert run.headline == "HIT HIT HIT"
    (row,) = run.result["rows"]
    # counted by the engine's /tokenize (the simulator counts one token per word), within 2 % or 32 tokens
    assert abs(row["tokens"] - 2000) <= 32 and run.result["counted_by"] == "tokenize"
    assert run.cases.count() == 9 and run.config["warmup"]["ok"] is True
    case = run.cases.first()
    assert len(case.detail["decoys"]) == 2 and case.detail["needle"] in case.text


def test_needle_decoy_and_miss_by_depth(sim, make_engine):
    eng = sim("vllm", needle_recall="10:1,50:1,90:0", needle_decoy=1.0)
    run = probe(make_engine(eng.url), "needle", tokens=1500, depths=[10, 90], decoys=2)
    assert cells(run) == {"10": "HIT", "90": "DECOY"} and run.passed is False
    assert run.result["rows"][0]["cells"]["90"]["decoy_depths"] == [56.7]  # the decoy nearest the needle won
    deep = run.cases.filter(label="90%").first()
    assert deep.detail["decoy"]["value"] in deep.text and deep.detail["needle"] not in deep.text
    eng.cfg.needle_decoy = 0.0
    run = probe(make_engine(eng.url, name="eng2"), "needle", tokens=1500, depths=[90], decoys=2)
    assert cells(run) == {"90": "MISS"}


def test_needle_control_corpus_and_llamacpp_tokenize(sim, make_engine):
    eng = sim("llamacpp", max_model_len=8192)
    run = probe(make_engine(eng.url, kind="llamacpp", window=8192), "needle", tokens=1000, depths=[50], control=True)
    assert run.status == "done", run.reason
    assert cells(run) == {"50": "HIT"} and cells(run, "orchard") == {"50": "HIT"}
    assert [r["control"] for r in run.result["rows"]] == [False, True]


def test_needle_over_the_window_is_refused_not_scored(sim, make_engine):
    eng = sim("vllm", max_model_len=4096)
    run = probe(make_engine(eng.url, window=4096), "needle", tokens=8000)
    assert run.status == "refused" and "4,096" in run.reason and run.cases.count() == 0


def test_soak_clean_then_degenerate_with_its_onset(sim, make_engine):
    eng = sim("vllm", rate=20000.0)
    engine = make_engine(eng.url)
    run = probe(engine, "soak", tokens=3000)
    assert run.status == "done" and run.passed is True and run.result["degenerate"] == 0
    assert all(len(c.text.split()) >= 2900 for c in run.cases.all())  # the text is kept
    eng.cfg.degenerate_after = 1500
    run = probe(engine, "soak", tokens=3000)
    assert run.passed is False and run.result["degenerate"] == 3
    case = run.cases.first()
    assert case.detail["kind"] == "hex" and abs(case.detail["onset_token"] - 1500) <= 2
    eng.cfg.degenerate_mode = "loop"
    run = probe(engine, "soak", tokens=3000)
    assert run.cases.first().detail["kind"] == "repeat" and run.passed is False


def test_tool_call_valid_strings_and_broken(sim, make_engine):
    eng = sim("vllm")
    engine = make_engine(eng.url)
    run = probe(engine, "tool")
    assert run.passed is True and run.result["raw_valid"] == 3
    eng.cfg.tool_calls = "strings"
    run = probe(engine, "tool")
    assert run.passed is False and run.result["raw_valid"] == 0 and run.result["coerced_valid"] == 3
    case = run.cases.first()
    assert case.verdict == "strings" and "is not of type" in case.detail["raw_error"]
    eng.cfg.tool_calls = "broken"
    assert probe(engine, "tool").result["verdicts"] == {"unparsed": 3}
    eng.cfg.tool_calls = "none"
    assert probe(engine, "tool").result["verdicts"] == {"no_call": 3}


@pytest.mark.parametrize("mode,verdict", [("honoured", "ok"), ("inert", "inert"), ("inverted", "inverted")])
def test_thinking_ok_inert_inverted(sim, make_engine, mode, verdict):
    eng = sim("vllm", reasoning_tokens=200, reasoning_effort=mode)
    run = probe(make_engine(eng.url), "thinking")
    assert run.status == "done", run.reason
    assert run.result["verdict"] == verdict and run.passed is (verdict == "ok")
    assert run.result["arms"]["off"]["reasoning"] == 0 and run.result["arms"]["off"]["content_chars"] > 0


def test_contract_clamp_and_reject(sim, make_engine):
    eng = sim("vllm", max_model_len=2048)
    engine = make_engine(eng.url, window=2048)
    run = probe(engine, "contract")
    assert run.status == "done", run.reason
    over, alone = run.result["cases"]["prompt+max_tokens"], run.result["cases"]["prompt alone"]
    assert over["behaviour"] == "clamped" and over["finish_reason"] == "length"
    assert alone["behaviour"] == "rejected" and alone["http_status"] == 400
    assert alone["message"].startswith("This model's maximum context length is 2048")  # the engine's own words
    eng.cfg.over_window = "reject"
    run = probe(engine, "contract")
    assert run.result["cases"]["prompt+max_tokens"]["behaviour"] == "rejected"
    assert run.headline.startswith("prompt + max_tokens over: HTTP 400")


def test_needle_an_answer_that_repeats_the_haystack_is_ambiguous_not_a_hit(sim, make_engine):
    eng = sim("vllm", needle_echo=True)
    run = probe(make_engine(eng.url), "needle", tokens=1200, depths=[50], decoys=2)
    assert cells(run) == {"50": "AMBIGUOUS"} and run.passed is False
    case = run.cases.first()
    assert case.detail["needle"] in case.text and all(d["value"] in case.text for d in case.detail["decoys"])


def test_contract_on_llamacpp_clamps_at_n_ctx_and_rejects_a_prompt_over_it(sim, make_engine):
    eng = sim("llamacpp", max_model_len=2048, slots=1)
    run = probe(make_engine(eng.url, kind="llamacpp", window=2048), "contract")
    over, alone = run.result["cases"]["prompt+max_tokens"], run.result["cases"]["prompt alone"]
    assert over["behaviour"] == "clamped" and alone["behaviour"] == "rejected"
    assert "exceeds the available context size" in alone["message"]


def test_needle_on_an_engine_without_tokenize_counts_through_usage(sim, make_engine):
    eng = sim("sglang")
    run = probe(make_engine(eng.url, kind="sglang"), "needle", tokens=900, depths=[50])
    assert run.status == "done", run.reason
    assert run.result["counted_by"] == "usage" and cells(run) == {"50": "HIT"}
    (row,) = run.result["rows"]
    assert abs(row["tokens"] - 900) <= 32  # the engine's own count of the prompt it was sent


def test_an_engine_answering_html_fails_the_needle_with_its_reason(scripted, make_engine):
    page = b"<!DOCTYPE html><html><body>502 Bad Gateway</body></html>"
    server = scripted(lambda body: (502, "text/html", [page], False))
    run = probe(make_engine(server.url), "needle", tokens=500, depths=[50])
    assert run.status == "failed" and run.cases.count() == 0
    assert run.reason.startswith("could not count the haystack's tokens on the engine")


def test_a_tool_probe_whose_every_request_fails_is_failed_not_scored(scripted, make_engine):
    server = scripted(lambda body: (503, "application/json", [b'{"error": "overloaded"}'], False))
    run = probe(make_engine(server.url), "tool")
    assert run.status == "failed" and run.passed is None and "overload ×3" in run.reason
    assert run.cases.filter(bucket="overload").count() == 3
