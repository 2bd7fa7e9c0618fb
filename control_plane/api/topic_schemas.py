"""``/v1/projects/{project}/topics/{topic}/schema``: a topic's JSON Schema and its versions.

``PUT`` adds a version if it is compatible with the latest one under the compatibility mode
the request names (or the topic's, ``backward`` at first); else 409 ``schema_incompatible``
naming the path. Putting the latest version's schema again adds nothing. ``DELETE`` stops
validation and keeps the history; the next ``PUT`` continues the numbering and is checked
against the latest version. See docs/schemas.md.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, status
from pydantic import BaseModel, ConfigDict, Field

from control_plane.api.auth import OWNER, VIEWER
from control_plane.api.deps import AdminDep, ProjectName, TopicName
from core.errors import NotFound, SchemaIncompatible
from core.schema_compat import incompatibility
from core.schemas import Compatibility, SchemaState, SchemaVersion, check_document
from metastore.catalog import Catalog

router = APIRouter(prefix="/v1/projects/{project}/topics/{topic}/schema", tags=["schemas"])


class SchemaPut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_: dict[str, Any] = Field(alias="schema", description="a JSON Schema (draft 2020-12)")
    compatibility: Compatibility | None = Field(
        default=None, description="the mode from this version on; default: the topic's"
    )


class SchemaVersions(BaseModel):
    """A topic's schema history: every version number, the latest, and whether it validates."""

    project: str
    topic: str
    active: bool
    compatibility: Compatibility
    latest: int
    versions: list[int]


async def _state(catalog: Catalog, project: str, topic: str) -> tuple[SchemaState, int]:
    await catalog.get_topic(project, topic)
    found = await catalog.get_schema_state(project, topic)
    if found is None:
        raise NotFound(f"topic {project}/{topic} has no schema")
    return found


@router.put("", **OWNER)
async def put_schema(
    project: ProjectName, topic: TopicName, body: SchemaPut, admin: AdminDep
) -> SchemaVersion:
    """Add a schema version (or answer the latest if it is the same schema and mode)."""
    return await add_version(admin.catalog, project, topic, body.schema_, body.compatibility)


async def add_version(
    catalog: Catalog,
    project: str,
    topic: str,
    schema: dict[str, Any],
    compatibility: Compatibility | None = None,
) -> SchemaVersion:
    """The version ``schema`` becomes (see the module's docstring), or
    ``SchemaIncompatible`` / ``ValidationFailed``."""
    await catalog.get_topic(project, topic)
    check_document(schema)
    found = await catalog.get_schema_state(project, topic)
    if found is None:
        mode = compatibility or Compatibility.BACKWARD
        new = SchemaVersion(version=1, schema_=schema, compatibility=mode)
        state = SchemaState(latest=1, compatibility=mode)
        await catalog.put_schema_version(project, topic, state, new, -1)
        return new
    state, read_at = found
    mode = compatibility or state.compatibility
    latest = await catalog.get_schema_version(project, topic, state.latest)
    if state.active and latest.schema_ == schema and mode == state.compatibility:
        return latest
    problem = incompatibility(latest.schema_, schema, mode)
    if problem is not None:
        raise SchemaIncompatible(
            f"{problem.message} (compatibility {mode.value}, against version {latest.version})",
            details={
                "path": problem.path,
                "rule": problem.rule,
                "compatibility": mode.value,
                "against_version": latest.version,
            },
        )
    new = SchemaVersion(version=state.latest + 1, schema_=schema, compatibility=mode)
    next_state = SchemaState(latest=new.version, active=True, compatibility=mode)
    await catalog.put_schema_version(project, topic, next_state, new, read_at)
    return new


@router.get("", **VIEWER)
async def get_schema(project: ProjectName, topic: TopicName, admin: AdminDep) -> SchemaVersion:
    """The latest version, while the topic validates against it (404 after a DELETE)."""
    state, _ = await _state(admin.catalog, project, topic)
    if not state.active:
        raise NotFound(f"topic {project}/{topic} has no schema in force (its history remains)")
    return await admin.catalog.get_schema_version(project, topic, state.latest)


@router.get("/versions", **VIEWER)
async def list_versions(project: ProjectName, topic: TopicName, admin: AdminDep) -> SchemaVersions:
    state, _ = await _state(admin.catalog, project, topic)
    versions = await admin.catalog.list_schema_versions(project, topic)
    return SchemaVersions(project=project, topic=topic, versions=versions, **state.model_dump())


@router.get("/versions/{version}", **VIEWER)
async def get_version(
    project: ProjectName,
    topic: TopicName,
    admin: AdminDep,
    version: int = Path(ge=1, le=1_000_000),
) -> SchemaVersion:
    await admin.catalog.get_topic(project, topic)
    return await admin.catalog.get_schema_version(project, topic, version)


@router.delete("", status_code=status.HTTP_204_NO_CONTENT, **OWNER)
async def delete_schema(project: ProjectName, topic: TopicName, admin: AdminDep) -> None:
    """Stop validating the topic's payloads; the versions stay readable."""
    state, read_at = await _state(admin.catalog, project, topic)
    if not state.active:
        raise NotFound(f"topic {project}/{topic} has no schema in force")
    await admin.catalog.set_schema_state(
        project, topic, state.model_copy(update={"active": False}), read_at
    )
