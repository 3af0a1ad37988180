"""The knowledge library kept fresh by a real host (``kirocrew serve``): a file changed in a folder or file
source is found by the next search without a reindex, well before the 30-second safety-net pass."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kirocrew_core.knowledge import service

from kirocrew_testing.browser import ServedGateway
from kirocrew_testing.fixtures import run_kirocrew
from kirocrew_testing.homes import IsolatedHomes, isolate_homes

#: Well under the host's safety-net pass: a word found within it was read because the watcher saw its file.
BOUND_SECONDS = 10.0
assert BOUND_SECONDS < service.INTERVAL_SECS


@contextlib.contextmanager
def at_served_homes(module_homes: IsolatedHomes) -> Iterator[None]:
    """This process (and the commands it runs) on the served host's homes until the block ends."""
    with pytest.MonkeyPatch.context() as patch:
        isolate_homes(patch, module_homes.root)
        yield


def found_in_time(word: str, *, gone: bool = False) -> list[str]:
    """The names of the documents holding ``word``, polled until there is one (none, when ``gone``) or the
    bound passes."""
    from kirocrew_core.knowledge.store import Library

    library = Library()  # this process's own connection to the host's library
    try:
        deadline = time.monotonic() + BOUND_SECONDS
        while bool(names := [hit.name for hit in library.search(word, 5)]) == gone and time.monotonic() < deadline:
            time.sleep(0.05)
        return names
    finally:
        library.close()


def test_a_changed_file_is_searchable_without_a_reindex_while_the_host_runs(
        module_served: ServedGateway, module_homes: IsolatedHomes) -> None:
    notes = module_homes.root / "watched-notes"
    notes.mkdir()
    (notes / "harbour.md").write_text("# Harbour\nboats dock at dawn\n")
    single = module_homes.root / "single.md"
    single.write_text("a lone note\n")
    with at_served_homes(module_homes):
        for source in (notes, single):
            added = run_kirocrew("knowledge", "add", str(source))
            assert added.returncode == 0, added.stderr
        (notes / "harbour.md").write_text("# Harbour\nboats dock near the lighthouse\n")
        assert found_in_time("lighthouse") == ["harbour.md"]
        # Well after the pass the add woke: only the watcher can bring these in before the bound.
        (notes / "harbour.md").write_text("# Harbour\nboats dock near the pelicans\n")
        assert found_in_time("pelicans") == ["harbour.md"]
        (notes / "deep" / "er").mkdir(parents=True)  # a folder made after the watcher started
        (notes / "deep" / "er" / "quay.md").write_text("the quay has cormorants\n")
        assert found_in_time("cormorants") == ["deep/er/quay.md"]
        single.write_text("a lone note about walruses\n")
        assert found_in_time("walruses") == ["single.md"]
        saved = single.with_name("single.md.tmp")  # an editor's save: a new file renamed over the old one
        saved.write_text("a lone note about narwhals\n")
        os.replace(saved, single)
        assert found_in_time("narwhals") == ["single.md"]
        (notes / "harbour.md").unlink()
        assert found_in_time("boats", gone=True) == []


def test_the_ingestion_service_watches_its_sources_and_leaves_no_thread_when_stopped(
        isolated_homes: IsolatedHomes, tmp_path: Path) -> None:
    import asyncio

    import psutil
    from kirocrew_core.knowledge.store import shared

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("first words\n")
    shared().add(notes)
    before = psutil.Process().num_threads()  # the watcher's thread is native, unseen by ``threading``

    async def service_life() -> list[str]:
        await service.ingestor.start()
        try:
            assert await asyncio.to_thread(found_in_time, "first") == ["a.md"]
            (notes / "b.md").write_text("a heron\n")
            return await asyncio.to_thread(found_in_time, "heron")
        finally:
            await service.ingestor.stop()

    assert asyncio.run(service_life()) == ["b.md"]
    deadline = time.monotonic() + BOUND_SECONDS
    while psutil.Process().num_threads() > before:  # the native thread ends soon after its watcher is closed
        assert time.monotonic() < deadline, "the knowledge watcher's thread outlived the service"
        time.sleep(0.02)
