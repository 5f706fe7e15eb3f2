"""Who is looking at the cluster diagram: a principal, or an anonymous visitor.

Every live query of the diagram passes the viewer's job scope to the store
(:mod:`hpcscope.service.diagram.live` says what each viewer sees).
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcscope.model.access import JobScope, Principal
from hpcscope.service.settings import Settings


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who is looking at the diagram: a principal, or an anonymous visitor."""

    principal: Principal | None

    @property
    def anonymous(self) -> bool:
        return self.principal is None

    @property
    def name(self) -> str | None:
        return self.principal.name if self.principal is not None else None

    def scope(self) -> JobScope:
        """The principal's job scope; no job at all for an anonymous visitor."""
        if self.principal is None:
            return JobScope(all_jobs=False)
        return self.principal.job_scope()

    def visibility(self) -> tuple[bool, bool, JobScope]:
        """All that :func:`live_state` reads of the viewer: anonymity, admin rights (idle GPUs'
        counters) and the job scope. Viewers who agree on it see the same live state."""
        admin = self.principal is not None and self.principal.is_admin
        return (self.anonymous, admin, self.scope())


def diagram_viewer(settings: Settings, principal: Principal | None) -> Viewer | None:
    """The viewer for this request, or None when the diagram needs a login."""
    if principal is not None:
        return Viewer(principal)
    return Viewer(None) if settings.anonymous_diagram else None
