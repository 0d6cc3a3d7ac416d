"""What a probe sends (ProbeSpec): plain data, re-created from a run's stored config; its hash covers
exactly what is sent, so a probe's runs are only compared with runs that sent the same thing. The
request bodies come from the benchmark's RunSpec (sampling, thinking, model), never pinned."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkops.benchmarks.spec import RunSpec
from sparkops.measured.spec import MeasuredSpec, profile_fields, stable_hash

KINDS = ("needle", "soak", "tool", "thinking", "contract")
PROBE_VERSION = 1  # bump when a probe's prompts or scoring change: earlier runs stop being compared
MAX_TOKENS, MAX_DECOYS, MAX_REPS, MAX_DEPTHS = 1_048_576, 8, 51, 9
MAX_TIMEOUT_S = 86_400
DEFAULT_TOKENS = {"needle": 4096, "soak": 4096, "tool": 512, "thinking": 1024, "contract": 64}


def parse_depths(text) -> list[int]:
    """'10,50,90' -> [10, 50, 90]; ValueError with a readable reason."""
    parts = [p.strip() for p in str(text or "").split(",") if p.strip()]
    if not parts:
        raise ValueError("Give at least one depth in percent, e.g. 10,50,90.")
    try:
        depths = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"Depths are whole percentages separated by commas, e.g. 10,50,90 (got {text!r}).") from None
    if any(not 0 <= d <= 100 for d in depths):
        raise ValueError("Each depth is a percentage between 0 and 100.")
    if len(set(depths)) != len(depths) or len(depths) > MAX_DEPTHS:
        raise ValueError(f"Give up to {MAX_DEPTHS} different depths.")
    return depths


@dataclass
class ProbeSpec(MeasuredSpec):
    engine_name: str
    engine_kind: str
    base_url: str
    kind: str
    tokens: int = 0  # 0: the kind's default
    depths: list = field(default_factory=lambda: [10, 50, 90])
    decoys: int = 2
    corpus: str = "lighthouse"
    control: bool = False
    control_corpus: str = "orchard"
    sampling: str = "server"
    sampling_params: dict = field(default_factory=dict)
    thinking: str = "server"
    reps: int = 3
    timeout_s: float = 600.0
    model: str | None = None

    def __post_init__(self):
        self.tokens = self.tokens or DEFAULT_TOKENS.get(self.kind, 1024)

    @classmethod
    def from_profile(cls, profile):
        own = ("kind", "tokens", "decoys", "corpus", "control", "control_corpus")
        return cls(**profile_fields(profile, *own), depths=parse_depths(profile.depths))

    def params_hash(self):
        data = {k: v for k, v in self.as_dict().items() if k not in ("engine_name", "base_url", "timeout_s", "model")}
        data["probe_version"] = PROBE_VERSION
        return stable_hash(data)

    def problems(self) -> list[str]:
        """What is wrong with an ad-hoc spec (the CLI), in words; empty when it can run."""
        out = []
        if self.kind not in KINDS:
            out.append(f"--kind must be one of {', '.join(KINDS)}")
        if not 3 <= self.reps <= MAX_REPS or self.reps % 2 == 0:
            out.append(f"--reps must be odd, between 3 and {MAX_REPS} (one reading has no noise estimate)")
        if not 64 <= self.tokens <= MAX_TOKENS:
            out.append(f"--tokens must be between 64 and {MAX_TOKENS:,}")
        if not 0 <= self.decoys <= MAX_DECOYS:
            out.append(f"--decoys must be between 0 and {MAX_DECOYS}")
        if not 1 <= self.timeout_s <= MAX_TIMEOUT_S:  # the profile's bounds (ProbeProfile.timeout_s)
            out.append(f"--timeout must be between 1 and {MAX_TIMEOUT_S:,} s")
        return out

    def bench(self) -> RunSpec:
        """The benchmark spec whose body() and session the probe reuses (discovery, warm-up)."""
        return RunSpec(
            engine_name=self.engine_name,
            engine_kind=self.engine_kind,
            base_url=self.base_url,
            output_tokens=16,
            sampling=self.sampling,
            sampling_params=dict(self.sampling_params),
            thinking=self.thinking,
            reps=1,
            timeout_s=self.timeout_s,
            model=self.model,
        )
