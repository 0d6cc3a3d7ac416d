"""The profile's bounds applied to ad-hoc parameters (`sparkops bench run --engine …`, sweeps, experiments).

A saved profile is checked by its model's validators and `clean()`; an ad-hoc run from the CLI builds a
RunSpec directly and so bypassed them (`--output-tokens 99999999999` was taken). `spec_problems` runs
the same validators on an unsaved Profile built from the spec, so the two paths cannot disagree: the
validators are the profile's `models.BOUNDS` (`dashboard.bounds.Bounds`), each range declared once."""

from django.core.exceptions import ValidationError

from .models import Profile

# The CLI's name for each model field, for messages a script's author can act on.
FLAGS = {
    "depth": "--depth",
    "output_tokens": "--output-tokens",
    "reps": "--reps",
    "concurrency": "--concurrency",
    "timeout_s": "--timeout",
    "instruction": "--instruction",
    "workload": "--workload",
    "mode": "--mode",
    "sampling": "--sampling",
    "sampling_params": "--sampling-params",
    "thinking": "--thinking",
}
CHECKED = tuple(FLAGS)


def spec_problems(spec) -> list[str]:
    """What is wrong with SPEC by the profile's rules, one sentence per field ("--reps: …"); [] when fine."""
    timeout = spec.timeout_s
    profile = Profile(
        **{name: getattr(spec, name) for name in CHECKED if name != "timeout_s"},
        # The model stores whole seconds; a fraction below one is still "under 1".
        timeout_s=timeout if float(timeout).is_integer() else max(int(timeout), 0),
    )
    errors: dict[str, list[str]] = {}
    try:
        profile.clean_fields(exclude=[f.name for f in Profile._meta.fields if f.name not in CHECKED])
    except ValidationError as e:
        errors.update(e.message_dict)
    try:
        profile.clean()
    except ValidationError as e:
        for name, messages in e.message_dict.items():
            errors.setdefault(name, []).extend(messages)
    return [f"{FLAGS.get(name, name)}: {' '.join(messages)}" for name, messages in errors.items()]
