"""A URL httpbus calls (an endpoint, a project's notification receiver, an OAuth token
endpoint) is http or https: its type (``AnyHttpUrl``) refuses every other scheme, and the
message names the field and the schemes that fit."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from core.endpoint_auth import OAuth2ClientCredentials
from core.model import Endpoint, Project

OAUTH = {"type": "oauth2_client_credentials", "client_id": "httpbus", "client_secret": "s"}
CASES: list[tuple[type[BaseModel], dict[str, Any], str]] = [
    (Endpoint, {}, "url"),
    (Project, {"name": "shop"}, "notification_url"),
    (OAuth2ClientCredentials, OAUTH, "token_url"),
]


@pytest.mark.parametrize(("model", "fields", "name"), CASES)
@pytest.mark.parametrize("url", ["ftp://example.com/hook", "file:///etc/passwd", "ws://x/"])
def test_a_url_of_another_scheme_is_refused(
    model: type[BaseModel], fields: dict[str, Any], name: str, url: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        model.model_validate({**fields, name: url})
    [error] = refused.value.errors()
    assert (error["loc"], error["type"]) == ((name,), "url_scheme")
    assert "'http' or 'https'" in error["msg"]


@pytest.mark.parametrize(("model", "fields", "name"), CASES)
def test_http_and_https_pass(model: type[BaseModel], fields: dict[str, Any], name: str) -> None:
    for url in ("http://127.0.0.1:9/hook", "https://example.com/hook"):
        assert str(getattr(model.model_validate({**fields, name: url}), name)) == url
