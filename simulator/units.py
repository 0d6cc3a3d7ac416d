"""Unit files for the simulated engines, as an operator's box has them.

Under `<state_dir>/root/` (the simulator's "/", SPARKOPS_HOST_ROOT in demo and tests):

    etc/systemd/system/<unit>                 the fragment: ExecStart with the real engine's argv
                                              (`vllm serve`, `llama-server`, `python3 -m
                                              sglang.launch_server`), Environment=, EnvironmentFile=,
                                              ExecStartPost= readiness helper, Restart=, limits
    etc/systemd/system/<unit>.d/*.conf        drop-ins, applied in lexical order (the last wins)
    etc/default/<name>                        the EnvironmentFile

vLLM units get two drop-ins, the later one overriding a flag of the earlier:
`10-extra-args.conf` sets `VLLM_EXTRA_ARGS=--max-num-seqs 256`, `20-seqs.conf` sets it again
with `--max-num-seqs 128`. The llama.cpp unit takes its context from `LLAMA_ARG_CTX_SIZE` in
its EnvironmentFile and orders itself `After=` a unit that is installed but disabled.

The supervisor reads the files as systemd would (`sparkops.collectors.unitfiles.effective`)
at a daemon-reload, so a drop-in written through the control API (`POST /_sim/units/NAME/dropin`,
which reloads unless told `"reload": false`) changes what the next start runs, and `systemctl
show`/`cat` report it at once. A file edited without a reload leaves the loaded unit running and
starting as it was: `systemctl show` says NeedDaemonReload=yes until `systemctl daemon-reload`."""

from __future__ import annotations

import json
import math
import os

# pathlib and hashlib are imported where used: the systemctl stand-in imports this module for
# `fingerprint` at every call (simulator/bin/__init__.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

UNIT_DIR = "etc/systemd/system"
OTHER_UNITS = {  # units the engines' units name, with their state
    "network-online.target": {"UnitFileState": "static", "ActiveState": "active", "SubState": "active"},
    "demo-vision.service": {"UnitFileState": "disabled", "ActiveState": "inactive", "SubState": "dead"},
}
HELPER = "/usr/local/bin/sparkops-wait-ready"
BASE_UTIL = 0.9  # the share the configured num_gpu_blocks stand for


def fragment_text(spec, restart):
    o = spec.engine_opts
    window = int(o.get("max_model_len", 32768))
    common_unit = (
        f"[Unit]\nDescription=SparkOps simulated {spec.kind} engine {spec.name}\n"
        "After=network-online.target\nWants=network-online.target\n"
        f"StartLimitBurst={spec.start_limit_burst}\nStartLimitIntervalSec={_secs(spec.start_limit_interval)}\n\n"
    )
    service = (
        f"[Service]\nType=simple\nUser=llm\nEnvironmentFile=-/etc/default/{spec.name}\n"
        f"Restart={restart}\nRestartSec={_secs(spec.restart_sec)}\nTimeoutStartSec={90 if spec.kind == 'llamacpp' else 300}\n"
        "MemoryHigh=105G\n"
    )
    if spec.kind == "vllm":
        model = o.get("model") or "Qwen/Qwen3-8B"
        return (
            common_unit.replace("\n\n", "\nRequires=network-online.target\n\n")
            + service
            + (
                'Environment="PATH=/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin" CUDA_HOME=/usr/local/cuda\n'
                "Environment=MAX_JOBS=4 NVCC_THREADS=1 TORCHINDUCTOR_COMPILE_THREADS=4 FLASHINFER_NVCC_THREADS=1\n"
                f"ExecStart=/opt/vllm/bin/vllm serve {model} --host 127.0.0.1 --port {spec.port} \\\n"
                f"    --max-model-len {window} --gpu-memory-utilization {o.get('memory_share') or 0.9} --enable-prefix-caching $VLLM_EXTRA_ARGS\n"
                f"ExecStartPost={HELPER} {spec.port} 60\n"
                "MemoryMax=112G\nCPUQuota=600%\n"
            )
        )
    if spec.kind == "llamacpp":
        model = o.get("model") or "qwen3-8b-q4_k_m"
        return (
            common_unit.replace("After=network-online.target", "After=network-online.target demo-vision.service")
            + service
            + (
                f"ExecStart=/opt/llama.cpp/bin/llama-server -m /models/{model}.gguf -a {model} --host 127.0.0.1 "
                f"--port {spec.port} -np {o.get('slots', 4)} --metrics --jinja\n"
                f"ExecStartPost={HELPER} {spec.port} 120\n"
            )
        )
    if spec.kind == "sglang":
        model = o.get("model") or "Qwen/Qwen3-8B"
        return (
            common_unit
            + service
            + (
                'Environment="PATH=/usr/local/cuda/bin:/usr/bin:/bin" CUDA_HOME=/usr/local/cuda MAX_JOBS=4\n'
                f"ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path {model} --host 127.0.0.1 --port {spec.port} "
                f"--context-length {window} --mem-fraction-static {o.get('memory_share') or 0.9} --enable-metrics\n"
                f"ExecStartPost={HELPER} {spec.port} 60\n"
            )
        )
    return common_unit + service + f"ExecStart=/usr/bin/python3 -m openai_compatible_server --port {spec.port}\n"


