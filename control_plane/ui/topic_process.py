"""What the cutover and migration pages share: a process that runs on one topic, read from
``/v1/projects/{p}/topics/{t}/{kind}`` and ended (aborted, abandoned) by a DELETE of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request
from starlette.responses import Response

from control_plane.client import AdminClient, ApiError, NotAvailable, path
from control_plane.ui.deps import form_of
from control_plane.ui.render import confirmation, confirmed, redirect, refused
from control_plane.ui.session import Session


@dataclass(frozen=True)
class TopicProcess:
    """A topic's ``kind`` (``cutover``, ``migration``) and what its page says of it:
    ``unavailable`` when this control plane does not serve it, ``none_yet`` when the topic
    has had none (``{reason}`` in it: the API's message), ``not_ended`` and ``ended`` after
    the end button; ``question`` (``{name}``: project/topic) is asked before ending it, with
    ``yes`` on the button that ends it."""

    kind: str
    unavailable: str
    none_yet: str
    not_ended: str
    ended: str
    question: str
    yes: str

    def api_path(self, project: str, topic: str) -> str:
        return path("v1", "projects", project, "topics", topic, self.kind)

    async def fetch(
        self, api: AdminClient, project: str, topic: str
    ) -> tuple[dict[str, Any] | None, str | None]:
        """The process as the API shows it, or None and what the page says instead."""
        try:
            found: dict[str, Any] = await api.get(self.api_path(project, topic))
            return found, None
        except NotAvailable:
            return None, self.unavailable
        except ApiError as exc:
            if exc.status == 404:
                reason = exc.message[:1].upper() + exc.message[1:]
                return None, self.none_yet.format(reason=reason)
            raise

    async def end(
        self, request: Request, session: Session, api: AdminClient, project: str, topic: str
    ) -> Response:
        """End the process (the form's POST, once asked), back to its page saying how it
        went."""
        form = await form_of(request, session)
        back = f"/ui/projects/{project}/topics/{topic}/{self.kind}"
        if not confirmed(form):
            question = self.question.format(name=f"{project}/{topic}")
            action = str(request.url.path)
            return confirmation(request, session, question, action=action, back=back, yes=self.yes)
        try:
            await api.delete(self.api_path(project, topic))
        except ApiError as exc:
            return refused(request, back, exc, self.not_ended)
        return redirect(request, back, self.ended)
