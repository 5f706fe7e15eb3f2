"""Notifications: job notes, notification rules, delivery (e-mail, webhook, Alertmanager),
warn-then-cancel and the audit log (``docs/notifications.md``)."""
