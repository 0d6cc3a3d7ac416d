"""`sparkops ledger kv add|list` and `sparkops plan` over the field report's KV pool ledger:
the appendix's rows go in through the CLI and the report's numbers come out."""

import json

import pytest
from django.core.management import CommandError

from dashboard.models import Engine, KVPoolEntry
from dashboard.models.ledgers import GIB
from sparkops.planner.engine_model import NO_EARLIER_RAISE
from sparkops.planner.models import BoxSetting

from .appendix import APPENDIX, AUDITION, SYSTEMD, THROUGH_0819, add_args
from .conftest import cli, feed, plan_json


def near(value, target, pct):
    return abs(value - target) / target * 100 <= pct


def test_tokens_per_gib_from_the_systemd_rows(spark):
    feed(SYSTEMD)
    nemotron = plan_json("--engine", "nemotron", "--util", "0.25")
    q38 = plan_json("--engine", "q38", "--util", "0.45")
    # "Nemotron about 305K (2,777,998 / 9.12), Qwen3.8 about 31K (953,661 / 30.33)"
    assert near(nemotron["tokens_per_gib"], 305_000, 1) and near(nemotron["tokens_per_gib"], 2_777_998 / 9.12, 1)
    assert near(q38["tokens_per_gib"], 953_661 / 30.33, 1) and round(q38["tokens_per_gib"], -3) == 31_000
    assert 9 < nemotron["tokens_per_gib"] / q38["tokens_per_gib"] < 11  # "ten times apart"
    row = KVPoolEntry.objects.get(engine__name="nemotron")
    assert [r["id"] for r in nemotron["basis"]] == [row.pk]
    assert (nemotron["pool_tokens"], nemotron["concurrency"]) == (2_777_998, 21.19)


def test_audition_rows_predict_the_systemd_pools(spark):
    feed(AUDITION)
    audition = {
        e: list(KVPoolEntry.objects.filter(engine__name=e).values_list("pk", flat=True)) for e in ("nemotron", "q38")
    }
    nemotron = plan_json("--engine", "nemotron", "--util", "0.25", "--window", "131072")
    q38 = plan_json("--engine", "q38", "--util", "0.45", "--window", "131,072")
    assert near(nemotron["pool_tokens"], 2_777_998, 3) and near(nemotron["concurrency"], 21.2, 3)
    assert near(q38["pool_tokens"], 953_661, 3) and near(q38["concurrency"], 7.28, 3)
    for name, p in (("nemotron", nemotron), ("q38", q38)):
        assert sorted(r["id"] for r in p["basis"]) == sorted(audition[name])  # the rows it rests on
        assert p["method"].startswith("least-squares line through 2 rows at 131,072")
        assert p["naive_concurrency"] is None and p["corrected_concurrency"] is None  # no raise asked
    # the line is not the rows' mean: a share between them predicts between their pools
    assert 1_725_781 < nemotron["pool_tokens"] < 4_372_707


def test_the_0820_raise_naive_and_no_earlier_raise(spark):
    feed(THROUGH_0819)
    nemotron = plan_json("--engine", "nemotron", "--util", "0.25", "--window", "262144")
    q38 = plan_json("--engine", "q38", "--util", "0.45", "--window", "262144")
    assert round(nemotron["naive_concurrency"], 1) == 10.6  # the "allocates nothing" prediction
    assert round(q38["naive_concurrency"], 1) == 3.6
    for p, measured in ((nemotron, 10.31), (q38, 3.27)):
        assert p["corrected_concurrency"] is None and NO_EARLIER_RAISE in p["raise_basis"]
        low, high = p["concurrency_range"]
        assert high == p["naive_concurrency"] and low <= measured <= high
        assert p["base_window"] == 131072 and p["window"] == 262144
    text = cli("plan", "--engine", "nemotron", "--util", "0.25", "--window", "262144")
    assert "naive 10.6× (pool unchanged)" in text and NO_EARLIER_RAISE in text


def test_once_a_raise_is_in_the_ledger_the_next_one_is_corrected(spark):
    feed(APPENDIX)
    at_262k = plan_json("--engine", "nemotron", "--util", "0.25", "--window", "262144")
    assert at_262k["pool_tokens"] == 2_703_604 and at_262k["concurrency"] == 10.31  # measured: no raise
    p = plan_json("--engine", "nemotron", "--util", "0.25", "--window", "524288")
    raised = KVPoolEntry.objects.filter(engine__name="nemotron", memory_share=0.25).order_by("recorded_at")
    assert p["base_window"] == 262144 and p["corrected_concurrency"] < p["naive_concurrency"]
    assert {r.pk for r in raised} <= {r["id"] for r in p["basis"]}  # the raise it learned from
    assert {r["engine"] for r in p["basis"]} == {"nemotron"}  # its own rows only: other engines' raises are not used
    # the 131,072 → 262,144 doubling lost 74,394 tokens: the next doubling is predicted to lose as many
    assert p["pool_tokens"] == 2_703_604 - (2_777_998 - 2_703_604)
    assert p["workspace_gib"] > 0


