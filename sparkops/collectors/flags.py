"""Engine command lines read with each engine's own argument model, not regexes over a string.

    parse_argv("vllm", argv, env=..., origins=...) -> Parsed

- vLLM (`vllm serve MODEL`, `python -m vllm.entrypoints.openai.api_server --model M`): argparse
  rules, `--flag value` and `--flag=value`, `--flag_name` the same as `--flag-name`, booleans
  (`--enable-prefix-caching`, `--no-enable-prefix-caching`), JSON-valued flags
  (`--speculative-config '{"method": "mtp"}'`, `-O`/`--compilation-config`) decoded, and the dotted
  form (`--speculative-config.num_speculative_tokens 2`) merged into its JSON object.
- llama-server: the short and long forms of `common/arg.cpp` (`-c`/`--ctx-size`, `-np`/`--parallel`,
  `-m`/`--model`, ...) under the long name, and the `LLAMA_ARG_*` environment forms; as in
  llama.cpp, a command-line flag wins over its environment variable.
- SGLang (`python -m sglang.launch_server`, `sglang serve`): argparse with `--model-path`,
  `--mem-fraction-static`, `--context-length`, ...

A flag's name is its canonical long form (`--max-model-len`); its value a string, True for a
boolean switch, False for its `--no-` form, or the decoded JSON. Each flag keeps where it came
from (`origins`: the file that set the argv token, or `env:LLAMA_ARG_X`), so a change can say
which drop-in set it. A flag this model does not know takes the next token as its value unless
that token starts with "-" (and is recorded in `unknown`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

VLLM_BOOL = frozenset(
    """
--enable-prefix-caching --no-enable-prefix-caching --enforce-eager --trust-remote-code --enable-chunked-prefill
--no-enable-chunked-prefill --disable-log-stats --disable-log-requests --enable-log-requests --enable-auto-tool-choice
--disable-custom-all-reduce --enable-lora --enable-expert-parallel --language-model-only --disable-frontend-multiprocessing
--enable-server-load-tracking --enable-tokenizer-info-endpoint --enable-prompt-tokens-details --enable-force-include-usage
--async-scheduling --no-async-scheduling --disable-fastapi-docs --enable-sleep-mode --headless --kv-sharing-fast-prefill
--disable-uvicorn-access-log --return-tokens-as-token-ids --enable-request-id-headers --disable-cascade-attn
--skip-tokenizer-init --enable-reasoning --enable-mfu-metrics
""".split()
)
VLLM_JSON = frozenset(
    """
