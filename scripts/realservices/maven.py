"""Resolve a server's jars from Maven Central and cache the classpath outside the work tree."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

POMS = Path(__file__).parent / "poms"
SETTINGS = POMS / "settings.xml"


class MissingTool(RuntimeError):
    """Java or Maven is not on this machine."""


def require_tools() -> None:
    """Fail in one line, naming what to install, when Java or Maven is missing."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        raise MissingTool(
            f"{' and '.join(missing)} not found: install them with "
            "'apt-get install -y openjdk-17-jre-headless maven' (Java 17 or newer)"
        )


def classpath(server: str, cache: Path) -> str:
    """The classpath of ``server`` (a folder of ``poms/``), resolved once per POM version."""
    pom = POMS / server / "pom.xml"
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:12]
    out = cache / f"{server}-{digest}.classpath"
    if out.exists():
        cached = out.read_text().strip()
        if all(Path(jar).exists() for jar in cached.split(":")):
            return cached
    require_tools()
    cache.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    cmd = [
        "mvn",
        "-B",
        "-q",
        "-s",
        str(SETTINGS),
        "-f",
        str(pom),
        "dependency:build-classpath",
        f"-Dmdep.outputFile={tmp}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        raise RuntimeError(f"mvn could not resolve the {server} jars:\n{tail}")
    tmp.replace(out)
    return out.read_text().strip()


def spark_jars(cache: Path) -> list[str]:
    """The jars the Spark audit jobs pass as ``spark.jars`` (the Kafka connector, from
    ``poms/spark``), resolved once like a server's classpath."""
    return classpath("spark", cache).split(":")
