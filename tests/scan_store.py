"""The shared 52-entry store as a large one: RECALL_SCAN_MIN_ENTRIES set to 1, so recall scans
the memory-mapped copy and runs the word channel beside it. Fixtures for test_vector_scan and
test_recall_channels (import them by name: pytest finds imported fixtures)."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import opened_copy
from forge.core.settings import load_settings


@pytest.fixture
def scan_settings(forge_env: Path, monkeypatch):
    monkeypatch.setenv("RECALL_SCAN_MIN_ENTRIES", "1")
    return load_settings()


@pytest.fixture
def store(built_store: Path, scan_settings):
    yield from opened_copy(built_store, scan_settings)


@pytest.fixture
def copy_answers(monkeypatch) -> list[bool]:
    """One entry per `vector_scan.knn` call the store makes: True when the copy answered, False
    when it gave the search back to vec0 (None). A spy around the real function: a test that
    says the copy answered asserts `copy_answers and all(copy_answers)`, which fails when the
    copy is never asked or never answers (vec0's rows would pass every comparison with vec0)."""
    from forge.store import vector_scan

    seen: list[bool] = []
    real = vector_scan.knn

    def spied(*args, **kwargs):
        found = real(*args, **kwargs)
        seen.append(found is not None)
        return found

    monkeypatch.setattr(vector_scan, "knn", spied)
    return seen
