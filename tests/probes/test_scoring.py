"""The scoring rules in code, on fixed texts: needle verdicts, degeneration signs (Markdown tables and
ordinary prose stay clean), schema-aware coercion, the thinking verdict."""

import pytest

from sparkops.probes.haystack import load
from sparkops.probes.needle import cell, decoy_depths, score
from sparkops.probes.soak import degeneration
from sparkops.probes.thinking import verdict
from sparkops.probes.toolcall import SCHEMA, coerce, validate


@pytest.mark.parametrize(
    "answer,expected",
    [
        ("4817-TQ", ("HIT", None)),
        ("The code is 4817-tq.", ("HIT", None)),
        ("It is 9052-MB.", ("DECOY", 1)),
        ("4817-TQ or maybe 1111-AA", ("AMBIGUOUS", None)),
        ("1111-AA, 9052-MB", ("AMBIGUOUS", None)),
        ("I cannot find it.", ("MISS", None)),
        ("", ("MISS", None)),
    ],
)
def test_needle_verdicts(answer, expected):
    assert score(answer, "4817-TQ", ["1111-AA", "9052-MB"]) == expected


def test_decoys_sit_around_the_needle_never_on_it():
    assert decoy_depths(10, 2) == [43.3, 76.7]
    assert decoy_depths(90, 2) == [23.3, 56.7]
    assert all(d != 50 for d in decoy_depths(50, 8))


def test_a_cell_is_its_majority_and_a_tie_reads_worse():
    def c(v):
        return {"ok": True, "verdict": v, "bucket": "", "detail": {"decoy": {"depth": 40}} if v == "DECOY" else {}}

    assert cell([c("HIT"), c("HIT"), c("DECOY")])["text"] == "HIT 2/3"
    assert cell([c("HIT"), c("MISS")])["verdict"] == "MISS"
    failed = {"ok": False, "verdict": "", "bucket": "capacity", "detail": {}}
    assert cell([failed, failed])["text"] == "CAPACITY ×2"  # a failed request is its bucket, never a MISS


PROSE = load("lighthouse") + "\n\n" + load("orchard")  # ordinary prose, each sentence once
TABLE = "\n".join(
    ["| depth | verdict | seconds |", "| --- | --- | --- |"] + [f"| {d} | HIT | 1.{d} |" for d in range(200)]
)


def test_prose_and_markdown_tables_are_clean():
    assert degeneration(PROSE) is None
    assert degeneration(TABLE) is None
    assert degeneration("- - -\n" * 10 + "=" * 80) is None


def test_hex_loop_and_one_character_runs_are_degeneration_with_their_offset():
    hexrun = " ".join(f"{i * 2654435761 % 2**32:08x}" for i in range(200))
    found = degeneration(PROSE + " " + hexrun)
    assert found["kind"] == "hex" and found["offset"] == len(PROSE) + 1
    loop = " and then the model said the same thing again" * 20
    assert degeneration(PROSE + loop)["kind"] == "repeat"
    assert degeneration(PROSE + " " + "a" * 300)["kind"] == "char"


def test_coercion_fixes_strings_for_the_schema_only():
    raw = {"city": "Oslo", "days": "3", "units": "metric", "detail": '{"hourly": "true", "alerts": false}'}
    assert "is not of type" in validate(raw)
    fixed = coerce(raw, SCHEMA)
    assert fixed == {"city": "Oslo", "days": 3, "units": "metric", "detail": {"hourly": True, "alerts": False}}
    assert validate(fixed) is None
    assert validate(coerce({**raw, "days": "three"}, SCHEMA)) == "days: 'three' is not of type 'integer'"


@pytest.mark.parametrize(
    "arms,expected",
    [
        ({"off": (0, 300), "off+effort": (0, 290), "on+low": (40, 50), "on+high": (200, 60)}, "ok"),
        ({"off": (0, 300), "off+effort": (0, 290), "on+low": (200, 50), "on+high": (204, 60)}, "inert"),
        ({"off": (0, 300), "off+effort": (350, 0), "on+low": (40, 50), "on+high": (200, 60)}, "inverted"),
        ({"off": (30, 300), "off+effort": (0, 290), "on+low": (40, 50), "on+high": (200, 60)}, "off_reasons"),
        ({"off": (0, 0), "off+effort": (0, 290), "on+low": (40, 50), "on+high": (200, 60)}, "off_empty"),
    ],
)
def test_thinking_verdict(arms, expected):
    medians = {k: {"reasoning": r, "content_chars": c} for k, (r, c) in arms.items()}
    assert verdict(medians)[0] == expected


def test_simulated_recall_by_depth():
    from simulator.behaviours import recall_at

    assert recall_at("1", 90) == 1.0
    assert recall_at("10:1,90:0", 50) == pytest.approx(0.5) and recall_at("10:1;90:0", 95) == 0.0
    assert recall_at("10:1;90:0", 5) == 1.0
