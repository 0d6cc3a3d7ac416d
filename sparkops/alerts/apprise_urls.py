"""Apprise URLs as Apprise itself reads them: whether one can be sent to, and how it is shown with
its secrets masked. Used by the channel model (its clean() and target) and the Apprise transport:
it sits below both, so that the models need not import a transport."""

import apprise


def apprise_url_error(url: str | None) -> str | None:
    """Why URL is not an Apprise URL Apprise can send to, or None when it is."""
    url = (url or "").strip()
    if not url:
        return "An Apprise channel needs a URL (e.g. ntfy://topic, tgram://bot-token/chat-id, json://host/path)."
    if len(url) > 2000:
        return "The Apprise URL is longer than 2000 characters."
    if apprise.Apprise.instantiate(url, suppress_exceptions=True) is None:
        return (
            f"Apprise does not read {redacted(url)!r} as a notification URL: check the scheme and "
            "the fields it needs (https://github.com/caronc/apprise/wiki)."
        )
    return None


def redacted(url: str) -> str:
    """URL with its secrets (tokens, passwords) masked, as Apprise shows it; for lists and logs."""
    plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
    if plugin is None:
        scheme = url.split("://", 1)[0] if "://" in url else ""
        return f"{scheme}://…" if scheme else "…"
    return plugin.url(privacy=True)