def _secs(seconds):
    return f"{seconds:g}s" if seconds < 1 or seconds != int(seconds) else f"{int(seconds)}"


def install(root: Path, spec, restart) -> None:
    """Write SPEC's unit files under ROOT (replacing what an earlier run left)."""
    unit = f"{spec.name}.service"
    udir = root / UNIT_DIR
    (udir / f"{unit}.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/default").mkdir(parents=True, exist_ok=True)
    for old in (udir / f"{unit}.d").glob("*.conf"):
        old.unlink()
    (udir / unit).write_text(fragment_text(spec, restart))
    env = f"# /etc/default/{spec.name}\n"
    if spec.kind == "llamacpp":
        env += f"LLAMA_ARG_CTX_SIZE={int(spec.engine_opts.get('max_model_len', 32768)) * int(spec.engine_opts.get('slots', 4))}\n"
        env += "LLAMA_ARG_N_GPU_LAYERS=99\n"
    (root / "etc/default" / spec.name).write_text(env)
    if spec.kind == "vllm":
        write_dropin(root, unit, "10-extra-args.conf", '[Service]\nEnvironment="VLLM_EXTRA_ARGS=--max-num-seqs 256"\n')
        write_dropin(
            root,
            unit,
            "20-seqs.conf",
            '# later in lexical order: this one wins\n[Service]\nEnvironment="VLLM_EXTRA_ARGS=--max-num-seqs 128"\n',
        )


def write_dropin(root: Path, unit: str, name: str, text: str | None):
    """Write (or with TEXT None/empty, remove) drop-in NAME of UNIT."""
    if not name.endswith(".conf") or "/" in name or name.startswith("."):
        raise ValueError("a drop-in name is a plain file name ending in .conf")
    path = root / UNIT_DIR / f"{unit}.d" / name
    if text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    else:
        path.unlink(missing_ok=True)


def paths(root: Path | str, unit: str):
    """(FragmentPath, [DropInPaths]) as systemd names them (without ROOT): the drop-ins are the
    `*.conf` of `<unit>.d/` in lexical order, hidden ones left out as a glob leaves them."""
    try:
        names = os.listdir(os.path.join(root, UNIT_DIR, f"{unit}.d"))
    except OSError:  # no drop-in folder (or not a folder)
        names = []
    drop = sorted(n for n in names if n.endswith(".conf") and not n.startswith("."))
    return f"/{UNIT_DIR}/{unit}", [f"/{UNIT_DIR}/{unit}.d/{n}" for n in drop]


def fingerprint(root: Path | str, unit: str) -> str:
    """What daemon-reload loaded of UNIT: its files (fragment, drop-ins) and their contents. The
    simulated `systemctl show` compares it with the files now to say NeedDaemonReload=, as systemd
    compares the files' modification times with the ones it loaded."""

    import hashlib

    fragment, dropins = paths(root, unit)
    files = {}
    for p in [fragment, *dropins]:
        try:
            with open(os.path.join(root, p.lstrip("/")), "rb") as fh:
                files[p] = hashlib.sha256(fh.read()).hexdigest()
        except OSError:
            files[p] = ""
    return json.dumps(files, sort_keys=True)


def load(root: Path, unit: str):
    """The unit's effective configuration (unitfiles.effective over its files)."""
    from sparkops.collectors.unitfiles import UnitFile, effective

    fragment, dropins = paths(root, unit)
    files = [
        UnitFile(p, (root / p.lstrip("/")).read_text()) for p in [fragment, *dropins] if (root / p.lstrip("/")).exists()
    ]
    return effective(files, unit, root=str(root))


