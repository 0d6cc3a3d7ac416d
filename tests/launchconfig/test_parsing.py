"""The argument models and the unit reading, on real-format text (engine-sources.md §6.1)."""

from dashboard.systemctl_show import show_blocks
from sparkops.collectors import flags, unitconfig, unitfiles

SHOW = """Id=nemotron.service
LoadState=loaded
FragmentPath=/etc/systemd/system/nemotron.service
DropInPaths=/etc/systemd/system/nemotron.service.d/20-window.conf /etc/systemd/system/nemotron.service.d/30-old.conf
ExecStart={ path=/opt/vllm/bin/vllm ; argv[]=/opt/vllm/bin/vllm serve nvidia/Nemotron --max-model-len 131072 ; ignore_errors=no ; start_time=[Tue 2026-07-14 10:02:11 UTC] ; stop_time=[n/a] ; pid=4123 ; code=(null) ; status=0/0 }
Restart=always
RestartUSec=100ms
TimeoutStartUSec=20min
StartLimitBurst=3
StartLimitIntervalUSec=1h
MemoryMax=infinity

Id=q38.service
LoadState=loaded
FragmentPath=/etc/systemd/system/q38.service
Restart=on-failure
"""
CAT = """# /etc/systemd/system/nemotron.service
[Unit]
After=network-online.target
# /etc/systemd/system/not-a-header.conf  (a comment that looks like a path)

[Service]
Environment="VLLM_ARGS=--max-num-seqs 128" HF_TOKEN=hf_secret
ExecStart=/opt/vllm/bin/vllm serve nvidia/Nemotron \\
    --max-model-len 131072 --speculative-config '{"method": "mtp", "num_speculative_tokens": 2}' $VLLM_ARGS
Restart=on-failure

# /etc/systemd/system/nemotron.service.d/20-window.conf
[Service]
ExecStart=
ExecStart=/opt/vllm/bin/vllm serve nvidia/Nemotron --max-model-len 262144 $VLLM_ARGS

# /etc/systemd/system/nemotron.service.d/30-old.conf
[Unit]
After=
After=q38.service
[Service]
ExecStart=
ExecStart=/opt/vllm/bin/vllm serve nvidia/Nemotron --max-model-len=131072 $VLLM_ARGS
Restart=always
"""
PATHS = [
    "/etc/systemd/system/nemotron.service",
    "/etc/systemd/system/nemotron.service.d/20-window.conf",
    "/etc/systemd/system/nemotron.service.d/30-old.conf",
]


def test_show_blocks_exec_struct_and_spans():
    blocks = show_blocks(SHOW)
    assert [b["Id"] for b in blocks] == ["nemotron.service", "q38.service"]
    assert blocks[0]["DropInPaths"].split()[1].endswith("30-old.conf")
    (start,) = unitconfig.exec_struct(blocks[0]["ExecStart"])
    assert start["path"] == "/opt/vllm/bin/vllm" and start["argv"][-2:] == ["--max-model-len", "131072"]
    assert unitconfig.timespan_s("1min 30s") == 90 and unitconfig.timespan_s("20min") == 1200
    assert unitconfig.timespan_s("100ms") == 0.1 and unitconfig.timespan_s("1h") == 3600
    assert unitconfig.timespan_s("infinity") == float("inf") and unitconfig.timespan_s("") is None
    assert unitconfig.memory_bytes("infinity") is None and unitconfig.memory_bytes("120259084288") == 112 << 30


