"""No page runs inline code: the pages' Content-Security-Policy (``script-src 'self';
style-src 'self'``) blocks inline handlers, ``javascript:`` URLs, inline script bodies and
style attributes, so one of them in a template is a control that silently does not work (a
confirmation that never asks). Behaviour lives in the served app.js, attached by data-
attributes (``data-confirm``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from control_plane.ui.render import CSP

TEMPLATES = sorted((Path(__file__).resolve().parents[3] / "control_plane" / "ui").rglob("*.html"))
HANDLER = re.compile(r"<[^>]*\son[a-z]+\s*=", re.I | re.S)
JAVASCRIPT_URL = re.compile(r"javascript\s*:", re.I)
STYLE_ATTRIBUTE = re.compile(r"<[^>]*\sstyle\s*=", re.I | re.S)
SCRIPT = re.compile(r"<script\b([^>]*)>(.*?)</script>", re.I | re.S)


def _inline(html: str) -> list[str]:
    """What the CSP would block in ``html``."""
    found = [m.group(0)[-60:] for m in HANDLER.finditer(html)]
    found += [m.group(0) for m in JAVASCRIPT_URL.finditer(html)]
    found += [m.group(0)[-60:] for m in STYLE_ATTRIBUTE.finditer(html)]
    found += ["<style>"] if re.search(r"<style\b", html, re.I) else []
    for attributes, body in SCRIPT.findall(html):
        data = re.search(r'type="application/(ld\+)?json"', attributes)
        if body.strip() and not data:
            found.append(f"<script{attributes}>{body[:40]}")
    return found


def test_the_templates_are_found() -> None:
    assert len(TEMPLATES) > 10


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_no_template_has_inline_code(template: Path) -> None:
    assert _inline(template.read_text()) == []


def test_the_scan_catches_what_the_csp_blocks() -> None:
    for bad in (
        "<form onsubmit=\"return confirm('x')\">",
        '<button type="submit" onClick="go()">',
        '<a href="javascript:void(0)">',
        '<span style="color: red">',
        "<script>alert(1)</script>",
        "<style>p { color: red }</style>",
    ):
        assert _inline(bad), bad
    assert not _inline('<script type="application/json" id="d">{"a": 1}</script>')
    assert not _inline('<script src="/ui/static/app.js"></script>')
    assert not _inline('<form data-confirm="Abort the cutover?" id="abort">')


def test_the_csp_allows_no_inline_code() -> None:
    assert "unsafe-inline" not in CSP and "unsafe-eval" not in CSP
    assert "script-src 'self'" in CSP and "style-src 'self'" in CSP


def test_every_confirmation_is_a_data_attribute_app_js_attaches() -> None:
    app_js = (TEMPLATES[0].parents[1] / "static" / "app.js").read_text()
    assert "form[data-confirm]" in app_js and "window.confirm" in app_js
    asking = [t.name for t in TEMPLATES if "data-confirm=" in t.read_text()]
    assert {"cutover.html", "migration.html", "topic.html"} <= set(asking)
