"""Simulated LLM engines (vLLM, llama.cpp, SGLang, plain OpenAI) with fault injection, a
systemd-like supervisor and CLI stand-ins (systemctl, journalctl, nvidia-smi).

Importable without Django settings: nothing here touches Django models.
"""

from __future__ import annotations

__all__ = ["EngineConfig", "Simulation", "main", "serve_many"]


def __getattr__(name: str):  # lazy, so `python -m simulator.bin.*` stays fast
    if name == "EngineConfig":
        from .core import EngineConfig

        return EngineConfig
    if name == "Simulation":
        from .client import Simulation

        return Simulation
    if name == "serve_many":
        from .fleet import serve_many

        return serve_many
    if name == "main":
        from .cli import main

        return main
    raise AttributeError(name)
