"""``/v1/projects/{project}/tokens``: produce tokens, scoped to topics of one project."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Path, status
from pydantic import BaseModel, ConfigDict, Field

from control_plane.api.auth import OWNER, VIEWER
from control_plane.api.deps import AdminDep, ListQueryIfAskedDep, ProjectName, page_or_all
from control_plane.api.schemas import Page
from core.model import ProduceToken
from core.names import Name
from core.tokens import make_token

router = APIRouter(prefix="/v1/projects/{project}/tokens", tags=["tokens"])


class TokenCreate(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    topics: tuple[Name | Literal["*"], ...] = Field(default=("*",), min_length=1, max_length=1000)
    description: str = Field(default="", max_length=1_000)


class TokenView(BaseModel):
    id: str
    project: str
    topics: tuple[str, ...]
    description: str


class TokenCreated(TokenView):
    token: str = Field(description="the bearer token; shown only now, store it safely")


def _view(token: ProduceToken) -> dict[str, object]:
    return token.model_dump(include={"id", "project", "topics", "description"})


@router.post("", status_code=status.HTTP_201_CREATED, **OWNER)
async def create_token(project: ProjectName, body: TokenCreate, admin: AdminDep) -> TokenCreated:
    model, plaintext = make_token(project, body.topics, body.description)
    await admin.catalog.create_token(model)
    return TokenCreated.model_validate({**_view(model), "token": plaintext})


@router.get("", **VIEWER)
async def list_tokens(
    project: ProjectName, admin: AdminDep, query: ListQueryIfAskedDep
) -> list[TokenView] | Page[TokenView]:
    """The project's produce tokens (never the tokens themselves). With any of ``q``,
    ``cursor``, ``limit``: a page by token id (``q`` searches ids, topics and descriptions;
    ``next_cursor``, null on the last page, and ``prev_cursor`` ask for the pages around);
    without them the whole list, as before paging (deprecated)."""
    found = [TokenView.model_validate(_view(t)) for t in await admin.catalog.list_tokens(project)]
    return await page_or_all(found, query, lambda t: t.id, _text)


def _text(token: TokenView) -> str:
    return " ".join([*token.topics, token.description])


@router.delete("/{token_id}", status_code=status.HTTP_204_NO_CONTENT, **OWNER)
async def delete_token(
    project: ProjectName, admin: AdminDep, token_id: str = Path(pattern=r"^[a-f0-9]{12}$")
) -> None:
    await admin.catalog.delete_token(project, token_id)