def test_the_last_drop_in_wins_and_each_word_knows_its_file():
    texts = unitconfig.split_cat(CAT, PATHS)
    assert list(texts) == PATHS  # the comment that looks like a path stays inside the fragment
    assert "not-a-header" in texts[PATHS[0]]
    eff = unitfiles.effective([unitfiles.UnitFile(p, texts[p]) for p in PATHS], "nemotron.service")
    start = eff["exec_start"]
    assert start["file"] == PATHS[2]
    parsed = flags.parse_argv("vllm", start["argv"], origins=start["origins"])
    assert parsed.flags["--max-model-len"] == "131072" and parsed.origins["--max-model-len"] == PATHS[2]
    # --max-num-seqs came through $VLLM_ARGS, set in the fragment
    assert parsed.flags["--max-num-seqs"] == "128" and parsed.origins["--max-num-seqs"] == PATHS[0]
    assert eff["directives"]["Restart"] == {"value": "always", "file": PATHS[2]}
    assert [s["file"] for s in eff["shadowed"]] == [PATHS[0], PATHS[1]]
    assert eff["edges"]["After"] == ["q38.service"]  # an empty After= resets the list, as in systemd
    fragment_only = unitfiles.effective([unitfiles.UnitFile(PATHS[0], texts[PATHS[0]])])
    spec = flags.parse_argv("vllm", fragment_only["exec_start"]["argv"]).flags["--speculative-config"]
    assert spec == {"method": "mtp", "num_speculative_tokens": 2}  # a JSON value survives (show's argv[] would not)


def test_vllm_argument_model():
    p = flags.parse_argv(
        None,
        [
            "python3",
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            "M",
            "--max_model_len",
            "8192",
            "--no-enable-prefix-caching",
            "--enforce-eager",
            "-tp",
            "2",
            "--speculative-config.method",
            "mtp",
            "--gpu-memory-utilization=0.25",
        ],
    )
    assert p.kind == "vllm" and p.model == "M"
    assert p.flags == {
        "--model": "M",
        "--max-model-len": "8192",
        "--enable-prefix-caching": False,
        "--enforce-eager": True,
        "--tensor-parallel-size": "2",
        "--speculative-config": {"method": "mtp"},
        "--gpu-memory-utilization": "0.25",
    }


def test_llama_server_short_long_and_environment_forms():
    argv = ["/opt/llama.cpp/bin/llama-server", "-m", "/m/q.gguf", "-c", "65536", "-np", "2", "--jinja", "-fa", "on"]
    p = flags.parse_argv(
        None,
        argv,
        env={
            "LLAMA_ARG_CTX_SIZE": "8192",
            "LLAMA_ARG_N_GPU_LAYERS": "99",
            "LLAMA_ARG_ENDPOINT_METRICS": "1",
            "LLAMA_ARG_MLOCK": "0",
        },
    )
    assert p.kind == "llamacpp"
    # the command line wins over its environment variable, as in llama.cpp
    assert p.flags["--ctx-size"] == "65536" and p.flags["--n-gpu-layers"] == "99" and p.flags["--metrics"] is True
    assert "--mlock" not in p.flags and p.flags["--flash-attn"] == "on" and p.flags["--parallel"] == "2"
    assert p.origins["--n-gpu-layers"] == "env:LLAMA_ARG_N_GPU_LAYERS"


def test_sglang_argument_model():
    p = flags.parse_argv(
        None,
        [
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "Q/Q",
            "--mem-fraction-static",
            "0.65",
            "--enable-metrics",
            "--context-length",
            "65536",
            "--tp",
            "1",
        ],
    )
    assert p.kind == "sglang" and p.model == "Q/Q"
    assert p.flags == {
        "--model-path": "Q/Q",
        "--mem-fraction-static": "0.65",
        "--enable-metrics": True,
        "--context-length": "65536",
        "--tp-size": "1",
    }


def test_secrets_are_stored_as_a_hash(db):
    from dashboard.models import Engine, Host
    from sparkops.launch.snapshot import build_data

    engine = Engine.objects.create(name="e", kind="vllm", url="http://127.0.0.1:1", host=Host.objects.create(name="h"))
    unit = {
        "unit": "e.service",
        "environment": {"HF_TOKEN": "hf_secret", "MAX_JOBS": "4"},
        "environment_origins": {},
        "exec_start": {"argv": ["vllm", "serve", "M", "--api-key", "sk-1"], "origins": ["f"] * 5, "file": "f"},
    }
    data, _ = build_data(engine, unit, {})
    assert data["environment"]["MAX_JOBS"] == "4" and data["environment"]["HF_TOKEN"].startswith("redacted:")
    assert data["flags"]["flags"]["--api-key"].startswith("redacted:") and "sk-1" not in str(data)
    assert "hf_secret" not in str(data)


