"""``httpbus signing-keys``: the keys of delivery JWTs (subscriptions with ``--auth jwt``):
list them, rotate now (admin). The control plane also rotates them on its schedule
(``jwt_signing.rotate_every_s``); receivers read the public halves at
``/.well-known/jwks.json`` (docs/receiving.md)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.kit import Call, command, get, post, table
from control_plane.client import path

app = typer.Typer(
    help="JWT signing keys of deliveries: list, rotate (admin).", no_args_is_help=True
)


def _shown(found: dict[str, Any]) -> str:
    rows = [
        (
            k["kid"],
            k["alg"],
            "signing" if k["signing"] else "retiring" if k["stopped_at"] else "waiting",
            k["signs_from"],
            k["published_until"] or "-",
        )
        for k in found["keys"]
    ]
    table(None, ("kid", "alg", "state", "signs from", "published until"), rows)
    return (
        f"issuer {found['issuer']}; a new key is published {found['publish_lead_s']} s before "
        f"it signs and kept {found['retain_s']} s after it stops; tokens live "
        f"{found['token_ttl_s']} s"
    )


@command(app, "list")
def list_() -> Call:
    """The keys in the JWKS now: which signs, which waits, which retires."""
    return get(path("v1", "signing-keys"), text=_shown)


@command(app)
def rotate(
    lead_s: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=7 * 86_400,
            help="Seconds between publishing the new key and signing with it; default: the "
            "control plane's jwt_signing.publish_lead_s (keep it above how long receivers "
            "cache the JWKS).",
        ),
    ] = None,
) -> Call:
    """Make a new signing key now: published at once, signing after the lead."""
    body = {} if lead_s is None else {"lead_s": lead_s}
    return post(path("v1", "signing-keys:rotate"), body, text=_shown)
