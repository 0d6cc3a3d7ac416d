"""`{{ result.subject|launch_links }}`: an audit finding's subject with each engine it names linked
to that engine's launch configuration page ("box" stays text). No query: a finding's subject is an
engine's name, two joined by " + ", or "box"."""

from django import template
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

register = template.Library()
BOX = "box"


@register.filter
def launch_links(subject: object) -> SafeString:
    names = str(subject).split(" + ")
    return format_html_join(
        " + ",
        "{}",
        (
            (
                format_html(
                    '<a href="{}" class="launch-link" title="launch configuration">{}</a>',
                    reverse("engine-launch", args=[n]),
                    n,
                )
                if n != BOX
                else n,
            )
            for n in names
        ),
    )


NOWRAP_MAX = 40  # a longer piece may break anywhere: it could not fit a phone's line whole


@register.filter
def breakable(text: object) -> SafeString:
    """TEXT (a path, a command line) with line breaks allowed only between words and before each
    "/" of a path: each piece is kept whole (`--max-model-len`, `20-seqs.conf` never split at a
    hyphen) and copies as it was (the breaks are <wbr>)."""
    words = []
    for word in str(text).split(" "):
        pieces = [p for p in _path_pieces(word) if p]
        words.append(
            format_html_join(
                format_html("<wbr>"),
                "{}",
                ((format_html('<span class="nb">{}</span>', p) if len(p) <= NOWRAP_MAX else p,) for p in pieces),
            )
        )
    return format_html_join(" ", "{}", ((w,) for w in words))


def _path_pieces(word: str) -> list[str]:
    """ "/etc/systemd/x.conf" → ["/etc", "/systemd", "/x.conf"]; "PATH=/a:/b" → ["PATH=", "/a:", "/b"]."""
    pieces, current = [], ""
    for ch in word:
        if ch == "/" and current:
            pieces.append(current)
            current = ""
        current += ch
    pieces.append(current)
    return pieces
