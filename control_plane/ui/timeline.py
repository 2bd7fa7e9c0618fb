"""The segment timeline drawn as a picture: one box per segment, oldest on the left."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BOX_W, BOX_H, GAP, PAD = 190, 96, 34, 10
COLORS = {"kafka": "#2f6fb0", "pulsar": "#7b3fa0", "embedded": "#2e8b57"}
STATE_OPACITY = {
    "pending": 0.45,
    "active": 1.0,
    "unsealed": 0.6,
    "sealed": 0.75,
    "retired": 0.35,
}


@dataclass(frozen=True)
class Box:
    """One segment's box: where it is drawn and the lines written in it."""

    segment: int
    x: int
    y: int
    width: int
    height: int
    fill: str
    opacity: float
    lines: tuple[str, ...]
    tooltip: str
    produce: bool


@dataclass(frozen=True)
class Picture:
    width: int
    height: int
    boxes: tuple[Box, ...]
    arrows: tuple[tuple[int, int, int], ...]  # (x1, x2, y) between consecutive boxes


def _day(value: Any) -> str:
    text = str(value or "")
    return text[:16].replace("T", " ") if text else "—"


def draw(timeline: dict[str, Any]) -> Picture:
    """Geometry and labels of the timeline of ``GET …/segments``."""
    pointer = (timeline.get("produce_pointer") or {}).get("segment_id")
    boxes = []
    for i, seg in enumerate(timeline.get("segments", [])):
        x = PAD + i * (BOX_W + GAP)
        state = str(seg.get("state", ""))
        ended = seg.get("sealed_at") or seg.get("unsealed_at")
        until = _day(ended) if ended else "now"
        lines = (
            f"#{seg['id']} {seg['backend']} · {state}",
            f"{seg['cluster']} · {seg['partitions']} partition(s)",
            f"from {_day(seg.get('created_at'))}",
            f"until {until}",
        )
        boxes.append(
            Box(
                segment=int(seg["id"]),
                x=x,
                y=PAD,
                width=BOX_W,
                height=BOX_H,
                fill=COLORS.get(str(seg.get("backend")), "#666"),
                opacity=STATE_OPACITY.get(state, 1.0),
                lines=lines,
                tooltip=_tooltip(seg),
                produce=seg["id"] == pointer,
            )
        )
    arrows = tuple((b.x + BOX_W, b.x + BOX_W + GAP, PAD + BOX_H // 2) for b in boxes[:-1])
    width = PAD * 2 + max(1, len(boxes)) * BOX_W + max(0, len(boxes) - 1) * GAP
    return Picture(width=width, height=BOX_H + PAD * 2 + 18, boxes=tuple(boxes), arrows=arrows)


def _tooltip(seg: dict[str, Any]) -> str:
    """The storage topic, and why a failover opened or left the segment."""
    parts = [f"storage topic {seg.get('storage_topic', '')}"]
    if seg.get("opened_by"):
        parts.append(f"opened by {seg['opened_by']}")
    if seg.get("unsealed_at"):
        parts.append(f"left unsealed by a failover at {seg['unsealed_at']}")
    return "; ".join(parts)
