"""Collectors: one module per source. Importing the package registers every engine collector."""

from sparkops.collectors import llamacpp, openai, sglang, vllm  # noqa: F401  (registration)
from sparkops.collectors.base import REGISTRY, collector_for  # noqa: F401
