"""Who may use the console: loopback Host names and the console token, checked on every request.

The server listens on loopback only, but a browser can still be made to reach it: another site
through DNS rebinding (its own name resolving to 127.0.0.1: refused by the Host check) or by
cross-site requests (refused: the cookie is SameSite=Strict, mutations are POST with a JSON body
and a custom header, which a cross-site page cannot send without a CORS preflight we never answer).
The token arrives once in the URL the server prints; the first page load turns it into an HttpOnly
cookie, and the page's script sends it as `X-Console-Token` on every JSON call.
"""

from __future__ import annotations

import hmac
import ipaddress
from http.cookies import CookieError, SimpleCookie
from typing import Mapping

#: The header every JSON call carries (a custom header also forces a CORS preflight cross-site).
TOKEN_HEADER = "x-console-token"

#: Names a loopback server is reached by; anything else in Host is a rebinding attempt.
_LOOPBACK_NAMES = {"localhost", "localhost.", "ip6-localhost", "ip6-loopback"}

#: Sent with every console answer: nothing framed, sniffed, cached or leaked through Referer;
#: only the console's own scripts and styles run.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A request header by name, whatever its case (http.server's Message is case-blind, a dict is not)."""
    value = headers.get(name)
    if value is not None:
        return value
    lowered = name.lower()
    for key, candidate in headers.items():
        if key.lower() == lowered:
            return candidate
    return None


def split_host(host: str) -> tuple[str, str]:
    """`Host` as (name, port): '127.0.0.1:8080', '[::1]:8080', 'localhost'."""
    host = host.strip()
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        return name, rest[1:] if rest.startswith(":") else ""
    name, _, port = host.rpartition(":") if host.count(":") == 1 else (host, "", "")
    return name, port


def is_loopback_host(host: str | None) -> bool:
    """True for a Host header naming loopback (127.0.0.0/8, ::1, localhost), with or without a port."""
    if not host:
        return False
    name, port = split_host(host)
    if port and not port.isdigit():
        return False
    name = name.lower()
    if name in _LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def cookie_name(host: str | None) -> str:
    """One cookie per port: browsers share cookies between the ports of a host, and two local
    servers (or a test's several) must not take each other's token."""
    _, port = split_host(host or "")
    return f"crhelper_console_{port or '80'}"


def token_matches(offered: str | None, token: str) -> bool:
    """Constant-time comparison; an absent or empty offer never matches."""
    if not offered or not token:
        return False
    return hmac.compare_digest(offered.encode("utf-8", "surrogateescape"), token.encode("utf-8"))


def cookie_token(headers: Mapping[str, str], host: str | None) -> str | None:
    """The console token from this server's cookie, if the request carries one."""
    raw = header(headers, "cookie")
    if not raw:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except CookieError:
        return None
    morsel = jar.get(cookie_name(host))
    return morsel.value if morsel is not None else None


def set_cookie(host: str | None, token: str) -> str:
    """The Set-Cookie value that keeps the token for this server's pages (not readable by scripts)."""
    return f"{cookie_name(host)}={token}; Path=/; HttpOnly; SameSite=Strict"
