"""The verdict's arithmetic on given numbers: direction per figure, the noise band, the seed."""

import pytest

from sparkops.experiments import stats


def test_lower_is_better_for_times_higher_for_decode():
    a, b = [100.0, 101.0, 99.0], [110.0, 111.0, 109.0]
    v = stats.verdict({"decode_tokens_per_s": {"A": a, "B": b}, "ttft_ms": {"A": a, "B": b}}, seed=1)
    assert v["decode_tokens_per_s"]["verdict"] == "faster"
    assert v["ttft_ms"]["verdict"] == "slower"  # B takes 10 % longer to its first token
    assert v["total_ms"]["verdict"] == "not measured"
    assert v["decode_tokens_per_s"]["ratio"] == pytest.approx(1.10)
    # three readings: the 2.5th and 97.5th percentiles are min B / max A and max B / min A, then widened
    assert v["decode_tokens_per_s"]["ci_low"] == pytest.approx(109 / 101 * (1 - stats.RESOLUTION))
    assert v["decode_tokens_per_s"]["ci_high"] == pytest.approx(111 / 99 * (1 + stats.RESOLUTION))


def test_an_interval_over_1_or_a_steady_gap_under_1_percent_is_no_difference():
    assert stats.word(1.05, 0.98, 1.12, higher_is_better=True) == "no difference within noise"
    assert stats.word(1.004, 1.002, 1.006, higher_is_better=True) == "no difference within noise"
    assert stats.word(0.9, 0.85, 0.95, higher_is_better=False) == "faster"


def test_the_same_seed_gives_the_same_interval():
    a, b = [50.1, 49.7, 50.4, 50.0, 49.9], [55.2, 54.6, 55.0, 55.5, 54.8]
    first = stats.bootstrap_ratio(a, b, seed=7)
    assert stats.bootstrap_ratio(a, b, seed=7) == first
    assert first[1] <= first[0] <= first[2]
    assert stats.bootstrap_ratio([], b, seed=7) is None
