"""Audit thresholds stored per box: `sparkops audit --save/--reset/--thresholds`, the audit page's
form (admins; errors at the field, bounds), and the audit, card badge and CLI using them."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from dashboard.models import AuditThreshold, ConfigSnapshot, Engine, Host
from sparkops.audit.run import audit_host
from sparkops.audit.thresholds import stored_overrides
from sparkops.launch.observer import failing_counts

ENV = {
    "MAX_JOBS": "8",
    "NVCC_THREADS": "1",
    "TORCHINDUCTOR_COMPILE_THREADS": "4",
    "FLASHINFER_NVCC_THREADS": "1",
    "PATH": "/usr/local/cuda/bin:/usr/bin",
    "CUDA_HOME": "/usr/local/cuda",
}


@pytest.fixture
def box(db):
    from django.utils import timezone

    host = Host.objects.create(name="spark-a")
    engine = Engine.objects.create(name="nemotron", kind="vllm", url="http://127.0.0.1:9", host=host, unit="n.service")
    data = {"unit": {"unit": "n.service", "restart": "on-failure"}, "environment": ENV, "flags": {"flags": {}}}
    ConfigSnapshot.objects.create(engine=engine, observed_at=timezone.now(), hash="x" * 64, data=data)
    return host, engine


def caps(host):
    (r,) = [r for r in audit_host(host) if r.check == "compile_caps"]
    return r


def cli(*args):
    out = io.StringIO()
    try:
        call_command("audit", "--host", "spark-a", "--no-observe", *args, stdout=out)
    except SystemExit as exc:
        return exc.code, out.getvalue()
    return 0, out.getvalue()


def test_save_reset_and_list_from_the_cli_and_the_audit_uses_the_stored_value(box):
    host, engine = box
    assert caps(host).status == "fail" and "MAX_JOBS=8" in caps(host).evidence  # default max_jobs 4
    failing = {r.check for r in audit_host(host) if r.status == "fail"}
    assert failing_counts([engine])[engine.pk] == len(failing) and "compile_caps" in failing, failing
    code, text = cli("--save", "compile_caps.max_jobs=8")
    assert code == 0 and "spark-a: compile_caps.max_jobs saved" in text
    row = AuditThreshold.objects.get(host=host)
    assert (row.check_key, row.name, row.value) == ("compile_caps", "max_jobs", "8")
    assert caps(host).status == "pass"
    assert failing_counts([engine])[engine.pk] == len(failing) - 1  # the card badge counts with the stored value
    code, text = cli("--json")
    assert code == 1  # Restart= still fails
    assert [r["status"] for r in json.loads(text)["results"] if r["check"] == "compile_caps"] == ["pass"]
    # --set still overrides for one run, over the stored value, and stores nothing.
    code, text = cli("--set", "compile_caps.max_jobs=2", "--json")
    assert [r["status"] for r in json.loads(text)["results"] if r["check"] == "compile_caps"] == ["fail"]
    assert AuditThreshold.objects.get(host=host).value == "8"
    code, text = cli("--thresholds", "--json")
    rows = {r["threshold"]: r for r in json.loads(text)["thresholds"]}
    assert rows["compile_caps.max_jobs"] == {
        "threshold": "compile_caps.max_jobs",
        "default": 4,
        "stored": 8,
        "in_force": 8,
        "bounds": [1, 256],
    }
    assert rows["memory_share_sum.headroom"]["stored"] is None
    code, text = cli("--reset", "compile_caps.max_jobs")
    assert not AuditThreshold.objects.exists() and caps(host).status == "fail"


@pytest.mark.parametrize(
    "pair, message",
    [
        ("compile_caps.max_jobs=0", "max_jobs must be between 1 and 256 (got 0)"),
        ("compile_caps.max_jobs=lots", "max_jobs takes a whole number (got 'lots')"),
        ("memory_share_sum.headroom=0.95", "headroom must be between 0 and 0.9 (got 0.95)"),
        ("memory_share_sum.headroom=nan", "headroom takes a number (got 'nan')"),
        ("cuda_on_path.cuda_bin=cuda/bin", "cuda_bin is an absolute directory"),
        ("compile_caps.max_job=4", "is not CHECK.THRESHOLD=VALUE; thresholds: restart_always_bounded.max_burst"),
    ],
)
def test_a_bad_value_is_refused_with_why_and_stores_nothing(box, pair, message):
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cli("--save", pair)
    with pytest.raises(CommandError):
        cli("--set", pair)
    assert not AuditThreshold.objects.exists()


def test_a_stored_row_the_code_no_longer_takes_is_ignored(box):
    host, _engine = box
    AuditThreshold.objects.create(host=host, check_key="retired_check", name="x", value="1")
    AuditThreshold.objects.create(host=host, check_key="compile_caps", name="max_jobs", value="9999")
    assert caps(host).status == "fail"  # max_jobs out of bounds: the default applies
    assert stored_overrides(host.pk) == {}


def test_admins_edit_thresholds_on_the_audit_page_with_errors_at_the_field(box, client, admin_user, viewer):
    host, _engine = box
    url = f"/hosts/{host.name}/audit/"
    client.force_login(viewer)
    page = client.get(url).content.decode()
    assert 'id="thresholds"' in page and "thresholds-form" not in page  # a viewer reads the values
    assert "compile_caps.max_jobs" in page
    assert client.post(url, {"compile_caps__max_jobs": "8"}).status_code == 403
    client.force_login(admin_user)
    form = client.get(url).context["form"]
    fields = {name: form[name].value() for name in form.fields}
    assert fields["compile_caps__max_jobs"] == 4 and fields["memory_share_sum__headroom"] == 0.15
    bad = client.post(url, {**fields, "compile_caps__max_jobs": "0", "memory_share_sum__headroom": "much"})
    assert bad.status_code == 400
    errors = bad.context["form"].errors
    assert errors["compile_caps__max_jobs"] == ["Ensure this value is greater than or equal to 1."]
    assert errors["memory_share_sum__headroom"] == ["Enter a number."]
    assert 'value="much"' in bad.content.decode()  # the input kept
    assert not AuditThreshold.objects.exists()
    ok = client.post(url, {**fields, "compile_caps__max_jobs": "8"}, follow=True)
    assert ok.redirect_chain[-1][0] == url
    assert "Saved compile_caps.max_jobs." in ok.content.decode()
    assert AuditThreshold.objects.get(host=host).updated_by == admin_user
    assert caps(host).status == "pass"
    assert 'data-check="compile_caps"' in ok.content.decode() and "audit-pass" in ok.content.decode()
    again = client.post(url, {**fields, "compile_caps__max_jobs": "4"}, follow=True)
    assert "Saved compile_caps.max_jobs." in again.content.decode() and not AuditThreshold.objects.exists()
