"""What the crawl (tests/test_crawl.py) found, each pinned by a test of its own.

They live apart from the crawl: its four tests share a world built in a module-scoped transaction,
and a test of the same module run after them in one process would see that world."""

import re
from urllib.parse import quote

import pytest
from django.http import QueryDict
from django.utils import timezone

from tests.test_crawl import HUGE

pytestmark = pytest.mark.django_db


@pytest.fixture
def host_incident(db):
    """What any kernel fault leaves: an incident with no engine and no unit."""
    from dashboard.models import Incident

    return Incident.objects.create(opened_at=timezone.now(), trigger="kernel_fault: Xid 79, GPU has fallen off the bus")


def test_ledgers_page_with_a_host_level_incident(viewer_client, host_incident):
    response = viewer_client.get("/changelog/ledgers/")
    assert response.status_code == 200 and "Xid 79" in response.content.decode()


def test_failed_kvpool_post_rerenders_beside_a_host_level_incident(operator_client, host_incident):
    response = operator_client.post("/changelog/ledgers/kvpool/add/", {"pool_tokens": "-5"})
    assert response.status_code == 400 and "Nothing was saved" in response.content.decode()


def test_closing_a_host_level_incident_names_no_engine(operator_client, host_incident):
    response = operator_client.get(f"/changelog/ledgers/incidents/{host_incident.pk}/close/")
    assert response.status_code == 200 and "<strong>—</strong>" in response.content.decode()


@pytest.mark.parametrize(
    "query",
    [
        {"a": HUGE, "b": "1"},
        {"a": "1", "b": "-" + HUGE},
        {"a": "-1", "b": "1"},
        {"a": "0", "b": "1"},
        {"a": "1e3", "b": "1"},
        {"a": "9223372036854775808", "b": "1"},
        {"a": "1"},
    ],
)
def test_compare_refuses_ids_no_run_can_have(viewer_client, query):
    response = viewer_client.get("/bench/compare/", query)
    page = response.content.decode()
    assert response.status_code == 400 and "Pick two runs" in page
    assert re.search(r"[ab] (must be a whole number|is required: a whole number) from 1 to 9223372036854775807", page)


def test_compare_of_absent_runs_in_range_is_404(viewer_client):
    assert viewer_client.get("/bench/compare/", {"a": "9223372036854775807", "b": "1"}).status_code == 404


def test_int_param():
    from dashboard.params import DB_INT_MAX, ParamError, int_param

    assert int_param(QueryDict("a=12"), "a") == 12 and int_param(QueryDict("a=+7&a=%2012%20"), "a") == 12
    assert int_param(QueryDict(""), "a", default=3) == 3 and int_param(QueryDict("a="), "a") is None
    assert int_param(QueryDict(f"a={DB_INT_MAX}"), "a") == DB_INT_MAX
    assert int_param(QueryDict("a=-5"), "a", minimum=-10) == -5
    for bad in (HUGE, str(DB_INT_MAX + 1), "0", "-1", "1.5", "1e3", "x", "١٢", "0x10"):
        with pytest.raises(ParamError, match="a must be a whole number"):
            int_param(QueryDict(f"a={quote(bad)}"), "a")
    with pytest.raises(ParamError, match="a is required"):
        int_param(QueryDict(""), "a", required=True)


@pytest.mark.parametrize(
    "path",
    [
        "/engines/%00/",
        "/hosts/%00/",
        "/charts/engine/%00.json",
        "/alerts/?engine=%00",
        "/coresidency/?a=%00",
        "/changelog/?q=a%00b",
    ],
)
def test_nul_anywhere_is_a_400(viewer_client, path):
    response = viewer_client.get(path)
    assert response.status_code == 400 and "NUL character" in response.content.decode()


def test_nul_in_a_form_is_a_400_and_changes_nothing(operator_client, fleet):
    from sparkops.alerts.models import MaintenanceWindow

    response = operator_client.post("/alerts/maintenance/new", {"reason": "a\x00b", "hours": "1"})
    assert response.status_code == 400 and not MaintenanceWindow.objects.exists()


@pytest.mark.parametrize("day", ["9999-12-31", "0001-01-01"])
def test_timeline_filter_days_out_of_range_are_explained(viewer_client, day):
    response = viewer_client.get("/changelog/", {"start": day, "end": day})
    assert response.status_code == 200 and "Pick a day" in response.content.decode()


@pytest.mark.parametrize("url", ["/login/", "/admin/login/"])
def test_login_with_a_huge_user_name_is_refused_not_500(client, url):
    response = client.post(url, {"username": "x" * 5000, "password": "wrong"})
    assert response.status_code == 200 and "username" in response.content.decode().lower()


@pytest.mark.parametrize(
    "next_, expected",
    [("1", None), ("nan", None), ("https://evil.example/", None), ("//evil.example/", None), ("/alerts/", "/alerts/")],
)
def test_ack_goes_back_only_to_a_path_on_this_site(operator_client, fleet, next_, expected):
    from sparkops.alerts.services import external_alert_fire

    event = external_alert_fire(
        rule="engine_down", severity="critical", engine=fleet["vllm"], subject="vllm-main", message="down"
    )
    response = operator_client.post(f"/alerts/{event.pk}/ack", {"next": next_})
    assert response.status_code == 302 and response["Location"] == (expected or f"/alerts/{event.pk}/")


@pytest.mark.parametrize("evidence", ["alert:2147483648", "run:" + HUGE])
def test_evidence_ids_past_the_database_are_form_errors(operator_client, fleet, evidence):
    from sparkops.changelog.models import Entry

    response = operator_client.post(
        "/changelog/new/",
        {
            "effective_at": timezone.now().strftime("%Y-%m-%dT%H:%M"),
            "kind": "decision",
            "title": "t",
            "evidence": evidence,
            "claims-TOTAL_FORMS": "0",
            "claims-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 200 and "takes an id from 1 to 2147483647" in response.content.decode()
    assert not Entry.objects.exists()


def test_kv_memory_past_the_database_is_a_form_error(operator_client, fleet):
    from dashboard.models import KVPoolEntry

    response = operator_client.post(
        "/changelog/ledgers/kvpool/add/",
        {"recorded_at": "2026-08-20T14:00", "engine": fleet["vllm"].pk, "kv_memory_gib": "1e300", "pool_tokens": "1"},
    )
    assert response.status_code == 400 and not KVPoolEntry.objects.exists()


@pytest.mark.parametrize("action", ["change", "history", "delete"])
def test_admin_of_a_one_to_one_keyed_model_with_a_huge_id(admin_client_, action):
    response = admin_client_.get(f"/admin/changelog/searchdocument/{HUGE}/{action}/")
    assert response.status_code in (302, 403, 404)  # 403: the delete page of a read-only model
