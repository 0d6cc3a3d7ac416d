"""The window raise of 2026-08-20, replayed: the claim, the restart the collector saw, the
ledger row at 10.31×, and the correction written beside the claim."""

import subprocess
import sys
import time

import httpx
import pytest

from dashboard.models import KVPoolEntry
from sparkops.changelog.grammar import parse_flags
from sparkops.changelog.models import Claim
from sparkops.changelog.services import entry_create
from sparkops.ports import free_port
from tests.polls import poll_one

from .conftest import at

CLAIM = "raising --max-model-len 131,072 → 262,144 allocates nothing"
# Nemotron's pools from the field report's KV-pool ledger, in blocks of 2 tokens.
BEFORE = {"max_model_len": 131072, "num_gpu_blocks": 2_777_998 // 2}  # 21.2× at 131,072
AFTER = {"max_model_len": 262144, "num_gpu_blocks": 2_703_604 // 2}  # 10.31× at 262,144


def _start_vllm(port, cfg):
    args = [
        sys.executable,
        "-m",
        "simulator.engine",
        "--kind",
        "vllm",
        "--name",
        "nemotron",
        "--port",
        str(port),
        "--block-size",
        "2",
        "--load-seconds",
        "0.1",
        "--max-model-len",
        str(cfg["max_model_len"]),
        "--num-gpu-blocks",
        str(cfg["num_gpu_blocks"]),
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.5).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    pytest.fail("simulated vLLM did not come up")


@pytest.fixture
def nemotron_sim(pair):
    port = free_port()
    engine = pair["nemotron"]
    engine.url = f"http://127.0.0.1:{port}"
    engine.save(update_fields=["url"])
    procs = []

    def start(cfg):
        procs.append(_start_vllm(port, cfg))

    def stop():
        procs[-1].terminate()
        procs[-1].wait(10)

    yield engine, start, stop
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(10)


@pytest.mark.django_db(transaction=True)
def test_window_raise_prediction_measurement_and_correction(nemotron_sim, operator, client):
    engine, start, stop = nemotron_sim
    start(BEFORE)
    poll_one(engine)
    before = KVPoolEntry.objects.get(engine=engine)
    assert (before.pool_tokens, before.window, before.concurrency) == (2_777_998, 131072, 21.19)

    entry = entry_create(
        author=operator,
        effective_at=at("2026-08-20 09:00"),
        kind="claim",
        engines=[engine],
        title="Raise --max-model-len to 262,144",
        flags=parse_flags("--max-model-len: 131072 → 262144"),
        claims=[{"text": CLAIM, "metric": "concurrency", "predicted": 10.6, "window": 262144, "engine": engine}],
        body_md="vLLM sizes its KV pool at boot from `--gpu-memory-utilization`.",
    )
    KVPoolEntry.objects.filter(pk=before.pk).update(recorded_at=at("2026-08-19 12:00"))

    stop()  # the restart with the new window: vLLM sizes a smaller pool
    start(AFTER)
    poll_one(engine)
    after = KVPoolEntry.objects.filter(engine=engine).latest("recorded_at")
    assert after.pk != before.pk and after.source == "collector" and after.previous_id == before.pk
    assert (after.pool_tokens, after.window, after.concurrency) == (2_703_604, 262144, 10.31)

    client.force_login(operator)
    page = client.get(entry.get_absolute_url()).content.decode()
    claim = entry.claims.get()
    assert "concurrency 10.6× at 262,144 on nemotron" in page and "10.31×" in page and "2.7 %" in page
    assert f'id="invite-{claim.pk}"' in page and "Write a correction against this claim" in page

    response = client.post(
        f"/changelog/{entry.pk}/correct/",
        {
            "corrected_at": "2026-08-20T14:00",
            "target": str(claim.pk),
            "mark": "superseded",
            "text_md": "Cheap, not free: the pool went 9.12 → 8.26 GiB (−2.7 %), 10.31× measured.",
            "evidence": "",
        },
    )
    assert response.status_code == 302

    claim = Claim.objects.get(pk=claim.pk)
    assert claim.text == CLAIM  # the original stays exactly as written
    correction = claim.corrections.get()
    assert correction.mark == "superseded" and correction.author == operator
    page = client.get(entry.get_absolute_url()).content.decode()
    section = page[page.index(f'id="claim-{claim.pk}"') :]
    assert CLAIM in section and "corrected on 2026-08-20 14:00" in section and "superseded" in section
    assert "Correction 2026-08-20 14:00" in section and "Cheap, not free" in section
    assert section.index(CLAIM) < section.index("Cheap, not free")  # beside it, not instead
    assert f'id="invite-{claim.pk}"' not in page  # the invitation is answered
