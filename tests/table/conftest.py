"""Fixtures for the table tests: pylance-written datasets, built once per session."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.table.datasets import SCENARIOS


@pytest.fixture(scope="session")
def pylance_dataset(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], str]:
    """``pylance_dataset(scenario, version) -> uri``; built once, never modified by tests."""
    root = tmp_path_factory.mktemp("pylance_datasets")
    cache: dict[tuple[str, str], str] = {}

    def get(scenario: str, version: str) -> str:
        key = (scenario, version)
        if key not in cache:
            uri = str(root / f"{scenario}_{version}")
            SCENARIOS[scenario](uri, version)
            cache[key] = uri
        return cache[key]

    return get


@pytest.fixture
def dataset_copy(pylance_dataset: Callable[[str, str], str], tmp_path: Path) -> Callable[[str, str], str]:
    """A private copy of a scenario dataset that a test may damage."""

    def get(scenario: str, version: str = "2.2") -> str:
        dst = tmp_path / f"{scenario}_{version}"
        shutil.copytree(pylance_dataset(scenario, version), dst)
        return str(dst)

    return get
