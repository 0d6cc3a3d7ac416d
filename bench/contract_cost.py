"""CPU cost of the request contract on live traffic, per poll of one vLLM engine and per journal line.

Parses a busy simulated vLLM /metrics (prometheus_client's own exposition, every family
filled) with the collector's family list with and without the three contract families,
then times contract.vllm_metrics + contract.derive on a state that evolves poll after poll,
and contract.classify on llama-server's real log (tests/fixtures/llamacpp). Thread CPU time.

    .venv/bin/python bench/contract_cost.py [--polls 2000]
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from prometheus_client import generate_latest

from simulator.core import EngineConfig, Plan
from simulator.vllm import VLLMMetrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")


def metrics_text(metrics, plans):

    for plan in plans:
        metrics.success[plan.finish_reason].inc()
        metrics.e2e.observe(plan.e2e_s)
        metrics.prompt_tokens.observe(plan.prompt_tokens)
        metrics.ttft.observe(plan.ttft)
        metrics.itl.observe(0.02)
    return generate_latest(metrics.registry).decode()


def cpu(fn, n):
    start = time.thread_time()
    for i in range(n):
        fn(i)
    return (time.thread_time() - start) / n


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--polls", type=int, default=2000)
    args = parser.parse_args()
    import django

    django.setup()
    from sparkops.collectors import contract, prom, vllm

    cfg = EngineConfig(kind="vllm", max_model_len=131072, process_metrics=True)
    metrics = VLLMMetrics(cfg)
    plans = [
        Plan(1000 + 37 * i, 0, 100, 0, ("stop", "length", "abort")[i % 3], 0.2, False, False, e2e_s=1.0 + i % 50)
        for i in range(200)
    ]
    polls = 600  # 20 minutes of 2 s polls, counters rising: the ring reaches its full size
    texts = [metrics_text(metrics, plans[i % 200 : i % 200 + 3]) for i in range(polls)]
    without = prom.wanted_names(vllm.FAMILIES)
    print(f"/metrics body: {len(texts[-1]):,} bytes, {texts[-1].count(chr(10)):,} lines")
    parse_old = cpu(lambda i: prom.parse(texts[i % polls], without), args.polls)
    parse_new = cpu(lambda i: prom.parse(texts[i % polls], vllm.NAMES), args.polls)
    samples = [prom.parse(t, vllm.NAMES) for t in texts]
    state = {"s": {}}

    def derive(i):  # every 600th poll sees the counters go down (a restart): the ring starts over
        found = contract.vllm_metrics(samples[i % polls])
        _, state["s"] = contract.derive(found, state["s"], now=1000.0 + 2 * i, window=131072)

    derive_cost = cpu(derive, args.polls)
    lines = Path(ROOT, "tests/fixtures/llamacpp/b0-0c1e570_server_startup.log").read_text().splitlines()
    classify_cost = cpu(lambda i: contract.classify(lines[i % len(lines)]), args.polls * 10)
    print(f"parse without the contract families: {parse_old * 1e6:8.1f} µs/poll")
    print(f"parse with them:                     {parse_new * 1e6:8.1f} µs/poll (+{(parse_new - parse_old) * 1e6:.1f})")
    print(f"vllm_metrics + derive:               {derive_cost * 1e6:8.1f} µs/poll")
    print(f"journal line classify:               {classify_cost * 1e6:8.2f} µs/line")
    print(
        f"contract state: {len(json.dumps(state['s'])):,} bytes of JSON per engine ({len(state['s']['ring'])} ring entries)"
    )


if __name__ == "__main__":
    main()