--speculative-config --compilation-config --kv-transfer-config --kv-events-config --hf-overrides
--override-generation-config --limit-mm-per-prompt --mm-processor-kwargs --default-chat-template-kwargs
--additional-config --override-pooler-config --pooler-config --rope-scaling --structured-outputs-config
""".split()
)
VLLM_SHORT = {
    "-O": "--compilation-config",
    "-tp": "--tensor-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-dp": "--data-parallel-size",
    "-q": "--quantization",
}

# llama-server (common/arg.cpp): long name -> (short forms, env name, takes a value)
LLAMA = {
    "--model": (("-m",), "LLAMA_ARG_MODEL", True),
    "--hf-repo": (("-hf", "-hfr"), "LLAMA_ARG_HF_REPO", True),
    "--ctx-size": (("-c",), "LLAMA_ARG_CTX_SIZE", True),
    "--parallel": (("-np",), "LLAMA_ARG_N_PARALLEL", True),
    "--n-gpu-layers": (("-ngl", "--gpu-layers"), "LLAMA_ARG_N_GPU_LAYERS", True),
    "--threads": (("-t",), "LLAMA_ARG_THREADS", True),
    "--batch-size": (("-b",), "LLAMA_ARG_BATCH", True),
    "--ubatch-size": (("-ub",), "LLAMA_ARG_UBATCH", True),
    "--flash-attn": (("-fa",), "LLAMA_ARG_FLASH_ATTN", True),
    "--alias": (("-a",), "LLAMA_ARG_ALIAS", True),
    "--cache-type-k": (("-ctk",), "LLAMA_ARG_CACHE_TYPE_K", True),
    "--cache-type-v": (("-ctv",), "LLAMA_ARG_CACHE_TYPE_V", True),
    "--host": ((), "LLAMA_ARG_HOST", True),
    "--port": ((), "LLAMA_ARG_PORT", True),
    "--n-predict": (("-n", "--predict"), "LLAMA_ARG_N_PREDICT", True),
    "--keep": (("-k",), None, True),
    "--temp": ((), None, True),
    "--top-k": ((), None, True),
    "--top-p": ((), None, True),
    "--min-p": ((), None, True),
    "--seed": (("-s",), None, True),
    "--chat-template": ((), "LLAMA_ARG_CHAT_TEMPLATE", True),
    "--chat-template-kwargs": ((), "LLAMA_CHAT_TEMPLATE_KWARGS", True),
    "--reasoning-format": (("-rea",), "LLAMA_ARG_THINK", True),
    "--reasoning-budget": ((), "LLAMA_ARG_THINK_BUDGET", True),
    "--api-key": ((), "LLAMA_API_KEY", True),
    "--slot-save-path": ((), None, True),
    "--timeout": (("-to",), "LLAMA_ARG_TIMEOUT", True),
    "--threads-http": ((), "LLAMA_ARG_THREADS_HTTP", True),
    "--model-draft": (("-md",), "LLAMA_ARG_MODEL_DRAFT", True),
    "--override-kv": ((), None, True),
    "--jinja": ((), "LLAMA_ARG_JINJA", False),
    "--metrics": ((), "LLAMA_ARG_ENDPOINT_METRICS", False),
    "--slots": ((), "LLAMA_ARG_ENDPOINT_SLOTS", False),
    "--no-slots": ((), "LLAMA_ARG_NO_ENDPOINT_SLOTS", False),
    "--props": ((), "LLAMA_ARG_ENDPOINT_PROPS", False),
    "--cont-batching": (("-cb",), "LLAMA_ARG_CONT_BATCHING", False),
    "--no-cont-batching": (("-nocb",), "LLAMA_ARG_NO_CONT_BATCHING", False),
    "--mlock": ((), "LLAMA_ARG_MLOCK", False),
    "--no-mmap": ((), "LLAMA_ARG_NO_MMAP", False),
    "--no-webui": ((), "LLAMA_ARG_NO_WEBUI", False),
    "--embeddings": (("--embedding",), "LLAMA_ARG_EMBEDDINGS", False),
    "--kv-unified": (("-kvu",), "LLAMA_ARG_KV_UNIFIED", False),
    "--verbose": (("-v", "--log-verbose"), None, False),
}
LLAMA_JSON = frozenset({"--chat-template-kwargs"})
LLAMA_BY_ALIAS = {alias: long for long, (shorts, _, _) in LLAMA.items() for alias in (long, *shorts)}
TRUE_WORDS = {"1", "true", "on", "yes", "enabled"}

SGLANG_BOOL = frozenset(
    """
