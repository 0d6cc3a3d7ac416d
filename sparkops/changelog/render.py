"""Markdown to HTML that cannot run: Markdown renders, then nh3 (ammonia) keeps only an
allow-list of tags and attributes. Markdown's raw-HTML passthrough is switched off, so
author-written tags come out as text; nh3 is the second wall (javascript: links, attributes)."""

import markdown
import nh3
from django.utils.safestring import SafeString, mark_safe

TAGS = {
    "p",
    "br",
    "hr",
    "a",
    "em",
    "strong",
    "code",
    "pre",
    "blockquote",
    "ul",
    "ol",
    "li",
    "h3",
    "h4",
    "h5",
    "h6",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "del",
}
ATTRIBUTES = {"a": {"href", "title"}, "th": {"align"}, "td": {"align"}}


INLINE_TAGS = {"em", "strong", "code", "del"}


def render_markdown_inline(text: str | None) -> SafeString:
    """Markdown for one line inside other markup (a claim in a link, a summary in a cell):
    emphasis and code only; paragraphs, links and blocks come out as their text."""
    if not text:
        return mark_safe("")
    return mark_safe(nh3.clean(str(render_markdown(text)), tags=INLINE_TAGS, attributes={}).strip())


def render_markdown(text: str | None) -> SafeString:
    if not text:
        return mark_safe("")
    md = markdown.Markdown(extensions=["tables", "fenced_code", "sane_lists"], output_format="html")
    md.preprocessors.deregister("html_block")
    md.inlinePatterns.deregister("html")
    raw = md.convert(text)
    clean = nh3.clean(
        raw,
        tags=TAGS,
        attributes=ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
    return mark_safe(clean)
