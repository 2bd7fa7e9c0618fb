"""docs/receiving.md's JWT receiver example, taken from the page and run as written, checks
the token the worker's signer puts on a delivery against the JWKS as the control plane
serves it (over HTTP); a token for another audience, or signed by a key not in the JWKS, is
refused. If the page's example changes, this test runs the new one."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jwt
import pytest

from core.endpoint_auth import JwtAuth
from core.model import Endpoint, Subscription
from core.signing_keys import JwtSigning, new_key
from delivery_workers.endpoint_auth import JwtSigner
from tests.support.hook import SECRET
from tests.support.uvicorn_thread import uvicorn_thread

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "receiving.md"
MARK = "<!-- jwt receiver example: tested -->"
URL = "https://hooks.example.com/in"


def example() -> str:
    after = GUIDE.read_text().split(MARK, 1)[1]
    assert after.lstrip().startswith("```python\n"), "the mark must precede the example"
    return after.split("```python\n", 1)[1].split("\n```", 1)[0]


def _jwks_app(document: dict[str, Any]) -> Any:
    body = json.dumps(document).encode()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def test_the_guides_receiver_accepts_our_token_and_refuses_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = datetime.now(UTC)
    keys = JwtSigning(issuer="https://cp.example").empty().rotated(new_key("ES256"), now)
    signer = JwtSigner(None)
    signer._set(keys.model_dump_json().encode())
    sub = Subscription(
        project="shop",
        name="billing",
        topic_project="shop",
        topic="orders",
        endpoint=Endpoint(url=URL),
        signing_secret=SECRET,
        auth=JwtAuth(type="jwt"),
    )
    token = signer.sign(sub, JwtAuth(type="jwt"), URL)
    stranger = JwtSigning(issuer="https://cp.example").empty().rotated(new_key("ES256"), now)
    with uvicorn_thread(_jwks_app(keys.jwks(now))) as port:
        monkeypatch.setenv("HTTPBUS_JWKS_URL", f"http://127.0.0.1:{port}/.well-known/jwks.json")
        monkeypatch.setenv("HTTPBUS_JWT_ISSUER", "https://cp.example")
        namespace: dict[str, Any] = {}
        exec(compile(example(), str(GUIDE), "exec"), namespace)
        verified = namespace["verified"]
        claims = verified(f"Bearer {token}", URL)
        assert claims["sub"] == "shop/billing" and claims["aud"] == URL
        with pytest.raises(jwt.InvalidAudienceError):
            verified(f"Bearer {token}", "https://other.example.com/")
        forged = JwtSigner(None)
        forged._set(stranger.model_dump_json().encode())
        with pytest.raises(jwt.PyJWKClientError):  # its kid is not in our JWKS
            verified(f"Bearer {forged.sign(sub, JwtAuth(type='jwt'), URL)}", URL)
