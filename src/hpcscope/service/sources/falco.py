"""Falco: its ``file_output`` (JSON lines), tailed into the security events buffer.

Follows rotation (rename or copytruncate) and waits for a file that does not exist yet
(``service/security/sources.py``); the alert engine (``security_events``) drains the buffer
in the same cycle. Falco's ``http_output`` posts to ``/api/ingest/falco`` instead, into the
same buffer.
"""

from __future__ import annotations

from hpcscope.service.security.sources import FalcoSource
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import FalcoSection
from hpcscope.service.sources import SourceContext, SourceSpec
from hpcscope.service.sources._tail import TailedEvents


def _configured(settings: Settings) -> bool:
    return settings.falco.events_path is not None


def _build(context: SourceContext) -> TailedEvents:
    assert context.settings.falco.events_path is not None
    return TailedEvents("falco", FalcoSource(context.settings.falco.events_path, context.buffer()))


SOURCE = SourceSpec(
    name="falco",
    settings=FalcoSection,
    order=50,
    configured=_configured,
    build=_build,
    summary="Falco's JSON file output, tailed: runtime security events",
)
