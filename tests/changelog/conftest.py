"""The DGX Spark pair from the field report: vllm-nemotron (:8012) and vllm-q38 (:8011)."""

from datetime import UTC, datetime

import pytest

from dashboard.models import Engine, Host


def at(text):
    """'2026-08-20 09:00' as an aware UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def pair(db):
    host = Host.objects.create(name="spark")
    nemotron = Engine.objects.create(
        name="nemotron", kind="vllm", url="http://127.0.0.1:8012", host=host, unit="vllm-nemotron.service", status="up"
    )
    q38 = Engine.objects.create(
        name="q38", kind="vllm", url="http://127.0.0.1:8011", host=host, unit="vllm-q38.service", status="up"
    )
    return {"host": host, "nemotron": nemotron, "q38": q38}
