"""The token format (prefix, alphabet, checksum), the redaction of weight paths and the roles
derived from the users file and Slurm."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from hpcscope.model.access import (
    REDACTED_PATH,
    Principal,
    Role,
    TokenScope,
    WeightPaths,
    derive_role,
)
from hpcscope.model.tokens import (
    SCANNER_PATTERN,
    TOKEN_CHARS,
    is_well_formed,
    new_token,
    token_digest,
    token_id,
)

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def test_new_tokens_are_well_formed_distinct_and_found_by_the_scanner_pattern() -> None:
    made = {new_token() for _ in range(200)}
    assert len(made) == 200
    for token in made:
        assert len(token) == TOKEN_CHARS == 50 and is_well_formed(token)
        assert re.fullmatch(SCANNER_PATTERN, token)
        assert token_id(token) == token[4:12]
        assert len(token_digest(token)) == 64 and token not in token_digest(token)
    # in a leaked text, the scanner finds the token and nothing around it
    leaked = f"export HPCSCOPE_TOKEN={next(iter(made))}\n"
    assert re.findall(SCANNER_PATTERN, leaked) == [next(iter(made))]


@given(position=st.integers(min_value=4, max_value=TOKEN_CHARS - 1), data=st.data())
def test_any_single_changed_character_is_rejected_by_the_checksum(
    position: int, data: st.DataObject
) -> None:
    token = new_token()
    replacement = data.draw(st.sampled_from([c for c in ALPHABET if c != token[position]]))
    changed = token[:position] + replacement + token[position + 1 :]
    assert not is_well_formed(changed)


@given(st.one_of(st.text(max_size=60), st.text(alphabet=ALPHABET, min_size=46, max_size=46)))
def test_only_what_the_scanner_pattern_finds_can_be_a_token(text: str) -> None:
    for candidate in (text, "hps_" + text):
        if is_well_formed(candidate):
            assert re.fullmatch(SCANNER_PATTERN, candidate)


def test_malformed_tokens() -> None:
    token = new_token()
    for bad in (
        "",
        "hps_",
        token[:-1],
        token + "a",
        "hpx_" + token[4:],
        token[:10] + "-" + token[11:],
    ):
        assert not is_well_formed(bad), bad


PATHS = WeightPaths(roots=("/lustre/scratch/checkpoints",), extensions=("safetensors", "pt"))


def test_weight_paths_are_redacted_and_other_paths_kept() -> None:
    text = (
        "openat /lustre/scratch/checkpoints/llama/step-400/shard-0.distcp by python; "
        "copy to /tmp/x.safetensors, exec of /tmp/payload-4410001 "
        "(link file:///lustre/scratch/checkpoints/llama) and /lustre/scratch/checkpoints-old/a"
    )
    redacted = PATHS.redact(text)
    assert "/lustre/scratch/checkpoints/" not in redacted and "x.safetensors" not in redacted
    assert redacted.count(REDACTED_PATH) == 3
    assert "/tmp/payload-4410001" in redacted
    assert "/lustre/scratch/checkpoints-old/a" in redacted  # a sibling, not under the root
    assert PATHS.redact("no path here") == "no path here"


@given(
    st.lists(st.sampled_from(["model", "step-1", "shard.pt", "x.SAFETENSORS", "a b"]), max_size=4)
)
def test_nothing_under_a_root_survives_redaction(parts: list[str]) -> None:
    path = "/lustre/scratch/checkpoints/" + "/".join(p.replace(" ", "_") for p in parts)
    assert "/lustre/scratch/checkpoints" not in PATHS.redact(f"read {path} twice")


def test_roles_from_the_file_and_slurm() -> None:
    assert derive_role(Role.RESEARCHER, coordinated_in_slurm=frozenset()) is Role.RESEARCHER
    assert derive_role(Role.RESEARCHER, coordinated_in_slurm=frozenset({"a"})) is Role.TEAM_LEAD
    assert derive_role(None, coordinated_in_slurm=frozenset()) is Role.RESEARCHER
    assert derive_role(None, coordinated_in_slurm=frozenset({"a"})) is Role.TEAM_LEAD
    for role in (Role.ADMIN, Role.SECURITY, Role.AUDITOR):
        assert derive_role(role, coordinated_in_slurm=frozenset({"a"})) is role


def test_what_each_role_sees_and_may_do() -> None:
    def p(role: Role, **kw: object) -> Principal:
        return Principal("x", role, frozenset({"acct"}), **kw)  # type: ignore[arg-type]

    researcher, lead = p(Role.RESEARCHER), p(Role.TEAM_LEAD)
    security, auditor, admin = p(Role.SECURITY), p(Role.AUDITOR), p(Role.ADMIN)
    assert not researcher.job_scope().accounts and lead.job_scope().accounts == {"acct"}
    assert security.job_scope().accounts == {"acct"} and not security.job_scope().all_jobs
    assert auditor.job_scope().all_jobs and admin.job_scope().all_jobs
    assert [x.alert_scope().all_jobs for x in (researcher, lead, security, auditor, admin)] == [
        False, False, True, True, True,
    ]  # fmt: skip
    # not the auditor: access records are weight paths, which auditors never see
    assert [x.sees_all_access_records for x in (researcher, lead, security, auditor, admin)] == [
        False, False, True, False, True,
    ]  # fmt: skip
    assert [x.may_change for x in (researcher, lead, security, auditor, admin)] == [
        True, True, True, False, True,
    ]  # fmt: skip
    assert auditor.redacts_weight_paths and not security.redacts_weight_paths
    assert admin.may_grant(TokenScope.ADMIN) and not security.may_grant(TokenScope.ADMIN)
    assert auditor.may_grant(TokenScope.READ)
    read_admin = p(Role.ADMIN, read_only=True)
    assert read_admin.is_admin and not read_admin.may_change
    assert not read_admin.may_grant(TokenScope.READ)
