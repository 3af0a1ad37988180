"""Path and domain patterns of the permission policy, on real files and symlinks, and their three answers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kirocrew_core.gate.paths import MAYBE, NO, YES, PathValue, anchored, best, domain_match, host_of, path_match


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """A home with a secret, a workspace with sources, and symlinks pointing in and out of the workspace."""
    home, workspace = tmp_path / "home", tmp_path / "ws"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("key")
    (workspace / "src" / "pkg").mkdir(parents=True)
    (workspace / "src" / "pkg" / "app.py").write_text("print()")
    (workspace / "docs").mkdir()
    (workspace / "src" / "key").symlink_to(home / ".ssh" / "id_ed25519")  # in the workspace, pointing out
    (home / "shortcut").symlink_to(workspace / "src")  # outside, pointing in
    return {"home": home, "ws": workspace}


def matches(patterns: tuple[str, ...] | str, path: str | Path, tree: dict[str, Path], *, for_allow: bool = False):
    patterns = (patterns,) if isinstance(patterns, str) else patterns
    value = PathValue.of(str(path), str(tree["ws"]))
    return path_match(patterns, value, workspace=str(tree["ws"]), home=str(tree["home"]), for_allow=for_allow)


@pytest.mark.parametrize(("pattern", "expected"), [
    ("/etc/**", "/etc/**"),
    ("~", "/h"),
    ("~/x/*.md", "/h/x/*.md"),
    ("./src/**", "/w/src/**"),
    ("src/**", "/w/src/**"),
    ("build/", "/w/build/**"),
    ("*.pem", "/**/*.pem"),
    (".env", "/**/.env"),
    ("/", "/**"),
])
def test_a_path_glob_is_anchored_at_the_root_the_home_or_the_workspace(pattern, expected):
    assert anchored(pattern, "/w", "/h") == expected


@pytest.mark.parametrize(("pattern", "path", "expected"), [
    ("src/**", "src/pkg/app.py", YES),
    ("./src/**", "src/pkg/app.py", YES),
    ("src/*", "src/pkg/app.py", YES),  # src/pkg matches, and a directory covers its contents
    ("src/*.py", "src/pkg/app.py", NO),  # * stays within one segment
    ("src/**/*.py", "src/pkg/app.py", YES),
    ("src/p?g/app.py", "src/pkg/app.py", YES),
    ("src/[pq]kg/app.py", "src/pkg/app.py", YES),
    ("src/[!p]kg/app.py", "src/pkg/app.py", NO),
    ("app.py", "src/pkg/app.py", YES),  # a slashless name matches in any directory
    ("*.py", "src/pkg/app.py", YES),
    ("*.md", "src/pkg/app.py", NO),
    ("src", "src/pkg/app.py", YES),  # the directory covers everything below it
    ("docs/", "src/pkg/app.py", NO),
    ("pkg/app.py", "src/pkg/app.py", NO),  # a pattern with a slash is anchored at the workspace
])
def test_a_relative_path_glob_matches_in_the_workspace(tree, pattern, path, expected):
    assert matches(pattern, path, tree) is expected


def test_home_and_absolute_globs_match_wherever_the_path_is_written_from(tree):
    key = tree["home"] / ".ssh" / "id_ed25519"
    assert matches("~/.ssh/**", key, tree) is YES
    assert matches("~/.ssh", "~/.ssh/id_ed25519", tree) is YES  # ~ in the call's path is the home too
    assert matches(f"{tree['home']}/.ssh/*", "../home/.ssh/id_ed25519", tree) is YES  # .. folded
    assert matches("~/.aws/**", key, tree) is NO


def test_a_deny_matches_a_symlink_by_either_form_and_an_allow_needs_both(tree):
    # ws/src/key is in the workspace and points at the ssh key.
    assert matches("~/.ssh/**", "src/key", tree) is YES  # a deny reaches the target through the link
    assert matches("src/**", "src/key", tree, for_allow=True) is NO  # an allow of src does not reach ~/.ssh
    assert matches(("src/**", "~/.ssh/**"), "src/key", tree, for_allow=True) is YES  # both forms allowed
    # ~/shortcut points into the workspace: an allow of src/** does not cover the link's own name.
    assert matches("src/**", "~/shortcut/pkg/app.py", tree, for_allow=True) is NO
    assert matches("src/**", "~/shortcut/pkg/app.py", tree) is YES


def test_a_workspace_reached_through_a_symlink_anchors_both_of_its_forms(tree, tmp_path):
    link = tmp_path / "ws-link"
    link.symlink_to(tree["ws"])
    value = PathValue.of("src/pkg/app.py", str(link))
    assert path_match(("src/**",), value, workspace=str(link), home=str(tree["home"]), for_allow=True) is YES


def test_a_path_not_known_before_the_run_is_maybe():
    assert path_match(("**",), PathValue.unknown(), workspace="/w", home="/h", for_allow=False) is MAYBE
    assert PathValue.of("relative/only", "").known is False  # no workspace: a relative path cannot be placed


def test_the_two_forms_of_a_path_are_absolute_and_folded(tree):
    value = PathValue.of("src/./pkg/../key", str(tree["ws"]))
    assert value.literal == str(tree["ws"] / "src" / "key")
    assert value.resolved == os.path.realpath(tree["home"] / ".ssh" / "id_ed25519")


@pytest.mark.parametrize(("patterns", "host", "expected"), [
    (("example.com",), "example.com", YES),
    (("example.com",), "www.example.com", NO),
    (("*.example.com",), "www.example.com", YES),
    (("*.example.com",), "a.b.example.com", YES),
    (("*.example.com",), "example.com", NO),  # the subdomains, not the name itself
    (("*.example.com",), "badexample.com", NO),
    (("*",), "anything.org", YES),
    (("example.com",), None, MAYBE),
])
def test_a_domain_pattern_matches_a_host_or_its_subdomains(patterns, host, expected):
    assert domain_match(patterns, host) is expected


@pytest.mark.parametrize(("url", "host"), [
    ("https://Example.COM/path?q=1", "example.com"),
    ("https://example.com.:8443/", "example.com"),
    ("http://user:pw@example.com/", "example.com"),
    ("https://example.com@evil.com/", "evil.com"),
    ("http://[::1]:8080/", "::1"),
    ("example.com/no-scheme", None),
    ("not a url", None),
    ("http://[::1", None),
])
def test_the_host_of_a_url_is_what_the_fetch_would_reach(url, host):
    assert host_of(url) == host


def test_alternatives_give_the_strongest_answer():
    assert best([NO, MAYBE, YES]) is YES
    assert best([NO, MAYBE]) is MAYBE
    assert best([NO, NO]) is NO and best([]) is NO


@pytest.mark.parametrize("url", [
    "https://evil.com\\@example.com/",  # a WHATWG parser (kiro's) reads the backslash as a slash: host evil.com
    "https://%65xample.com/",  # percent-encoded: the fetch decodes it
    "https://exa mple.com/",
    "https://ex\u0430mple.com/",  # a Cyrillic a: the fetch goes to its punycode name
    "https://example.com\u3002evil.com/",  # an ideographic full stop is a dot to IDNA
])
def test_a_host_a_fetch_could_read_differently_is_not_known(url):
    # Python's urlsplit and kiro's URL parser disagree on these: neither a deny nor an allow may trust either.
    assert host_of(url) is None
    assert domain_match(("example.com",), host_of(url)) is MAYBE


@pytest.mark.parametrize(("glob", "directory"), [
    ("/w/src/**", "/w/src"), ("/w/src/*.py", "/w/src"), ("/w/sr*", "/w"), ("/**/x.pem", ""),
    ("/etc/hosts", "/etc/hosts"), ("/w/a/b?c/d", "/w/a"), ("/w/[ab]/x", "/w"),
])
def test_a_glob_starts_in_the_deepest_directory_before_its_first_wildcard(glob, directory):
    from kirocrew_core.gate.paths import start_directory

    assert start_directory(glob) == directory
