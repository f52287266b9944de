"""README's opening command: `./course open` serves JupyterLab on notebooks/, landing in 00."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.xdist_group("course-venv")  # ./course open bootstraps the checkout's .venv (conftest.py)
def test_course_open_serves_the_notebooks_and_lands_in_welcome(course_lab):
    listing = course_lab.api("contents")
    landing, _ = course_lab.get("/")
    served = {item["name"] for item in listing["content"]}
    expected = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert "00_welcome.ipynb" in served and expected <= served
    assert landing.split("?")[0].endswith("/lab/tree/00_welcome.ipynb"), landing