def engine_options(kind: str, eff, base_opts):
    """The simulated engine's options from the effective ExecStart (the real engine's flags)."""
    from sparkops.collectors.flags import parse_argv

    start = eff["exec_start"] or {"argv": [], "origins": []}
    parsed = parse_argv(kind, start["argv"], env=eff["environment"], origins=start["origins"])
    f, opts = parsed.flags, dict(base_opts)
    share = None
    if kind == "vllm":
        opts["model"] = f.get("--served-model-name") or parsed.model or opts.get("model", "")
        share = f.get("--gpu-memory-utilization")
        if f.get("--max-model-len"):
            opts["max_model_len"] = f["--max-model-len"]
    elif kind == "llamacpp":
        opts["model"] = f.get("--alias") or opts.get("model", "")
        slots = int(f.get("--parallel") or opts.get("slots", 4))
        opts["slots"] = slots
        if f.get("--ctx-size"):
            opts["max_model_len"] = max(1, int(f["--ctx-size"]) // slots)
    elif kind == "sglang":
        opts["model"] = f.get("--served-model-name") or parsed.model or opts.get("model", "")
        share = f.get("--mem-fraction-static")
        if f.get("--context-length"):
            opts["max_model_len"] = f["--context-length"]
    opts = {k: v for k, v in opts.items() if v not in ("", None)}
    if share is not None:
        opts["memory_share"] = share
        blocks = int(base_opts.get("num_gpu_blocks", 47904)) * float(share) / BASE_UTIL
        window = int(opts.get("max_model_len", 32768))
        if window > 32768:  # a longer window costs the pool a little (workspace, Mamba state)
            blocks *= 1 - 0.025 * math.log2(window / 32768)
        opts["num_gpu_blocks"] = max(16, int(blocks))
    return opts


def hand_run_launch(spec):
    """A smoke test started from a shell in a fresh venv: the engine's argv, and an
    environment without a single compile cap (the "effective" form `engine_options` reads)."""
    o = spec.engine_opts
    window = str(int(o.get("max_model_len", 32768)))
    model = o.get("model") or "Qwen/Qwen3-8B-NVFP4"
    argv = {
        "vllm": [
            "/home/op/venv-smoke/bin/vllm",
            "serve",
            model,
            "--port",
            str(spec.port),
            "--gpu-memory-utilization",
            str(o.get("memory_share") or 0.15),
            "--max-model-len",
            window,
        ],
        "llamacpp": [
            "/home/op/llama.cpp/build/bin/llama-server",
            "-m",
            f"/models/{model}.gguf",
            "--port",
            str(spec.port),
            "-c",
            window,
            "-np",
            "1",
        ],
        "sglang": [
            "/home/op/venv-smoke/bin/python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            model,
            "--port",
            str(spec.port),
            "--mem-fraction-static",
            str(o.get("memory_share") or 0.15),
        ],
    }
    env = {
        "PATH": "/home/op/venv-smoke/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/home/op",
        "USER": "op",
        "VIRTUAL_ENV": "/home/op/venv-smoke",
        "SHELL": "/bin/bash",
    }
    words = argv.get(spec.kind, argv["vllm"])
    return {  # no file set any word (origins pair with the argv: an empty list would drop every flag)
        "exec_start": {"argv": words, "origins": [""] * len(words), "file": ""},
        "environment": env,
        "environment_origins": {},
        "exec_start_post": [],
        "edges": {},
        "directives": {},
        "environment_files": [],
        "shadowed": [],
    }


def write_proc(proc_root: Path, pid: int, eff, cgroup=None) -> None:
    """What /proc/PID says about an engine: its argv, environment, and cgroup (CGROUP: the unit
    that runs it; None: a hand-run engine's login session scope)."""
    argv = (eff.get("exec_start") or {}).get("argv") or []
    if not argv:
        return
    from pathlib import Path

    d = Path(proc_root) / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cmdline").write_bytes(b"\0".join(w.encode() for w in argv) + b"\0")
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in eff["environment"].items()))
    scope = f"/system.slice/{cgroup}" if cgroup else "/user.slice/user-1000.slice/session-3.scope"
    (d / "cgroup").write_text(f"0::{scope}\n")
    (d / "stat").write_text(
        f"{pid} ({Path(argv[0]).name[:15]}) S 1 {pid} {pid} 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 1 "
        "1073741824 262144 18446744073709551615\n"
    )
