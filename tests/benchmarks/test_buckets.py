"""Every failure lands in its own bucket and never inside a speed figure."""

import httpx
import pytest

from sparkops.benchmarks.services import run_create, run_execute
from sparkops.benchmarks.spec import RunSpec

from .servers import delta_chunk, finish_chunk, sse, usage_chunk

pytestmark = pytest.mark.django_db(transaction=True)
TOKENS = [
    delta_chunk(role="assistant", content=""),
    delta_chunk(content="a"),
    delta_chunk(content="b"),
    delta_chunk(content="c"),
    delta_chunk(content="d"),
]
OK = [*TOKENS, finish_chunk(), usage_chunk(4), sse(b"[DONE]")]
CAPACITY_400 = (
    b'{"error":{"code":400,"message":"request (1811 tokens) exceeds the available context size '
    b'(256 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":1811,"n_ctx":256}}'
)

SCRIPTS = {
    "capacity": (400, "application/json; charset=utf-8", [CAPACITY_400], False),
    "overload": (429, "application/json", [b'{"error":{"message":"too many requests","code":429}}'], False),
    "server_error": (500, "text/plain", [b"Internal Server Error"], False),
    "disconnect": (200, "text/event-stream", TOKENS[:3], True),
    "malformed": (200, "text/event-stream", [*TOKENS[:2], b"data: {not json\n\n", *OK[2:]], False),
    "truncated": (
        200,
        "text/event-stream",
        [*TOKENS[:3], finish_chunk("length"), usage_chunk(2), sse(b"[DONE]")],
        False,
    ),
    "empty": (200, "text/event-stream", [TOKENS[0], finish_chunk("stop"), usage_chunk(0), sse(b"[DONE]")], False),
}


def run_against(url, engine_factory, **kw):
    engine = engine_factory(url)
    spec = RunSpec(
        engine_name=engine.name,
        engine_kind=engine.kind,
        base_url=engine.base_url,
        depth=0,
        output_tokens=4,
        reps=1,
        **kw,
    )
    return run_execute(run=run_create(engine=engine, spec=spec))


@pytest.mark.parametrize("bucket", sorted(SCRIPTS))
def test_bucket(bucket, scripted, make_engine):
    server = scripted(lambda body: SCRIPTS[bucket])
    run = run_against(server.url, make_engine)
    rep = run.repetitions.get()
    assert (rep.ok, rep.bucket) == (False, bucket), rep.error
    assert rep.decode_tokens_per_s is None and rep.ttft_ms is None
    assert run.status == "failed" and run.stats["errors"] == {bucket: 1}
    assert run.stats["decode_tokens_per_s"] == {"n": 0}


def test_error_chunk_mid_stream_is_server_error(scripted, make_engine):
    dead = sse({"error": {"message": "EngineCore encountered an issue.", "type": "InternalServerError", "code": 500}})
    server = scripted(lambda body: (200, "text/event-stream", [*TOKENS[:3], dead, sse(b"[DONE]")], False))
    rep = run_against(server.url, make_engine).repetitions.get()
    assert rep.bucket == "server_error" and "EngineCore" in rep.error


def test_timeout(scripted, make_engine):
    server = scripted(lambda body: (*SCRIPTS["disconnect"][:3], False), part_delay=1.0)
    rep = run_against(server.url, make_engine, timeout_s=0.4).repetitions.get()
    assert rep.bucket == "timeout"


def test_missing_usage_is_malformed_not_a_speed(scripted, make_engine):
    server = scripted(lambda body: (200, "text/event-stream", [*TOKENS, finish_chunk(), sse(b"[DONE]")], False))
    rep = run_against(server.url, make_engine).repetitions.get()
    assert rep.bucket == "malformed" and "usage" in rep.error


def test_ok_and_failed_reps_are_kept_apart(scripted, make_engine):
    answers = iter([OK, OK, SCRIPTS["overload"], OK])  # warm-up, rep 0, rep 1, rep 2

    def script(body):
        parts = next(answers)
        return parts if isinstance(parts, tuple) else (200, "text/event-stream", parts, False)

    server = scripted(script)
    engine = make_engine(server.url)
    spec = RunSpec(
        engine_name=engine.name, engine_kind=engine.kind, base_url=engine.base_url, depth=0, output_tokens=4, reps=3
    )
    run = run_execute(run=run_create(engine=engine, spec=spec))
    assert run.status == "done"
    assert run.stats["errors"] == {"overload": 1} and run.stats["decode_tokens_per_s"]["n"] == 2


def test_capacity_from_simulated_vllm_when_the_reading_is_stale(sim, make_engine):
    """The collector's window is stale (bigger than the engine's): the 400 is a capacity error."""
    eng = sim("vllm", max_model_len=300)
    engine = make_engine(eng.url, window=100000)
    spec = RunSpec(
        engine_name=engine.name, engine_kind=engine.kind, base_url=engine.base_url, depth=400, output_tokens=16, reps=1
    )
    run = run_execute(run=run_create(engine=engine, spec=spec))
    assert run.status == "failed"
    assert run.repetitions.get().bucket == "capacity"


def test_truncated_by_vllm_clamping(sim, make_engine):
    """vLLM >= 0.32 clamps max_tokens to the window silently: finish_reason length, fewer tokens."""
    eng = sim("vllm", max_model_len=400)
    engine = make_engine(eng.url, window=100000)
    spec = RunSpec(
        engine_name=engine.name, engine_kind=engine.kind, base_url=engine.base_url, depth=300, output_tokens=200, reps=1
    )
    rep = run_execute(run=run_create(engine=engine, spec=spec)).repetitions.get()
    assert rep.bucket == "truncated" and "of 200" in rep.error


def test_overload_from_loading_llamacpp(sim, make_engine):
    eng = sim("llamacpp", load_seconds=60)
    run = run_against(eng.url, lambda url: make_engine(url, kind="llamacpp"))
    assert run.repetitions.get().bucket == "overload"


def test_engine_crash_is_a_disconnect(sim, make_engine):
    eng = sim("vllm", rate=50.0)
    engine = make_engine(eng.url)
    spec = RunSpec(
        engine_name=engine.name, engine_kind=engine.kind, base_url=engine.base_url, depth=0, output_tokens=400, reps=1
    )
    import threading

    threading.Timer(1.0, lambda: httpx.post(eng.url + "/_sim/fault", json={"kind": "crash"})).start()
    rep = run_execute(run=run_create(engine=engine, spec=spec)).repetitions.get()
    assert rep.bucket in ("disconnect", "server_error"), rep.error
