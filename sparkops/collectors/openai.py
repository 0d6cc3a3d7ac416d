"""Any OpenAI-compatible server: /v1/models only — up/down and the served model names."""

from collections.abc import Mapping
from typing import ClassVar

from sparkops.collectors.base import Answer, EngineCollector, Snapshot, answered, register


@register
class OpenAICollector(EngineCollector):
    kind = "openai"
    liveness_path = "/v1/models"
    endpoints: ClassVar[dict[str, str]] = {"models": "/v1/models"}
    required = ("models",)

    def parse(self, bodies: Mapping[str, Answer]) -> Snapshot:
        payload = answered(bodies, "models").json()
        if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
            return Snapshot(status="down", error="models: not an OpenAI model list")
        models, window = self.openai_models(payload)
        return Snapshot(status="up", models=models, kv={"window": window})
