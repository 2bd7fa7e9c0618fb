"""docs/configuration.md's reference is what the settings models say: every setting of every
service, with its type, default and a description (regenerate with
``python -m scripts.config_docs`` after changing a model)."""

from __future__ import annotations

from scripts.config_docs import current, render


def test_the_reference_matches_the_models() -> None:
    assert current() == render(), "run: .venv/bin/python -m scripts.config_docs"


def test_every_setting_says_what_it_is() -> None:
    rows = [line for line in render().splitlines() if line.startswith("| `")]
    assert len(rows) > 60
    assert [row for row in rows if row.endswith("|  |")] == []
