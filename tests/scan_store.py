"""The shared 52-entry store as a large one: RECALL_SCAN_MIN_ENTRIES set to 1, so recall scans
the memory-mapped copy and runs the word channel beside it. Fixtures for test_vector_scan and
test_recall_channels (import them by name: pytest finds imported fixtures)."""
from __future__ import annotations

from pathlib import Path

import pytest

from forge import rag
from forge.settings import load_settings


@pytest.fixture
def scan_settings(forge_env: Path, monkeypatch):
    monkeypatch.setenv("RECALL_SCAN_MIN_ENTRIES", "1")
    return load_settings()


@pytest.fixture
def store(built_store: Path, scan_settings):
    from fixtures.memory_entries import copy_store

    copy_store(built_store, scan_settings.rag_db_file)
    with rag.open_store(scan_settings) as s:
        yield s
