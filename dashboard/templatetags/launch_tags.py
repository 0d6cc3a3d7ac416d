"""`{{ result.subject|launch_links }}`: an audit finding's subject with each engine it names linked
to that engine's launch configuration page ("box" stays text). No query: a finding's subject is an
engine's name, two joined by " + ", or "box"."""

from django import template
from django.urls import reverse
from django.utils.html import format_html, format_html_join

register = template.Library()
BOX = "box"


@register.filter
def launch_links(subject):
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
