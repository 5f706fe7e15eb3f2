"""The notifications page in a real headless Chromium: a user turns a channel off and mutes a
rule for themself; an admin sees the audit log, a researcher does not."""

from __future__ import annotations

from typing import Any

import pytest

from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.store import notify as notify_store
from hpcscope.store.notify import AuditEntry, record_audit
from tests.support.browser import login, screenshot
from tests.support.servers import live_server

pytestmark = pytest.mark.browser


def test_opt_out_on_the_page_and_the_admins_audit(service: Service, page: Any) -> None:
    now = utcnow()
    record_audit(
        service.store,
        [
            AuditEntry(at=now, kind="action", rule_id="idle-allocation", job_id="5001",
                       user="alice", account="vision", channel="scancel", recipient=None,
                       outcome="cancelled", detail="scancel 5001 (idle): ok")
        ],
    ).result()  # fmt: skip
    with live_server(create_app(service)) as base:
        login(page, base, "alice", "alice-demo")
        page.goto(f"{base}/notify")
        assert page.locator("#audit").count() == 0
        form = page.locator("#preferences")
        form.get_by_label("Webhook").uncheck()
        form.get_by_label("low-efficiency").check()
        form.get_by_role("button", name="Save").click()
        page.wait_for_url(f"{base}/notify")
        assert not page.locator("#preferences").get_by_label("Webhook").is_checked()
        assert page.locator("#preferences").get_by_label("low-efficiency").is_checked()
        screenshot(page, "notify-preferences")
        saved = notify_store.preferences(service.store, "alice")
        assert (saved.email_enabled, saved.webhook_enabled, saved.muted_rules) == (
            True,
            False,
            ("low-efficiency",),
        )
        assert notify_store.preferences(service.store, "bob").webhook_enabled is True
        login(page, base, "admin", "admin-demo")
        page.goto(f"{base}/notify")
        row = page.locator("#audit tbody tr").first.inner_text()
        assert "cancelled" in row and "5001" in row and "scancel" in row
        screenshot(page, "notify-audit-admin")
