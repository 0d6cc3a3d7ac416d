"""django-csp's middleware, plus the page's own WebSocket origin in connect-src.

CSP Level 3 lets 'self' match ws:// and wss:// on the page's host, but not every browser in
use does; naming the host (validated against ALLOWED_HOSTS by get_host) keeps the live view's
socket allowed everywhere, and nothing else."""

from csp.middleware import CSPMiddleware as _CSPMiddleware
from csp.middleware import PolicyParts
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponseBase


class CSPMiddleware(_CSPMiddleware):
    def get_policy_parts(
        self, request: HttpRequest, response: HttpResponseBase, report_only: bool = False
    ) -> PolicyParts:
        parts = super().get_policy_parts(request, response, report_only)
        try:
            host = request.get_host()
        except DisallowedHost:  # the 400 for a bad Host header still gets the plain policy
            return parts
        update = dict(parts.update or {})
        extra = [f"ws://{host}", f"wss://{host}"]
        current = update.get("connect-src") or []
        update["connect-src"] = [*([current] if isinstance(current, str) else current), *extra]
        parts.update = update
        return parts
