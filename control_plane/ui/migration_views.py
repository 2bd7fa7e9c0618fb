"""The migration page: a verified migration's state and its windows as a chart (matched,
missing, late per window, oldest on the left), and its abandon button during the dual write."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from control_plane.ui.deps import ApiDep, Name, SessionDep
from control_plane.ui.render import render
from control_plane.ui.topic_process import TopicProcess

router = APIRouter()

BAR_W, GAP, HEIGHT, PAD, AXIS = 14, 4, 160, 10, 18
COLORS = {"matched": "#2e8b57", "missing": "#c0392b", "late": "#e08e0b"}
MIGRATION = TopicProcess(
    "migration",
    unavailable="Verified migration is not available on this control plane.",
    # The API's 404 already says it ("topic p/t has had no migration", or that the topic
    # does not exist): said once, not after a sentence of our own that repeats it.
    none_yet="{reason}.",
    not_ended="not abandoned",
    ended="migration abandoned",
    question=(
        "Abandon the migration of {name}? The dual write stops and the shadow segment's "
        "storage is deleted; the legacy producers go on as before."
    ),
    yes="Yes, abandon",
)


@dataclass(frozen=True)
class Bar:
    """One window: its stacked parts (kind, y, height), its verdict and a tooltip."""

    x: int
    parts: tuple[tuple[str, int, int], ...]
    verdict: str
    start_ms: int
    counts: dict[str, int]
    tooltip: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    bars: tuple[Bar, ...]
    top: int  # the most messages in one window: the scale


def _counts(w: dict[str, Any]) -> dict[str, int]:
    missing = int(w["missing_in_bus"]) + int(w["missing_in_legacy"])
    return {
        "matched": int(w["matched"]) - int(w["late"]),
        "late": int(w["late"]),
        "missing": missing,
    }


def chart(windows: list[dict[str, Any]]) -> Chart:
    """Geometry of the stacked bars of ``windows`` (the API's, oldest first)."""
    top = max((sum(_counts(w).values()) for w in windows), default=0) or 1
    bars = []
    for i, w in enumerate(windows):
        counts, y, parts = _counts(w), PAD + HEIGHT, []
        for kind in ("matched", "late", "missing"):
            h = round(HEIGHT * counts[kind] / top)
            if counts[kind] and h == 0:
                h = 1  # a single missing id is still seen
            y -= h
            parts.append((kind, y, h))
        verdict = "clean" if w["clean"] else ("dirty" if w["closed"] else "open")
        ids = ", ".join((w["missing_in_bus_ids"] + w["missing_in_legacy_ids"])[:5])
        tip = f"{counts['matched']} matched, {counts['late']} late, {counts['missing']} missing"
        bars.append(
            Bar(
                x=PAD + i * (BAR_W + GAP),
                parts=tuple(parts),
                verdict=verdict,
                start_ms=int(w["start_ms"]),
                counts=counts,
                tooltip=f"{tip} ({verdict}){': ' + ids if ids else ''}",
            )
        )
    width = PAD * 2 + max(1, len(bars)) * (BAR_W + GAP)
    return Chart(width=width, height=HEIGHT + PAD * 2 + AXIS, bars=tuple(bars), top=top)


def _shown(migration: dict[str, Any] | None, missing: str | None) -> dict[str, Any]:
    """The migration, its chart, or why there is none (what the page draws)."""
    drawn = chart(migration["windows"]) if migration else None
    return {"migration": migration, "chart": drawn, "colors": COLORS, "missing": missing}


@router.get("/ui/projects/{project}/topics/{topic}/migration")
async def page(
    project: Name, topic: Name, request: Request, session: SessionDep, api: ApiDep
) -> Response:
    shown = _shown(*await MIGRATION.fetch(api, project, topic))
    return render(request, "migration.html", session, project=project, topic=topic, **shown)


@router.post("/ui/projects/{project}/topics/{topic}/migration/abandon")
async def abandon(
    project: Name, topic: Name, request: Request, session: SessionDep, api: ApiDep
) -> Response:
    return await MIGRATION.end(request, session, api, project, topic)
