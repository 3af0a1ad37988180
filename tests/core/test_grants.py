"""grant_key and the stat-only, tri-state grant artifact checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kirocrew_core import grants, home
from kirocrew_testing.requirements import without_file_privileges

RECORDED_KEYS = {
    "https://mcp.notion.com/mcp": "1cbd18bf1818c780c9568384b0324fff99a5335bd4a17e102be74712b007e62c",
    "https://mcp.linear.app/mcp": "fb39103c7d2edac291c92d23247e0a7d90470b1b349c07b146aba4ee2c81591f",
    "https://mcp.vercel.com": "27af4e7d14d9aa7579dff853f8b7033ffbaaf6fb734bf15aec53f68776bb4111",
    "https://mcp.sentry.dev/mcp": "956f74053c03bea04f650e2341a266b5e3162116bc5c7f74b1f4d5afb4654b72",
    "https://api.githubcopilot.com/mcp/": "ca602dd499edea084d35bd6584aea648dec2778e67b48e10ab008ae0c1d06284",
    "https://mcp.atlassian.com/v1/sse": "834761c496c5a564116b2f1c55805d4425c32caee9e86596590d3d6e332a3240",
}


@pytest.mark.parametrize(("url", "key"), sorted(RECORDED_KEYS.items()))
def test_grant_key_matches_the_value_kiro_cli_was_recorded_computing(url: str, key: str) -> None:
    assert grants.grant_key(url) == key


@pytest.mark.parametrize("variant", ["https://MCP.Notion.COM/mcp", "https://mcp.notion.com:443/mcp",
                                     "HTTPS://mcp.notion.com/mcp?x=1#frag"])
def test_case_the_default_port_query_and_fragment_do_not_change_the_key(variant: str) -> None:
    assert grants.grant_key(variant) == RECORDED_KEYS["https://mcp.notion.com/mcp"]


def test_the_path_is_kept_verbatim_so_a_trailing_slash_is_another_grant() -> None:
    assert grants.grant_key("https://mcp.notion.com/mcp/") != grants.grant_key("https://mcp.notion.com/mcp")
    assert grants.grant_key("https://mcp.notion.com/MCP") != grants.grant_key("https://mcp.notion.com/mcp")


def test_an_empty_path_hashes_as_the_root_path() -> None:
    assert grants.grant_key("https://mcp.vercel.com/") == RECORDED_KEYS["https://mcp.vercel.com"]


def test_a_non_default_port_is_part_of_the_key_even_port_80() -> None:
    import hashlib

    assert grants.grant_key("http://127.0.0.1:8123/mcp") == hashlib.sha256(b"http://127.0.0.1:8123/mcp").hexdigest()
    assert grants.grant_key("http://example.com:80/mcp") == hashlib.sha256(b"http://example.com:80/mcp").hexdigest()
    assert grants.grant_key("http://example.com/mcp") == hashlib.sha256(b"http://example.com/mcp").hexdigest()


def test_an_ipv6_host_is_bracketed_and_an_international_host_idna_encoded() -> None:
    import hashlib

    assert grants.grant_key("http://[::1]:9000/mcp") == hashlib.sha256(b"http://[::1]:9000/mcp").hexdigest()
    assert grants.grant_key("https://B\u00fccher.example/mcp") == hashlib.sha256(
        b"https://xn--bcher-kva.example/mcp").hexdigest()


@pytest.mark.parametrize("bad", ["", "mcp.notion.com/mcp", "https:///mcp", "https://host:notaport/mcp"])
def test_a_url_without_scheme_host_or_with_a_bad_port_is_a_value_error(bad: str) -> None:
    with pytest.raises(ValueError):
        grants.grant_key(bad)


def test_artifact_paths_are_the_key_named_pair_in_the_oauth_cache_dir() -> None:
    token, registration = grants.artifact_paths("https://mcp.linear.app/mcp")
    key = RECORDED_KEYS["https://mcp.linear.app/mcp"]
    assert token == home.oauth_cache_dir() / f"{key}.token.json"
    assert registration == home.oauth_cache_dir() / f"{key}.registration.json"


def _write_pair(url: str, *, token: bool = True, registration: bool = True) -> tuple[Path, Path]:
    token_path, registration_path = grants.artifact_paths(url)
    token_path.parent.mkdir(parents=True, exist_ok=True)
    if token:
        token_path.write_text("{}")
    if registration:
        registration_path.write_text("{}")
    return token_path, registration_path


def test_a_regular_file_is_present_and_a_missing_one_absent(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert grants.artifact_presence(tmp_path / "f") is True
    assert grants.artifact_presence(tmp_path / "missing") is False
    assert grants.artifact_presence(tmp_path / "missing-dir" / "f") is False


def test_a_directory_at_the_artifact_path_is_not_a_grant(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    assert grants.artifact_presence(tmp_path / "d") is False


def test_a_path_under_a_regular_file_is_absent_not_unknowable(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert grants.artifact_presence(tmp_path / "f" / "child") is False


def test_a_path_too_long_to_stat_is_unknowable(tmp_path: Path) -> None:
    # ENAMETOOLONG: an OSError that proves nothing about the file.
    assert grants.artifact_presence(tmp_path / ("x" * 5000)) is None


_PROBE = """
import json, sys
from kirocrew_core import grants
print(json.dumps([grants.artifact_presence(p) for p in sys.argv[1:]]))
"""


def test_an_artifact_behind_an_unsearchable_parent_is_unknowable_not_absent(tmp_path: Path) -> None:
    # The stat runs in a child process for which file permissions apply even under root.
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "token.json").write_text("{}")
    # Mode 0: nobody may read it, yet it is present: presence is a stat, never a read.
    (tmp_path / "sealed.json").write_text("{}")
    os.chmod(tmp_path / "sealed.json", 0)
    os.chmod(locked, 0)  # not even its owner may search it
    try:
        done = subprocess.run(
            without_file_privileges([sys.executable, "-c", _PROBE, str(locked / "token.json"),
                                     str(tmp_path / "sealed.json"), str(tmp_path / "missing.json")]),
            capture_output=True, text=True, timeout=60)
    finally:
        os.chmod(locked, 0o700)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[null, true, false]"


def test_a_grant_is_present_only_when_both_artifacts_are_regular_files() -> None:
    url = "https://mcp.notion.com/mcp"
    assert grants.grant_presence(url) is False
    token, registration = _write_pair(url, registration=False)
    assert grants.grant_presence(url) is False
    registration.write_text("{}")
    assert grants.grant_presence(url) is True
    token.unlink()
    token.mkdir()
    assert grants.grant_presence(url) is False


def test_a_lone_aws_sso_file_with_the_same_key_is_not_a_grant() -> None:
    url = "https://mcp.sentry.dev/mcp"
    token, _ = grants.artifact_paths(url)
    token.parent.mkdir(parents=True)
    (token.parent / f"{grants.grant_key(url)}.json").write_text("{}")
    assert grants.grant_presence(url) is False


@pytest.mark.parametrize(
    ("presences", "combined"),
    [((True, True), True), ((True, False), False), ((False, None), False), ((None, False), False),
     ((True, None), None), ((None, None), None), ((False, False), False)],
)
def test_the_pair_rule_lets_a_proven_absence_win_over_an_unknowable(
    presences: tuple[bool | None, bool | None], combined: bool | None
) -> None:
    assert grants.combine_presence(*presences) is combined
