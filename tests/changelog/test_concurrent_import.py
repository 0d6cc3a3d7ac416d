"""Two imports of one file at the same moment (issue 14, item 4): each entry, correction and
retired engine record exists once. The threads are real database sessions; a barrier makes
both plan before either writes, so the race that doubled every entry happens every time."""

import threading
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from dashboard.models import Engine, Host
from sparkops.changelog import importer
from sparkops.changelog.models import Claim, Correction, Entry, EvidenceLink, FlagChange

from .test_import_whole import OLD_ENGINES_LOG

FIXTURE = Path(__file__).parent.parent / "fixtures" / "changelog" / "spark-config-log.md"


def _counts():
    return {m.__name__: m.objects.count() for m in (Entry, Claim, FlagChange, Correction, EvidenceLink, Engine)}


@pytest.mark.django_db(transaction=True)
def test_two_imports_of_one_file_at_once_create_everything_once(tmp_path, monkeypatch):
    host = Host.objects.create(name="spark")
    for name, port in (("nemotron", 8012), ("q38", 8011)):
        Engine.objects.create(name=name, kind="vllm", url=f"http://127.0.0.1:{port}", host=host)
    log = tmp_path / "log.md"
    log.write_text(FIXTURE.read_text() + "\n" + OLD_ENGINES_LOG)
    with_correction = tmp_path / "more.md"
    with_correction.write_text(log.read_text() + "\n> Correction 2026-09-01: measured again, same result.\n")

    planned, real_plan = threading.local(), importer.plan_import
    barrier = threading.Barrier(2, timeout=30)

    def plan_then_wait(text):
        plan = real_plan(text)
        if not getattr(planned, "once", False):  # the first plan of each import: wait for the other's
            planned.once = True
            barrier.wait()
        return plan

    monkeypatch.setattr(importer, "plan_import", plan_then_wait)

    def race(path):
        outputs, errors = [], []

        def one():
            planned.once = False
            try:
                out = StringIO()
                call_command("changelog", "import", str(path), stdout=out)
                outputs.append(out.getvalue())
            except Exception as exc:  # reported by the assertion below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        barrier.reset()
        assert not errors, errors
        return outputs

    outputs = race(log)
    assert sorted(o.splitlines()[-1].split(",")[0] for o in outputs) == [
        "imported: 0 new entries",
        "imported: 5 new entries",
    ]
    once = _counts()
    assert once == {"Entry": 5, "Claim": 3, "FlagChange": 3, "Correction": 3, "EvidenceLink": 1, "Engine": 5}
    assert len(set(Entry.objects.values_list("fingerprint", flat=True))) == 5
    # A correction appended to the file, imported twice at once: one correction.
    race(with_correction)
    assert _counts() == {**once, "Correction": 4}
    assert Correction.objects.filter(text_md="measured again, same result.").count() == 1


def test_the_same_entry_twice_from_the_form_is_refused_with_a_message(operator_client):
    form = {
        "effective_at": "2026-08-20T09:00",
        "kind": "decision",
        "title": "Split the memory evenly",
        "flags": "",
        "body_md": "0.40 each",
        "units": "",
        "reason": "",
        "expected_effect": "",
        "claims-TOTAL_FORMS": "0",
        "claims-INITIAL_FORMS": "0",
    }
    assert operator_client.post("/changelog/new/", form).status_code == 302
    again = operator_client.post("/changelog/new/", form)
    assert again.status_code == 200 and "The log already has this entry" in again.content.decode()
    entry = Entry.objects.get()
    correction = {"target": "entry", "corrected_at": "2026-08-21T10:00", "text_md": "0.45 for the driver", "mark": ""}
    assert operator_client.post(f"/changelog/{entry.pk}/correct/", correction).status_code == 302
    page = operator_client.post(f"/changelog/{entry.pk}/correct/", correction, follow=True).content.decode()
    assert "already beside the entry" in page and entry.corrections.count() == 1
