"""What makes two runs comparable: the fields of a run's parameters that its hash covers,
the prompt builder's version, and the hash itself. Kept apart from the models and the
RunSpec so that both can import it. The hash itself is every measured kind's (measured/spec.py)."""

from sparkops.measured.spec import stable_hash  # noqa: F401  (imported from here by the benchmark modules)

HASH_FIELDS = (
    "engine_name",
    "engine_kind",
    "workload",
    "instruction",
    "depth",
    "mode",
    "output_tokens",
    "sampling",
    "sampling_params",
    "thinking",
    "concurrency",
)
PROMPT_VERSION = 1  # bump when the prompt builder changes what is sent: old runs stop comparing
