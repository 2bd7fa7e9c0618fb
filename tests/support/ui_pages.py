"""Shared pieces of the UI's unit tests: log in through the form, read a form's CSRF token."""

from __future__ import annotations

import re

import httpx

TOKEN = "test-admin-token-0123456789"


def hidden(html: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert found, f"no hidden {name} in the page"
    return found.group(1)


async def login(client: httpx.AsyncClient, token: str = TOKEN) -> httpx.Response:
    page = await client.get("/ui/login")
    assert page.status_code == 200
    return await client.post(
        "/ui/login",
        data={"token": token, "nonce": hidden(page.text, "nonce"), "next": "/ui/projects"},
    )


async def csrf(client: httpx.AsyncClient, url: str = "/ui/projects") -> str:
    page = await client.get(url)
    assert page.status_code == 200, page.text[:500]
    return hidden(page.text, "csrf")