--enable-metrics --trust-remote-code --disable-radix-cache --disable-cuda-graph --enable-torch-compile
--skip-server-warmup --enable-cache-report --disable-overlap-schedule --enable-mixed-chunk --enable-dp-attention
--log-requests --show-time-cost --enable-p2p-check --disable-custom-all-reduce --enable-hierarchical-cache
""".split()
)
SGLANG_JSON = frozenset({"--json-model-override-args", "--speculative-config"})
SGLANG_SHORT = {"--tp": "--tp-size", "--dp": "--dp-size", "--model": "--model-path"}


@dataclass
class Parsed:
    kind: str
    program: list[str] = field(default_factory=list)  # the launcher words before the first flag/model
    model: str | None = None  # the positional model (vllm serve MODEL) or --model/--model-path
    # canonical long name -> value: the word, True/False for a switch, the decoded value of a JSON flag
    flags: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)  # canonical long name -> file or "env:NAME"
    positional: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # flags the model does not know
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "program": self.program,
            "model": self.model,
            "flags": self.flags,
            "origins": self.origins,
            "positional": self.positional,
            "unknown": self.unknown,
            "problems": self.problems,
        }


def detect_kind(argv: Sequence[str]) -> str | None:
    """'vllm', 'llamacpp', 'sglang' or None, from the program and its first words."""
    words = [os.path.basename(w) for w in argv[:4]]
    joined = " ".join(argv[:4])
    if any(w.startswith("llama-server") for w in words):
        return "llamacpp"
    if "sglang" in joined:
        return "sglang"
    if "vllm" in joined:
        return "vllm"
    return None


def _launcher_len(kind: str, argv: Sequence[str]) -> int:
    """How many leading words launch the engine (interpreter, -m module, `serve`)."""
    i = 0
    while i < len(argv) and not argv[i].startswith("-"):
        base = os.path.basename(argv[i])
        i += 1
        if kind == "vllm" and base == "vllm":
            return i + 1 if i < len(argv) and argv[i] == "serve" else i
        if kind == "sglang" and base == "sglang":
            return i + 1 if i < len(argv) and argv[i] == "serve" else i
        if kind == "llamacpp" and base.startswith("llama-server"):
            return i
    # python3 -m vllm.entrypoints.openai.api_server / -m sglang.launch_server
    for j, word in enumerate(argv):
        if word == "-m" and j + 1 < len(argv):
            return j + 2
    return min(i, 1)


def parse_argv(
    kind: str | None,
    argv: Iterable[object],
    *,
    env: Mapping[str, str] | None = None,
    origins: Iterable[str] | None = None,
    default_origin: str = "",
) -> Parsed:
    """The engine's flags from ARGV (a list of words). ORIGINS: the file each word came from
    (same length as ARGV); ENV: the effective environment (llama-server's LLAMA_ARG_* forms)."""
    words_in = [str(a) for a in argv]
    froms = list(origins) if origins is not None else [default_origin] * len(words_in)
    kind = kind or detect_kind(words_in) or "vllm"
    out = Parsed(kind=kind)
    start = _launcher_len(kind, words_in)
    out.program = words_in[:start]
    words = list(zip(words_in[start:], froms[start:]))
    if kind == "llamacpp":
        _parse_llama(words, out, env or {})
    else:
        _parse_argparse(kind, words, out)
    if out.model is None:
        out.model = out.flags.get("--model") or out.flags.get("--model-path")
    return out


def _canonical_long(kind: str, name: str) -> str:
    if kind == "vllm" and name in VLLM_SHORT:
        return VLLM_SHORT[name]
    if kind == "sglang" and name in SGLANG_SHORT:
        return SGLANG_SHORT[name]
    if name.startswith("--"):
        return "--" + name[2:].replace("_", "-")
    return name


def _decode_json(name: str, raw: str, out: Parsed) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        out.problems.append(f"{name}: not JSON: {raw[:80]}")
        return raw


def _parse_argparse(kind: str, words: list[tuple[str, str]], out: Parsed) -> None:
    bools = VLLM_BOOL if kind == "vllm" else SGLANG_BOOL
    jsons = VLLM_JSON if kind == "vllm" else SGLANG_JSON
    i = 0
    while i < len(words):
        word, origin = words[i]
        i += 1
        if word == "--":
            out.positional += [w for w, _ in words[i:]]
            break
        if not word.startswith("-") or word == "-":
            if kind == "vllm" and out.model is None and not out.positional:
                out.model = word
            out.positional.append(word)
            continue
        name, eq, inline = word.partition("=")
        name, dot, after = name.partition(".")
        name = _canonical_long(kind, name)
        dotted: str | None = None  # --speculative-config.method mtp: a key merged into the JSON object
        if dot and name not in jsons:
            name = f"{name}.{after}"
        elif dot:
            dotted = after
        base = "--" + name[5:] if name.startswith("--no-") else None
        if not eq and (name in bools or base in bools):
            if base in bools:  # argparse's BooleanOptionalAction: --no-X turns X off
                out.flags[base], out.origins[base] = False, origin
            else:
                out.flags[name], out.origins[name] = True, origin
            continue
        if eq:
            value = inline
        elif i < len(words) and not (words[i][0].startswith("-") and not _is_number(words[i][0])):
            value, origin2 = words[i]
            origin = origin2 or origin
            i += 1
        else:
            if name not in bools:
                out.unknown.append(name)
            out.flags[name], out.origins[name] = True, origin
            continue
        if dotted is not None:
            current = out.flags.get(name)
            current = dict(current) if isinstance(current, dict) else {}
            current[dotted] = _scalar(value)
            out.flags[name], out.origins[name] = current, origin
            continue
        if name in jsons:
            value = _decode_json(name, value, out)
        elif name not in KNOWN_VALUE.get(kind, ()):
            out.unknown.append(name)
        out.flags[name], out.origins[name] = value, origin


def _scalar(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _is_number(word: str) -> bool:
    try:
        float(word)
        return True
    except ValueError:
        return False


def _parse_llama(words: list[tuple[str, str]], out: Parsed, env: Mapping[str, str]) -> None:
    seen: set[str] = set()
    i = 0
    while i < len(words):
        word, origin = words[i]
        i += 1
        if not word.startswith("-") or _is_number(word):
            out.positional.append(word)
            continue
        name, eq, inline = word.partition("=")
        long = LLAMA_BY_ALIAS.get(name)
        if long is None:
            out.unknown.append(name)
            long = name
            takes = not eq and i < len(words) and not words[i][0].startswith("-")
        else:
            takes = LLAMA[long][2]
        if not takes and not eq:
            out.flags[long], out.origins[long] = True, origin
        else:
            if eq:
                value = inline
            elif i < len(words):
                value, origin = words[i][0], words[i][1] or origin
                i += 1
            else:
                out.problems.append(f"{word} is missing its value")
                continue
            out.flags[long] = _decode_json(long, value, out) if long in LLAMA_JSON else value
            out.origins[long] = origin
        seen.add(long)
    for long, (_, env_name, takes) in LLAMA.items():  # the command line wins over the environment
        if long in seen or not env_name or env_name not in env:
            continue
        raw = env[env_name]
        if takes:
            out.flags[long] = _decode_json(long, raw, out) if long in LLAMA_JSON else raw
        elif raw.strip().lower() in TRUE_WORDS:
            out.flags[long] = True
        else:
            continue
        out.origins[long] = f"env:{env_name}"


KNOWN_VALUE = {
    "vllm": frozenset(
        """
--model --served-model-name --host --port --max-model-len --gpu-memory-utilization --max-num-seqs
--max-num-batched-tokens --kv-cache-dtype --quantization --dtype --tensor-parallel-size --pipeline-parallel-size
--data-parallel-size --tool-call-parser --reasoning-parser --generation-config --tokenizer --revision
--block-size --swap-space --cpu-offload-gb --seed --load-format --download-dir --chat-template --api-key
--uvicorn-log-level --moe-backend --attention-backend --mamba-ssm-cache-dtype --max-cudagraph-capture-size
--kv-cache-memory-bytes --num-gpu-blocks-override --root-path --allowed-origins --lora-modules --max-loras
--max-lora-rank --long-prefill-token-threshold --max-num-partial-prefills --scheduling-policy --task --runner
--tokenizer-mode --config-format --hf-config-path --logits-processors --max-logprobs --distributed-executor-backend
""".split()
    ),
    "sglang": frozenset(
        """
--model-path --served-model-name --host --port --mem-fraction-static --context-length --max-running-requests
--max-total-tokens --chunked-prefill-size --tp-size --dp-size --kv-cache-dtype --quantization --dtype
--tool-call-parser --reasoning-parser --attention-backend --max-mamba-cache-size --mamba-ssm-dtype
--speculative-algorithm --speculative-num-steps --speculative-eagle-topk --speculative-num-draft-tokens
--schedule-policy --tokenizer-path --chat-template --api-key --log-level --random-seed --page-size
--cuda-graph-max-bs --device --load-format --revision
""".split()
    ),
}


def render(value: object) -> str:
    """A flag value as one line (`131072`, `true`, `{"method": "mtp"}`)."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(", ", ": "))
    return str(value)
