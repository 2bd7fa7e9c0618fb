"""The browser tests' fixtures (tests/support/ui.py), for every module here that asks for
them: ``browser`` (Chromium, one per module), ``page`` (a fresh page per test) and
``endpoint`` (a webhook endpoint double per test). A module's own fixture of the same name
wins over these (test_dev_delivery.py's ``endpoint``)."""

from tests.support.ui import browser_fixture, endpoint_fixture, page_fixture

__all__ = ["browser_fixture", "endpoint_fixture", "page_fixture"]
