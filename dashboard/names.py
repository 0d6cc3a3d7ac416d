"""Names are text (issue 46, item 5): the one validator every name SparkOps stores goes
through — hosts, engines, channels, benchmark and probe profiles (slugs), API tokens (free text).

A name is shown in lists, pages, pages sent by email and webhook, and the CLI's tables. A
control character (Unicode category Cc: NUL, newline, escape…) breaks a line or a terminal;
a bidirectional control (U+202E RIGHT-TO-LEFT OVERRIDE and its kin, Cf) reverses the text
after it, so "gpt<U+202E>txt.exe" reads "gptexe.txt": a spoofing aid even when escaped. An
empty or blank name names nothing. Each is refused with a message saying which character and
where, so the person can find it."""

import re
import unicodedata

from django.core.exceptions import ValidationError
from django.utils.deconstruct import deconstructible

# The bidirectional formatting characters (Unicode's Bidi_Control property): embeddings and
# overrides U+202A-U+202E, isolates U+2066-U+2069, the marks U+200E/U+200F and U+061C.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")

SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
SLUG_MESSAGE = "Use letters, digits, '.', '_' or '-' (start with a letter or digit, at most 63 characters)."


def name_problem(value: str) -> str:
    """Why VALUE cannot be a name, in one sentence; "" when it can (as text: no slug rule)."""
    if not value.strip():
        return "The name is empty: give it a name with at least one visible character."
    for position, char in enumerate(value, start=1):
        if unicodedata.category(char) == "Cc" or char in BIDI_CONTROLS:
            what = unicodedata.name(char, "") or _CONTROL_NAMES.get(char, "a control character")
            return (
                f"The name contains U+{ord(char):04X} ({what}) at character {position}: "
                "names are plain text, without control or text-direction characters."
            )
    return ""


# unicodedata has no name for most Cc characters; the ones a pasted name carries.
_CONTROL_NAMES = {
    "\x00": "NUL",
    "\t": "TAB",
    "\n": "LINE FEED",
    "\r": "CARRIAGE RETURN",
    "\x1b": "ESCAPE",
    "\x7f": "DELETE",
}


@deconstructible
class NameValidator:
    """Refuses a name that is not text (name_problem); with SLUG (hosts, engines, channels,
    profiles: names that go into URLs, unit names and file names) also one that is not a slug.
    The text rule is checked first, so a slug with a newline says "newline", not "use letters"."""

    def __init__(self, *, slug: bool = True) -> None:
        self.slug = slug

    def __call__(self, value: str) -> None:
        problem = name_problem(value)
        if problem:
            raise ValidationError(problem, code="not_text")
        if self.slug and not SLUG.fullmatch(value):  # fullmatch: "$" would let a final newline by
            raise ValidationError(SLUG_MESSAGE, code="invalid")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NameValidator) and other.slug == self.slug

    def __hash__(self) -> int:
        return hash(("NameValidator", self.slug))


def name_clean(value: str, *, slug: bool = True) -> str:
    """VALUE as a name, or ValidationError with the reason: for the entry points that take a
    name outside a form (the CLI's arguments, the worker's host name)."""
    NameValidator(slug=slug)(value)
    return value
