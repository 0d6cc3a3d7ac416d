import pytest

from .servers import WebhookReceiver, start_smtp


@pytest.fixture
def receiver():
    r = WebhookReceiver()
    yield r
    r.close()


@pytest.fixture
def smtp(settings):
    controller, sink = start_smtp()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = controller.port
    yield sink
    controller.stop()


@pytest.fixture
def fast_retry(settings):
    settings.SPARKOPS_ALERT_RETRY_BASE_S = 0.2
    settings.SPARKOPS_ALERT_RETRY_CAP_S = 1.0


@pytest.fixture
def channels(fleet, receiver, smtp):
    """The standard fleet's channels pointed at the real loopback receivers."""
    hook = fleet["webhook"]
    hook.config = {"url": receiver.url, "format": "sparkops"}
    hook.save()
    return {"webhook": hook, "email": fleet["email"]}
