"""The knowledge library on real files and a real SQLite database: chunks and their locations, the
incremental reindex, hostile files skipped with reasons, FTS5 syntax in queries, duplicates."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kirocrew_core.errors import BadInputError
from kirocrew_core.knowledge import chunks, files
from kirocrew_core.knowledge.store import Library


@pytest.fixture
def library(tmp_path: Path) -> Iterator[Library]:
    opened = Library(tmp_path / "state" / "library.sqlite3")
    yield opened
    opened.close()


def _folder(root: Path, contents: dict[str, str]) -> Path:
    for name, text in contents.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_chunks_overlap_by_words_and_keep_their_section_and_lines() -> None:
    lines = ["# Guide", "intro words here", "## Setup"] + [f"w{i} x{i}" for i in range(1000)] + ["## Usage", "end"]
    parts = chunks.split("\n".join(lines))
    # 2010 words: chunks start at words 0, 600, 1200, 1800 (800 long, 200 shared), the last one shorter.
    assert [len(p.text.split()) for p in parts] == [800, 800, 800, 210]
    assert (parts[0].section, parts[0].line_start) == ("Guide", 1)
    assert parts[0].text.splitlines()[:3] == ["# Guide", "intro words here", "## Setup"]
    assert parts[1].section == "Setup" and parts[1].line_start == 3 + (600 - 7) // 2 + 1  # 7 words before the pairs
    assert parts[0].text.split()[-200:] == parts[1].text.split()[:200]
    assert parts[-1].line_end == len(lines) and parts[-1].text.endswith("## Usage\nend")
    assert chunks.title_of("\n".join(lines), "file.md") == "Guide"
    assert chunks.title_of("no heading", "file.md") == "file.md"


def test_a_folder_is_read_and_searched_with_each_chunks_location(library: Library, tmp_path: Path) -> None:
    root = _folder(tmp_path / "notes", {"guide.md": "# Guide\n\n## Harbour\nboats dock at dawn\n",
                                        "deep/page.html": "<html><title>t</title><h2>Fuel</h2><p>diesel boats</p>"
                                                          "<script>var hidden = 1;</script></html>",
                                        ".git/config": "boats in git internals"})
    source = library.add(root)
    report = library.reindex(str(source.id))
    assert (report.files, report.rechunked, report.skipped) == (2, 2, {})
    hits = library.search("boats", 5)
    assert sorted((h.name, h.section, h.line_start, h.line_end) for h in hits) == [
        ("deep/page.html", "Fuel", 2, 4), ("guide.md", "Guide", 1, 4)]
    assert library.search("hidden", 5) == []  # a script's text is no page text
    assert library.sources()[0].documents == 2


def test_a_reindex_rechunks_only_the_touched_file_and_drops_a_gone_one(library: Library, tmp_path: Path) -> None:
    root = _folder(tmp_path / "notes", {f"n{i}.md": f"# Note {i}\nalpha {i}\n" for i in range(5)})
    ref = str(library.add(root).id)
    assert library.reindex(ref).rechunked == 5
    assert library.reindex(ref).rechunked == 0
    (root / "n2.md").write_text("# Note 2\nbravo changed\n")
    (root / "n4.md").unlink()
    os.utime(root / "n3.md", ns=(1, 1))  # a new mtime, the same content: hashed, not re-chunked
    report = library.reindex(ref)
    assert (report.rechunked, report.unchanged, report.removed) == (1, 3, 1)
    assert [h.name for h in library.search("bravo", 5)] == ["n2.md"]
    assert library.search("alpha 4", 5) == []
    assert library.reindex(ref).rechunked == 0


def test_hostile_files_are_skipped_with_their_reasons_and_never_followed(library: Library, tmp_path: Path) -> None:
    outside = tmp_path / "secret.md"
    outside.write_text("# Outside\nforbidden words\n")
    root = _folder(tmp_path / "notes", {"fine.md": "# Fine\nfine words\n", "inside.md": "inside words\n"})
    os.mkfifo(root / "pipe")
    (root / "out").symlink_to(outside)
    (root / "loop").symlink_to(root / "inside.md")
    (root / "bad.txt").write_bytes(b"caf\xe9 latin-1")
    (root / "blob.bin").write_bytes(b"\x7fELF\x00\x00\x01")
    with open(root / "huge.md", "wb") as handle:
        handle.truncate(files.MAX_FILE_BYTES + 1)  # sparse: no disk used
    (root / "paper.pdf").write_bytes(b"%PDF-1.7 words")
    report = library.reindex(str(library.add(root).id))
    assert report.skipped == {
        "pipe": "not a regular file (FIFO, socket or device)",
        "out": "symlink leading out of the source",
        "loop": "symlink (not followed)",
        "bad.txt": "not valid UTF-8 (byte 3)",
        "blob.bin": "binary (holds NUL bytes)",
        "huge.md": "larger than 5 MiB",
        "paper.pdf": "corrupt pdf: Stream has ended unexpectedly",
    }
    assert library.skipped(str(root)) == report.skipped
    assert library.search("forbidden", 5) == [] and len(library.search("words", 5)) == 2


def test_a_file_that_turns_hostile_is_dropped(library: Library, tmp_path: Path) -> None:
    root = _folder(tmp_path / "notes", {"a.md": "kept words\n"})
    ref = str(library.add(root).id)
    library.reindex(ref)
    (root / "a.md").write_bytes(b"\xff\xfe now binary-ish")
    report = library.reindex(ref)
    assert report.removed == 1 and "a.md" in report.skipped and library.search("kept", 5) == []


@pytest.mark.parametrize(("query", "finds"), [
    ('"unbalanced', False), ("NEAR(a b) OR c*", True), ("a AND NOT b", False), ("col:word ^start", True),
    ("title: boats -fuel + { } [ ] ? ! ' \\ " * 12, True), ("(((((", None), (")" * 500, None),
])
def test_fts5_syntax_in_a_query_is_only_words(library: Library, tmp_path: Path, query: str, finds: bool | None) -> None:
    """Operators are searched as words (every one must be in the chunk); a query without words is refused."""
    root = _folder(tmp_path / "notes", {"a.md": "# boats\nNEAR a b OR c NOT start title col word fuel\n"})
    library.reindex(str(library.add(root).id))
    if finds is None:
        with pytest.raises(BadInputError) as refused:
            library.search(query[:500], 5)
        assert refused.value.code == "invalid_arguments"
    else:
        assert len(library.search(query[:500], 5)) == int(finds)


def test_sources_are_added_once_found_by_id_or_path_and_removed(library: Library, tmp_path: Path) -> None:
    root = _folder(tmp_path / "notes", {"a.md": "words\n"})
    source = library.add(root)
    with pytest.raises(BadInputError) as twice:
        library.add(root)
    assert twice.value.code == "source_exists"
    with pytest.raises(BadInputError) as missing:
        library.add(tmp_path / "nowhere")
    assert missing.value.code == "source_unreadable"
    library.reindex(str(root))
    assert library.remove(str(source.id)).location == str(root.resolve())
    assert library.sources() == [] and library.search("words", 5) == []
    with pytest.raises(BadInputError) as gone:
        library.remove(str(root))
    assert gone.value.code == "source_not_found"
    assert (root / "a.md").exists()


def test_duplicates_keep_the_folders_copy_and_stay_removed_across_a_reindex(library: Library, tmp_path: Path) -> None:
    root = _folder(tmp_path / "notes", {"same.md": "# Same\nshared words\n", "own.md": "own words\n"})
    single = tmp_path / "copy.md"
    single.write_text("# Same\nshared words\n")
    lone = library.add(single)  # added first, but a file source is less persistent than a folder
    folder = library.add(root)
    library.reindex(str(lone.id))
    library.reindex(str(folder.id))
    found = library.duplicates()
    assert [(d.loser_name, d.winner_name, d.chunks) for d in found] == [
        (str(single.resolve()), f"{root.resolve()}/same.md", 1)]
    assert len(library.search("shared", 5)) == 2  # a dry run changes nothing
    assert library.drop_duplicates() == found
    assert [h.kind for h in library.search("shared", 5)] == ["folder"]
    assert library.reindex(str(lone.id)).rechunked == 0 and library.duplicates() == []
    single.write_text("# Same\nshared words, now edited\n")
    assert library.reindex(str(lone.id)).rechunked == 1 and len(library.search("shared", 5)) == 2


def test_files_an_unfinished_walk_did_not_see_are_kept_not_taken_for_gone(
        library: Library, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _folder(tmp_path / "notes", {f"n{i}.md": f"note{i} words\n" for i in range(5)})
    ref = str(library.add(root).id)
    library.reindex(ref)
    monkeypatch.setattr(files, "MAX_FILES", 3)
    report = library.reindex(ref)
    assert report.removed == 0 and report.skipped == {"…": "more than 3 files: the rest are not read"}
    assert len(library.search("words", 5)) == 5
    monkeypatch.setattr(files, "MAX_FILES", 20_000)
    (root / "n4.md").unlink()
    assert library.reindex(ref).removed == 1


def test_a_source_that_cannot_be_read_keeps_what_was_read_and_says_why(library: Library, tmp_path: Path) -> None:
    root = _folder(tmp_path / "notes", {"a.md": "kept words\n"})
    ref = str(library.add(root).id)
    library.reindex(ref)
    (root / "a.md").rename(tmp_path / "a.md")
    root.rmdir()
    library.reindex(ref)
    [source] = library.sources()
    assert source.problem == "cannot be read: No such file or directory" and source.documents == 1


def test_a_removed_document_stays_out_across_reindexes_until_included_again(library: Library, tmp_path: Path) -> None:
    root = _folder(tmp_path / "notes", {"keep.md": "# Keep\nharbour lights\n", "drop/me.md": "# Drop\nharbour fog\n"})
    (root / "pipe").symlink_to("/etc/passwd")
    source = library.add(root)
    library.reindex(str(source.id))
    assert [d.name for d in library.documents(str(source.id))[0]] == ["drop/me.md", "keep.md"]

    library.exclude(str(source.id), "drop/me.md")
    library.exclude(str(source.id), "pipe")  # a skipped file may be excluded too: it stops being reported
    assert [h.name for h in library.search("harbour", 5)] == ["keep.md"]
    (root / "drop" / "me.md").write_text("# Drop\nharbour fog, edited\n")  # a change does not bring it back
    report = library.reindex(str(source.id))
    assert (report.files, report.rechunked, report.skipped) == (1, 0, {})
    assert [h.name for h in library.search("harbour", 5)] == ["keep.md"]
    assert list(library.excluded(str(source.id))) == ["drop/me.md", "pipe"]
    assert (library.sources()[0].documents, library.sources()[0].excluded, library.sources()[0].skipped) == (1, 2, 0)

    for name, code in (("keep.md/../drop/me.md", "document_not_found"), ("nothing.md", "document_not_found"),
                       ("\x00", "document_not_found")):
        with pytest.raises(BadInputError) as refused:
            library.exclude(str(source.id), name)
        assert refused.value.code == code
    with pytest.raises(BadInputError) as refused:
        library.include(str(source.id), "keep.md")
    assert refused.value.code == "excluded_not_found"
    assert library.documents(str(source.id))[1] == 1 and len(library.excluded(str(source.id))) == 2

    library.include(str(source.id), "drop/me.md")
    assert library.reindex(str(source.id)).rechunked == 1
    assert sorted(h.name for h in library.search("harbour", 5)) == ["drop/me.md", "keep.md"]
    assert library.skipped(str(source.id)) == {} and list(library.excluded(str(source.id))) == ["pipe"]


def test_only_a_folder_source_excludes_one_document(library: Library, tmp_path: Path) -> None:
    single = tmp_path / "one.md"
    single.write_text("# One\n")
    source = library.add(single)
    library.reindex(str(source.id))
    with pytest.raises(BadInputError) as refused:
        library.exclude(str(source.id), "one.md")
    assert refused.value.code == "source_single_document" and library.documents(str(source.id))[1] == 1


def test_documents_are_found_by_a_part_of_their_name_wildcards_taken_literally(library: Library,
                                                                                tmp_path: Path) -> None:
    root = _folder(tmp_path / "notes", {"a_b.md": "x\n", "axb.md": "y\n", "100%.md": "z\n", "Deep/Guide.md": "w\n"})
    source = str(library.add(root).id)
    library.reindex(source)
    assert [d.name for d in library.documents(source, named="a_b")[0]] == ["a_b.md"]
    assert library.documents(source, named="%") == (library.documents(source, named="100%")[0], 1)
    assert [d.name for d in library.documents(source, named="deep/guide")[0]] == ["Deep/Guide.md"]
    assert library.documents(source, named="nothing") == ([], 0)
    assert library.documents(source, limit=2, offset=2)[1] == 4 and len(library.documents(source, limit=2)[0]) == 2
