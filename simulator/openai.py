"""A plain OpenAI-compatible server: only /v1/models and /v1/chat/completions (no
/health, no /metrics), so SparkOps can only tell up/down and the served model names."""

from __future__ import annotations

from .chat import OpenAIChatEngine


class PlainOpenAIEngine(OpenAIChatEngine):
    kind = "openai"
    owned_by = "openai"
    server_header = ""

    def boot_log(self) -> None:
        self.log(f"serving {self.cfg.model} on http://{self.cfg.host}:{self.cfg.port or '(pending)'}")

    def fatal_log(self, kind: str) -> None:
        self.log("fatal: CUDA error: an illegal instruction was encountered")
