"""Collectors: one module per source. Importing the package registers every engine collector."""

from dashboard.collectors import llamacpp, openai, sglang, vllm  # noqa: F401  (registration)
from dashboard.collectors.base import REGISTRY, collector_for  # noqa: F401
