"""Evidence that names an alert event or a benchmark run by id links to its page, on the entry and on its
corrections, and the link works."""

import re

import pytest
from django.template.loader import render_to_string

from sparkops.alerts.services import external_alert_fire
from sparkops.benchmarks.models import Run
from sparkops.changelog.grammar import parse_evidence
from sparkops.changelog.models import EvidenceLink
from sparkops.changelog.services import correction_create, entry_create

from .conftest import at

pytestmark = pytest.mark.django_db


@pytest.fixture
def alert(pair):
    return external_alert_fire(
        rule="engine_down",
        severity="critical",
        engine=pair["nemotron"],
        subject="nemotron",
        message="nemotron exited with status 0",
        cause="exit0_no_restart",
    )


def _links(html):
    return dict((text, href) for href, text in re.findall(r'<a href="([^"]+)">([^<]+)</a>', html))


def test_alert_evidence_links_to_the_alert_page_and_the_link_answers(viewer_client, pair, alert):
    entry = entry_create(
        effective_at=at("2026-08-24 07:00"),
        kind="incident_note",
        title="Restart=always",
        evidence=[parse_evidence(f"alert:{alert.pk}")],
    )
    correction_create(entry=entry, text_md="It was the unit.", evidence=[parse_evidence(f"alert:{alert.pk}")])
    page = viewer_client.get(entry.get_absolute_url()).content.decode()
    href = _links(page).get(f"alert event #{alert.pk}")
    assert href == f"/alerts/{alert.pk}/", f"no link to the alert in {page[:3000]}"
    assert page.count(f'<a href="/alerts/{alert.pk}/">alert event #{alert.pk}</a>') == 2  # entry and correction
    followed = viewer_client.get(href)
    assert followed.status_code == 200 and "nemotron exited with status 0" in followed.content.decode()


def test_run_evidence_links_to_the_run_page_and_the_link_answers(viewer_client, pair):
    run = Run.objects.create(engine=pair["q38"], params_hash="h", status="done")
    entry = entry_create(
        effective_at=at("2026-08-24 07:00"),
        kind="measurement",
        title="Measured",
        evidence=[parse_evidence(f"run:{run.pk}")],
    )
    href = _links(viewer_client.get(entry.get_absolute_url()).content.decode()).get(f"benchmark run #{run.pk}")
    assert href == f"/bench/runs/{run.pk}/" and viewer_client.get(href).status_code == 200


def test_url_and_chart_evidence_render_as_before(pair):
    entry = entry_create(
        effective_at=at("2026-08-24 07:00"),
        kind="decision",
        title="t",
        evidence=[
            parse_evidence("https://example.test/log"),
            parse_evidence("chart:2026-08-20T09:00/2026-08-20T10:00"),
        ],
    )
    url, chart = EvidenceLink.objects.filter(entry=entry).order_by("pk")
    assert render_to_string("changelog/_evidence.html", {"ev": url}).strip() == (
        '<a href="https://example.test/log" rel="noopener noreferrer nofollow">https://example.test/log</a>'
    )
    assert (
        render_to_string("changelog/_evidence.html", {"ev": chart}).strip()
        == "chart 2026-08-20 09:00 – 2026-08-20 10:00"
    )