def test_the_engines_own_account_against_its_argv_is_drift(db):
    from dashboard.models import Engine, Host
    from sparkops.alerts.models import AlertEvent
    from sparkops.launch.drift import check_account_drift

    engine = Engine.objects.create(name="q", kind="vllm", url="http://127.0.0.1:1", host=Host.objects.create(name="h"))
    data = {
        "flags": {
            "flags": {"--kv-cache-dtype": "auto", "--max-model-len": "262144"},
            "origins": {"--kv-cache-dtype": "/etc/systemd/system/q.service"},
        },
        "account": {"max_model_len": 262144, "cache_config": {"cache_dtype": "fp8_e4m3"}},
    }
    check_account_drift(engine, data)
    (event,) = AlertEvent.objects.filter(rule="config_drift")
    assert event.subject == "q account --kv-cache-dtype" and event.state == "firing"
    assert "says auto (set in /etc/systemd/system/q.service) but q reports fp8_e4m3" in event.message
    data["account"]["cache_config"]["cache_dtype"] = "auto"
    check_account_drift(engine, data)
    event.refresh_from_db()
    assert event.state == "resolved"


def test_observed_entries_export_import_and_never_count_as_human_lines(db):
    from datetime import timedelta

    from django.utils import timezone

    from dashboard.models import ConfigSnapshot, Engine, Host
    from sparkops.alerts.models import AlertEvent
    from sparkops.changelog.export import export_markdown
    from sparkops.changelog.grammar import FlagLine
    from sparkops.changelog.importer import import_log
    from sparkops.changelog.models import Entry
    from sparkops.changelog.services import entry_create
    from sparkops.launch.changelog import is_observed
    from sparkops.launch.drift import check_drift
    from sparkops.launch.snapshot import observe_engine

    engine = Engine.objects.create(name="n", kind="vllm", url="http://127.0.0.1:1", host=Host.objects.create(name="h"))

    def unit(window):
        return {
            "unit": "n.service",
            "environment": {},
            "environment_origins": {},
            "exec_start": {
                "argv": ["vllm", "serve", "M", "--max-model-len", window],
                "origins": ["/f"] * 5,
                "file": "/f",
            },
        }

    observe_engine(engine, unit("131072"), account={}, now=timezone.now() - timedelta(minutes=5))
    snap = observe_engine(engine, unit("262144"), account={})
    observed = Entry.objects.get(pk=snap.logged_entry_id)
    assert is_observed(observed)
    text = export_markdown()
    assert "Observed on n: --max-model-len 131072 → 262144" in text and "Flag: --max-model-len: 131072 → 262144" in text

    assert import_log(text, author=None, author_name="import").summary().startswith("0 new entries")
    # An imported copy (its author the importer) is still known by its body, and never taken for
    # the operator's word: with only observed lines there is nothing to drift from.
    entry_create(
        author_name="import",
        effective_at=timezone.now(),
        kind="flag_change",
        engines=[engine],
        title="copied",
        body_md=observed.body_md,
        flags=[FlagLine("--max-model-len", "262144", "65536")],
    )
    check_drift(engine, ConfigSnapshot.objects.get(pk=snap.pk).data)
    assert not AlertEvent.objects.filter(rule="config_drift").exists()


def test_an_engine_that_hangs_costs_the_account_one_timeout(db):
    """Its three endpoints are all held before any request gives up: asked at once, one timeout in
    all (asked in turn, each would be held and given up before the next was asked)."""
    from dashboard.models import Engine, Host
    from sparkops.launch.account import fetch_account
    from tests.collectors.conftest import serve
    from tests.holds import Hold

    hold = Hold()
    server = serve({"/v1/models": hold, "/version": hold, "/metrics": hold})
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        engine = Engine.objects.create(name="hung", kind="vllm", url=url, host=Host.objects.create(name="h"))
        assert fetch_account(engine) == {}
        whats = [what for what, _ in hold.log]
        assert whats[:3] == ["held"] * 3 and not hold.expired.is_set(), hold.log  # not three timeouts
    finally:
        server.shutdown()
        server.server_close()
