from dashboard.models import Engine, Host
from sparkops.changelog.models import Correction, Entry
from sparkops.changelog.selectors import chart_annotations

from .conftest import at


def test_annotations_cover_range_engine_and_corrections(pair):
    other_host = Host.objects.create(name="spark-2")
    side = Engine.objects.create(name="vllm-main", kind="vllm", url="http://127.0.0.1:18001", host=other_host)
    raise_ = Entry.objects.create(effective_at=at("2026-08-20 09:00"), kind="flag_change", title="Raise the window")
    raise_.engines.add(pair["nemotron"])
    Entry.objects.create(
        effective_at=at("2026-08-20 10:00"), kind="decision", title="MAX_JOBS=4 everywhere"
    )  # box-wide
    other = Entry.objects.create(effective_at=at("2026-08-20 11:00"), kind="claim", title="vllm-main only")
    other.engines.add(side)
    Entry.objects.create(effective_at=at("2026-08-25 09:00"), kind="claim", title="outside the range")
    Correction.objects.create(entry=raise_, text_md="Cost 2.7 % of the pool.", corrected_at=at("2026-08-21 00:00"))

    got = chart_annotations(engine=pair["nemotron"], start=at("2026-08-19 00:00"), end=at("2026-08-21 00:00"))
    assert [a["title"] for a in got] == ["Raise the window", "MAX_JOBS=4 everywhere"]
    assert got[0]["corrected"] is True and got[1]["corrected"] is False
    assert got[0]["time"] == "2026-08-20T09:00:00+00:00"
    assert got[0]["url"] == f"/changelog/{raise_.pk}/" and got[0]["kind"] == "flag_change"

    by_host = chart_annotations(host=other_host, start=at("2026-08-19 00:00"), end=at("2026-08-21 00:00"))
    assert [a["title"] for a in by_host] == ["MAX_JOBS=4 everywhere", "vllm-main only"]
    everything = chart_annotations(start=at("2026-08-19 00:00"), end=at("2026-08-26 00:00"))
    assert len(everything) == 4
