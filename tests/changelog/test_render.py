"""Markdown renders; script and event-handler payloads come out inert, on the page too."""

import pytest

from sparkops.changelog.render import render_markdown
from sparkops.changelog.services import correction_create, entry_create

from .conftest import at

PAYLOADS = [
    "<script>alert('x')</script>",
    '<img src=x onerror="alert(1)">',
    '<a href="https://ok.test" onclick="alert(1)">hi</a>',
    "[click](javascript:alert(1))",
    '<svg onload="alert(1)"></svg>',
    '<iframe src="https://evil.test"></iframe>',
    "<div>\n<script>alert(2)</script>\n</div>",
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_payloads_are_inert(payload):
    html = render_markdown(payload).lower()
    tags = _tags_only(html)
    assert "<script" not in tags and "<img" not in tags and "<svg" not in tags and "<iframe" not in tags
    assert not any(f" on{event}=" in tags for event in ("click", "error", "load"))
    assert "javascript:" not in tags


def _tags_only(html):
    """Attributes inside real tags (text that merely mentions them is escaped and harmless)."""
    import re

    return " ".join(re.findall(r"<[a-z][^>]*>", html))


def test_markdown_still_renders():
    html = render_markdown(
        "**bold** `--max-model-len`\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n> quoted\n\n[vLLM](https://docs.vllm.ai)"
    )
    assert "<strong>bold</strong>" in html and "<code>--max-model-len</code>" in html and "<table>" in html
    assert (
        "<blockquote>" in html
        and 'href="https://docs.vllm.ai"' in html
        and 'rel="noopener noreferrer nofollow"' in html
    )


def test_entry_page_never_runs_author_html(viewer_client):
    entry = entry_create(
        effective_at=at("2026-08-20 09:00"),
        kind="decision",
        title="<script>alert('t')</script>",
        body_md="<script>alert('b')</script> <img src=x onerror=alert(1)>",
        reason='"><script>alert(3)</script>',
    )
    correction_create(entry=entry, text_md="<svg onload=alert(4)>")
    page = viewer_client.get(entry.get_absolute_url()).content.decode()
    body = page[page.index("<main") :]
    assert "<script>alert" not in body and "<img src=x" not in body and "<svg onload" not in body
    assert "&lt;script&gt;alert(&#x27;t&#x27;)&lt;/script&gt;" in body or "&lt;script&gt;alert" in body
