"""A pytest plugin (`-p record_collection`) that writes every collected test id, and whether it is
marked task_wide, to the JSON file named by PAGEDLAB_RECORD_COLLECTION.

tests/test_manifest.py collects the course with and without a toy task: a test whose ids change
with the task list reads every task, and must be marked task_wide."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

RECORD_ENV = "PAGEDLAB_RECORD_COLLECTION"


@pytest.hookimpl(tryfirst=True)  # before -m and -k deselect anything
def pytest_collection_modifyitems(config, items) -> None:
    record = os.environ.get(RECORD_ENV)
    if record:
        Path(record).write_text(json.dumps(
            {item.nodeid: item.get_closest_marker("task_wide") is not None for item in items}))
