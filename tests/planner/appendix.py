"""The field report's KV pool ledger (spark-bench-two-models-one-box, appendix), row for row.
The first row ('~70 GB budget, ~350K') is approximate in the report and is left out."""

# (date, engine, util, KV GiB, pool tokens, window, note)
APPENDIX = [
    ("2026-06-07", "qwen3-next-80b", "0.60", "20.8", "1,722,225", "131072", "before the 262K raise"),
    ("2026-06-09", "qwen3-next-80b", "0.60", "24.75", "2,106,551", "262144", "after restart, max-num-seqs 16"),
    ("2026-06-12", "qwen3-next-80b", "0.60", "24.64", "2,097,152", "262144", "max-num-seqs 32"),
    ("2026-08-19T10:00", "nemotron", "0.30", "14.36", "4,372,707", "131072", "even split, audition"),
    ("2026-08-19T10:01", "q38", "0.30", "7.05", "221,466", "131072", "even split, audition"),
    ("2026-08-19T12:00", "q38", "0.38", "19.49", "613,175", "131072", "rebalanced"),
    ("2026-08-19T12:01", "nemotron", "0.22", "5.67", "1,725,781", "131072", "rebalanced"),
    ("2026-08-19T18:00", "nemotron", "0.25", "9.12", "2,777,998", "131072", "systemd, after retirements"),
    ("2026-08-19T18:01", "q38", "0.45", "30.33", "953,661", "131072", "systemd, after retirements"),
    ("2026-08-20T10:00", "nemotron", "0.25", "8.26", "2,703,604", "262144", "window raised; pool −2.7%"),
    ("2026-08-20T10:01", "q38", "0.45", "26.8", "858,483", "262144", "window raised; pool −10.0%"),
]
AUDITION = APPENDIX[3:7]
SYSTEMD = APPENDIX[7:9]
THROUGH_0819 = APPENDIX[:9]


def add_args(row):
    date, engine, util, gib, pool, window, note = row
    return [
        "kv", "add", "--engine", engine, "--date", date, "--util", util, "--kv-gib", gib,
        "--pool-tokens", pool, "--window", window, "--note", note,
    ]  # fmt: skip
