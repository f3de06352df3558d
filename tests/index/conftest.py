"""The fuller index matrix (``@pytest.mark.slow``) runs only when asked for:
``LSO_SLOW=1`` or ``-m slow``; the default suite deselects it (not skipped: not collected)."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("LSO_SLOW") == "1" or "slow" in (config.getoption("-m") or ""):
        return
    slow = [i for i in items if i.get_closest_marker("slow") and "tests/index/" in str(i.fspath)]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [i for i in items if i not in slow]
