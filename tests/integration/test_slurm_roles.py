"""Roles from a real slurmdbd: ``sacctmgr`` (run by the collector's association source) names
hpcs_carol coordinator of team-a and team-b; she is their team lead through an API token
without being in the users file, and a coordinator added in Slurm is a team lead from the next
poll on, with the tokens they already hold."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hpcscope.model.access import Role
from hpcscope.serve.app import create_app
from hpcscope.service.collect.scheduler import AssociationSource
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings
from tests.conftest import TEST_PASSWORD_HASH_COST_LOG2, basic_auth, demo_users
from tests.support.slurm import slurm_cluster

pytestmark = [pytest.mark.slurm]


def test_team_leads_come_from_slurm_coordinators(tmp_path: Path) -> None:
    settings = Settings(
        store_path=tmp_path / "store.duckdb",
        secret_key="k",
        password_hash_cost_log2=TEST_PASSWORD_HASH_COST_LOG2,
    )
    service = Service.open(settings, users=demo_users())
    try:
        with slurm_cluster(tmp_path / "slurm", accounting=True) as cluster:

            def run(args: Sequence[str]) -> str:
                return cluster.run(list(args)).stdout

            source = AssociationSource(runner=run)
            service.store.replace_account_memberships(source.fetch()).result()
            carol = service.principal("hpcs_carol", slurm_users=True)
            assert carol is not None and carol.role is Role.TEAM_LEAD
            assert carol.coordinated_accounts == {"team-a", "team-b"}
            alice = service.principal("hpcs_alice", slurm_users=True)
            assert alice is not None and alice.role is Role.RESEARCHER
            # a password login needs the users file; an unknown name is nobody either way
            assert service.principal("hpcs_carol") is None
            assert service.principal("mallory", slurm_users=True) is None

            with TestClient(create_app(service), headers=basic_auth("admin")) as admin:
                secrets = {}
                for user in ("hpcs_carol", "hpcs_alice"):
                    made = admin.post(
                        "/api/tokens", json={"label": "cron", "scope": "read", "user": user}
                    )
                    assert made.status_code == 201, made.text
                    secrets[user] = made.json()["secret"]

                def whoami(user: str) -> dict[str, object]:
                    headers = {"Authorization": f"Bearer {secrets[user]}"}
                    response = admin.get("/api/whoami", headers=headers)
                    assert response.status_code == 200, response.text
                    body: dict[str, object] = response.json()
                    return body

                assert whoami("hpcs_carol")["role"] == "team_lead"
                assert whoami("hpcs_carol")["coordinated_accounts"] == ["team-a", "team-b"]
                assert whoami("hpcs_alice")["role"] == "researcher"
                # Slurm makes alice a coordinator: her existing token follows at the next poll
                run(["sacctmgr", "-i", "add", "coordinator", "Accounts=team-b", "Names=hpcs_alice"])
                service.store.replace_account_memberships(source.fetch()).result()
                promoted = whoami("hpcs_alice")
                assert promoted["role"] == "team_lead"
                assert promoted["coordinated_accounts"] == ["team-b"]
    finally:
        service.close()
