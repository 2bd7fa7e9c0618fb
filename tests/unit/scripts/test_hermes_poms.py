"""The Hermes peer's POMs (scripts/realservices/poms/hermes-*): what makes the 2017 artifacts
resolve and run on Java 17 under Maven (bench/peers.py starts them; not part of make test)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from scripts.realservices import hermes

POMS = Path(hermes.__file__).parent / "poms"
NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _deps(root: ET.Element, where: str) -> dict[str, str]:
    found = {}
    for dep in root.findall(where, NS):
        group, artifact = dep.findtext("m:groupId", "", NS), dep.findtext("m:artifactId", "", NS)
        found[f"{group}:{artifact}"] = dep.findtext("m:version", "", NS)
    return found


@pytest.mark.parametrize("part", ["frontend", "consumers", "management"])
def test_each_hermes_pom_pins_what_maven_would_pick_too_old(part: str) -> None:
    root = ET.parse(POMS / f"hermes-{part}" / "pom.xml").getroot()
    deps = _deps(root, "m:dependencies/m:dependency")
    managed = _deps(root, "m:dependencyManagement/m:dependencies/m:dependency")
    assert deps[f"pl.allegro.tech.hermes:hermes-{part}"] == "0.11.0"
    # Java 8 carried these; Java 17 has not.
    assert {"javax.xml.bind:jaxb-api", "javax.activation:activation"} <= set(deps)
    assert "javax.annotation:javax.annotation-api" in deps
    # Gradle's highest-wins versions, which Maven's nearest-wins would lose.
    assert managed["org.glassfish.hk2:hk2-api"] == "2.5.0-b05"
    assert managed["org.apache.kafka:kafka-clients"] == "0.10.0.1"
    exclusions = root.findall(".//m:exclusion/m:artifactId", NS)
    assert [e.text for e in exclusions] == ["tools"]


def test_the_stack_fetches_every_part_it_starts() -> None:
    assert all((POMS / part / "pom.xml").exists() for part in hermes.PARTS)