def test_unknown_engine_becomes_retired_and_list(spark):
    feed(APPENDIX[:1])
    engine = Engine.objects.get(name="qwen3-next-80b")
    assert engine.is_retired and not engine.expected_up and engine.host == spark
    rows = json.loads(cli("ledger", "kv", "list", "--json"))
    assert rows == [
        {
            "id": rows[0]["id"],
            "date": "2026-06-07",
            "recorded_at": "2026-06-07T00:00:00+00:00",
            "engine": "qwen3-next-80b",
            "util": 0.6,
            "kv_gib": 20.8,
            "pool_tokens": 1_722_225,
            "window": 131072,
            "concurrency": 13.14,
            "tokens_per_gib": 82_799,
            "source": "manual",
            "note": "before the 262K raise",
        }
    ]
    assert "qwen3-next-80b" in cli("ledger", "kv", "list") and "1,722,225 tokens" in cli("ledger", "kv", "list")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--util": "1.5"}, "--util: --gpu-memory-utilization is a fraction between 0 and 1"),
        ({"--window": "0"}, "--window: Must be a positive number."),
        ({"--date": "2026-13-01"}, "--date: Enter a valid date/time."),
        ({"--kv-gib": "lots"}, "--kv-gib: Enter a number."),
        ({"--engine": "no such/engine"}, "--engine: engine name 'no such/engine': Use letters"),
    ],
)
def test_bad_rows_are_refused_and_change_nothing(spark, change, message):
    args = add_args(("2026-08-19", "newcomer", "0.25", "9.12", "2777998", "131072", ""))
    for flag, value in change.items():
        args[args.index(flag) + 1] = value
    engines = Engine.objects.count()
    with pytest.raises(CommandError) as exc:
        cli("ledger", *args)
    assert message in str(exc.value) and "nothing saved" in str(exc.value)
    assert KVPoolEntry.objects.count() == 0 and Engine.objects.count() == engines  # no retired record left


def test_plan_refuses_what_the_ledger_cannot_say(spark):
    with pytest.raises(CommandError, match="no engine named 'ghost'"):
        cli("plan", "--engine", "ghost", "--util", "0.3")
    with pytest.raises(CommandError, match="no ledger row"):
        cli("plan", "--engine", "nemotron", "--util", "0.3")
    feed(SYSTEMD[:1])  # one row and no MemTotal: no line
    with pytest.raises(
        CommandError,
        match=r"rows at 131,072 with KV memory are all at share 0.25; it needs a second share, or the box's memory",
    ):
        cli("plan", "--engine", "nemotron", "--util", "0.3")
    with pytest.raises(CommandError, match="between 0 and 1"):
        cli("plan", "--engine", "nemotron", "--util", "1.2")
    with pytest.raises(CommandError, match="--window must be a positive"):
        cli("plan", "--engine", "nemotron", "--util", "0.25", "--window", "-5")


def _field_box(host, headroom=20.0):
    """The poller's host reading of the field report's box: 121 GiB visible, 100 used with the pair up."""
    host.latest = {"host": {"mem_total_bytes": 121 * GIB, "mem_used_bytes": 100 * GIB}}
    host.save(update_fields=["latest"])
    BoxSetting.objects.update_or_create(host=host, defaults={"headroom_gib": headroom})


def test_one_row_line_uses_memtotal_and_says_so(spark):
    feed(SYSTEMD[:1])
    _field_box(spark)
    p = plan_json("--engine", "nemotron", "--util", "0.30")
    assert "one row at 131,072 and the box's memory (121.0 GiB)" in p["method"]
    assert p["kv_gib"] == round(9.12 + 0.05 * 121, 2)


def test_suggest_gives_the_rest_to_the_kv_starved_engine(spark):
    feed(APPENDIX)
    _field_box(spark)
    out = plan_json("--host", spark.name, "--suggest", "--min", "nemotron=10", "--min", "q38=3", "--window", "262144")
    assert out["feasible"] and out["starved"] == "q38"
    split = out["split"]
    assert split["nemotron"]["concurrency"] >= 10 and split["q38"]["concurrency"] >= 3
    assert (split["nemotron"]["util"], split["q38"]["util"]) == (0.25, 0.45)  # the field report's own split
    assert out["box"]["used_gib"] + out["box"]["headroom_gib"] <= out["box"]["memory_gib"]
    text = cli(
        "plan", "--host", spark.name, "--suggest", "--min", "nemotron=10", "--min", "q38=3", "--window", "262144"
    )
    assert "the rest goes to q38 (fewest tokens per GiB)" in text

    short = plan_json("--host", spark.name, "--suggest", "--min", "nemotron=10", "--min", "q38=8", "--window", "262144")
    assert not short["feasible"] and short["short_gib"] > 0
    text = cli(
        "plan", "--host", spark.name, "--suggest", "--min", "nemotron=10", "--min", "q38=8", "--window", "262144"
    )
    assert f"infeasible: the targets need {short['short_gib']} GiB" in text
    with pytest.raises(CommandError, match="ENGINE=CONCURRENCY"):
        cli("plan", "--host", spark.name, "--suggest", "--min", "q38")
    with pytest.raises(CommandError, match="not an engine of"):
        cli("plan", "--host", spark.name, "--suggest", "--min", "ghost=2")
