"""The one REST client of the admin API, used by the ``httpbus`` commands and the web UI.

It speaks the routes of ``/v1`` (see the API contracts in ``docs/`` and ``/docs``) and turns
every error answer into an :class:`ApiError` carrying the stable ``code`` and ``message``.
A route that this control plane does not serve (a feature not deployed yet answers
``404 no such endpoint``) becomes :class:`NotAvailable`, so callers can say "not available"
instead of "not found". The web UI passes an in-process ``transport``; the CLI a base URL::

    async with AdminClient("http://127.0.0.1:8700", token) as api:
        page = await api.get("/v1/projects", params={"limit": 10})
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx

JSON = Any


class ApiError(Exception):
    """The control plane answered an error (or could not be reached: ``status`` 0)."""

    def __init__(self, status: int, code: str, message: str, details: JSON = None) -> None:
        super().__init__(f"{status} {code}: {message}" if status else message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}

    def field_problems(self) -> dict[str, str]:
        """``{field: problem}`` of a 422 (the API names every field it refused)."""
        fields = self.details.get("fields", []) if isinstance(self.details, dict) else []
        return {str(f.get("field")): str(f.get("problem")) for f in fields if isinstance(f, dict)}


class NotAvailable(ApiError):
    """This control plane does not serve the route (the feature is not deployed)."""


class Unreachable(ApiError):
    """No answer: connection refused, timeout, or a broken response."""


def path(*parts: str) -> str:
    """A URL path from names, each quoted (names are validated by the API, never trusted)."""
    return "/" + "/".join(quote(p, safe="") for p in parts)


def _error(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or "code" not in body:
        text = response.text[:200].strip() or response.reason_phrase
        if response.status_code in (404, 405):
            return NotAvailable(response.status_code, "not_available", text)
        return ApiError(response.status_code, "http_error", text)
    code, message = str(body["code"]), str(body.get("message", ""))
    # The control plane's renderer says so for a route it does not have (core.http_errors).
    if response.status_code in (404, 405) and message.startswith(
        ("no such endpoint", "GET is not allowed", "POST is not allowed", "DELETE is not allowed")
    ):
        return NotAvailable(response.status_code, "not_available", message)
    return ApiError(response.status_code, code, message, body.get("details"))


class AdminClient:
    """An async client of the admin API with the admin bearer token."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 15.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        """``headers``, when given, authenticate instead of ``token`` (the UI forwards its
        session cookie)."""
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=headers if headers is not None else {"Authorization": f"Bearer {token}"},
            transport=transport,
            timeout=timeout,
        )

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def request(
        self,
        method: str,
        url: str,
        *,
        json: JSON = None,
        params: dict[str, Any] | list[tuple[str, Any]] | None = None,
    ) -> JSON:
        """Send one request; the decoded JSON body (None for 204), or an :class:`ApiError`."""
        if isinstance(params, dict):
            params = {k: v for k, v in params.items() if v is not None and v != ""}
        try:
            response = await self._http.request(method, url, json=json, params=params)
        except httpx.HTTPError as exc:
            where = str(self._http.base_url).rstrip("/")
            raise Unreachable(0, "unreachable", f"cannot reach {where}: {exc!s}") from None
        if response.status_code >= 400:
            raise _error(response)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise Unreachable(0, "bad_response", "the answer is not JSON") from None

    async def get(self, url: str, params: dict[str, Any] | None = None) -> JSON:
        return await self.request("GET", url, params=params)

    async def post(self, url: str, body: JSON = None) -> JSON:
        return await self.request("POST", url, json=body)

    async def put(self, url: str, body: JSON) -> JSON:
        return await self.request("PUT", url, json=body)

    async def delete(self, url: str, params: Any = None) -> JSON:
        return await self.request("DELETE", url, params=params)

    # The operations whose contract has a fallback or a loop live here, once for both edges.

    async def set_paused(self, project: str, sub: str, paused: bool) -> JSON:
        """Stop (pause, position kept) or start a subscription. Where the ``stop``/``start``
        routes are not deployed, the same effect through the subscription's ``paused`` field
        (a compare-and-set on the version read just before)."""
        base = path("v1", "projects", project, "subscriptions", sub)
        try:
            return await self.post(f"{base}/{'stop' if paused else 'start'}")
        except NotAvailable:
            current = await self.get(base)
            return await self.put(base, update_body(current, {"paused": paused}))

    async def pages(self, url: str, params: dict[str, Any] | None = None) -> AsyncIterator[JSON]:
        """Every page of the list at ``url`` from the one ``params`` ask, by ``next_cursor``
        (the search ``q`` and ``limit`` kept). A control plane whose pages carry no cursor
        (before cursors) is walked by ``offset`` instead; one whose route answered the
        whole list as an array (before that route paged) is one page of it."""
        asked = dict(params or {})
        while True:
            found = await self.get(url, asked)
            if isinstance(found, list):
                yield {"items": found, "total": len(found), "offset": 0, "next_cursor": None}
                return
            yield found
            if "next_cursor" not in found:  # an older control plane: pages by offset
                shown = len(found.get("items", []))
                start = int(found.get("offset", 0)) + shown
                if shown == 0 or start >= int(found.get("total", 0)):
                    return
                asked = {**asked, "offset": start}
                continue
            if found["next_cursor"] is None:
                return
            asked = {k: v for k, v in asked.items() if k != "offset"}
            asked["cursor"] = found["next_cursor"]


SETTINGS_FIELDS = (
    "endpoint",
    "filter",
    "retry",
    "dlq_enabled",
    "max_in_flight",
    "rate_limit_per_second",
    "circuit_breaker",
    "delay_ms",
    "paused",
    "description",
    "batch",
    "delivery_format",
    "auth",
)


def update_body(current: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A subscription PUT body: the settings as read, the changes, and the version read."""
    body = {k: current[k] for k in SETTINGS_FIELDS if k in current}
    body.update(changes)
    body["version"] = current["version"]
    return body
