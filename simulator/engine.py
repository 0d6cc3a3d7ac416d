"""Run one simulated engine in this process:

    python -m simulator.engine --kind vllm --name NAME --port P [--rate 40 ...]

Every EngineConfig field is a flag (`--max-model-len 8192`, `--background-rps 2`, ...).
Log lines go to stdout (the supervisor turns them into journal records). SIGTERM/SIGINT
stop it cleanly with status 0; the `exit0` fault exits 0 and `crash` exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from dataclasses import fields
from typing import Any

from .core import EngineConfig
from .llamacpp import LlamaCppEngine
from .openai import PlainOpenAIEngine
from .sglang import SGLangEngine
from .vllm import VLLMEngine


def engine_class(kind: str):

    return {"vllm": VLLMEngine, "llamacpp": LlamaCppEngine, "sglang": SGLangEngine, "openai": PlainOpenAIEngine}[kind]


async def create_engine(cfg: EngineConfig, **kw: Any):
    """Build and start an engine in the running loop; returns it once it listens."""
    engine = engine_class(cfg.kind)(cfg, **kw)
    await engine.start()
    return engine


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m simulator.engine", description="Run one simulated LLM engine.")
    for f in fields(EngineConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            p.add_argument(flag, action="store_true")
        else:
            p.add_argument(flag, default=None)
    return p


def config_from_args(argv) -> EngineConfig:
    ns = parser().parse_args(argv)
    return EngineConfig.from_options({k: v for k, v in vars(ns).items() if v not in (None, False)})


async def run(cfg: EngineConfig) -> int:
    def out(line: str) -> None:
        print(line, flush=True)

    engine = await create_engine(cfg, log=out)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: engine.exit_code.done() or engine.exit_code.set_result(0))
    code = await engine.exit_code
    await engine.close()
    return code


def main(argv=None) -> int:
    try:
        cfg = config_from_args(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cfg.process_metrics = True  # a real process exposes process_*/python_* like vLLM's default registry
    return asyncio.run(run(cfg))


if __name__ == "__main__":
    sys.exit(main())
