"""The course's UI in a real browser: JupyterLab from `./course open`, notebook 02's explorer.

nbval runs the notebooks' code, but a widget that renders nothing (or a stale picture) passes
nbval. This test is the student's view: headless Chromium (Debian's chromium + chromium-driver,
driven by Selenium) lands in 00_welcome, double-clicks notebook 02 in the file browser, runs the
explorer's cell (nbval runs every cell), clicks the explorer's buttons and checks after each
click that what the page shows is the engine's state, read from the same kernel:

- the explorer's log names the call, marks it ✓ and shows the engine's free-block count;
- the block-map picture is the engine's current picture, pixel for pixel, and the colour of
  every live sequence is in it while a freed sequence's colour is gone.

Before the run, an instructor's tag edit: in the Property Inspector's Cell Tags, `instructor` is
clicked off one markdown cell and typed onto another, and Ctrl+S saves. Both sides of the jupytext
pair on disk carry the edit (with JupyterLab's `"tags": []` and editor flags), and after
`pagedlab notebook sync` they are the committed files but for those two cells' tags, cell ids
unchanged, the pair clean. After the run it edits a markdown cell, saves with Ctrl+S and checks
the file on disk and its `.py` pair. The first open must show no notification toast (the
course ships settings that turn off JupyterLab's news and update checks). On a failure a
screenshot lands in the test's tmp folder (`pytest --basetemp=DIR` keeps it somewhere known).

The server is the `course_lab` fixture (tests/course_lab.py), shared with the other Lab-serving
tests; its CPU and its kernels' are reaped when the worker's session ends.

Enable: `apt-get install -y chromium chromium-driver` (Debian/Ubuntu; .ci/run does it as root).
"""

from __future__ import annotations

import ast
import base64
import io
import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or (
    "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
ENABLE = ("needs Chromium and ChromeDriver: apt-get install -y chromium chromium-driver "
          "(Debian/Ubuntu; .ci/run installs them when run as root)")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason=ENABLE),
    pytest.mark.xdist_group("course-venv"),  # ./course open bootstraps the checkout's .venv (conftest.py)
]

webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium (in the [dev] extra)")
from course_lab import TOKEN  # noqa: E402  (the shared server's, tests/conftest.py)
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

BOXES = {"seq id": "_seq_box", "length / value": "_num_box", "fork from": "_parent_box"}
MARK = "Edited by the browser test."
TAG = "instructor"  # marks an instructor-only cell (`pagedlab release` drops it)
# JupyterLab 4's notifications are react-toastify toasts.
TOAST = ".Toastify__toast, .jp-Notification-Toast, .jp-toast-message"


class Kernel:
    """A second client of the notebook's kernel: reads the engine's state without printing."""

    def __init__(self, lab):
        from jupyter_client import BlockingKernelClient

        sessions = [s for s in lab.api("sessions") if s["path"].endswith("02_block_table.ipynb")]
        assert sessions, "notebook 02 has no kernel session"
        self.client = BlockingKernelClient(
            connection_file=str(lab.runtime / f"kernel-{sessions[0]['kernel']['id']}.json"))
        self.client.load_connection_file()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def state(self) -> dict:
        """free blocks, {seq: kv_count} and {block: [owner seq ids in drawing order]}."""
        expr = ("(lambda v: __import__('json').dumps({"
                "'free': int(explorer.engine.free_local_blocks), 'total': v.total_blocks,"
                "'seqs': {s.seq_id: s.kv_count for s in v.seqs},"
                "'owners': {b: [sid for sid, _ in who] for b, who in v.owners().items()}}))"
                "(explorer.view())")
        state = json.loads(self.eval(expr))
        state["seqs"] = {int(k): v for k, v in state["seqs"].items()}
        state["owners"] = {int(k): v for k, v in state["owners"].items()}
        return state

    def eval(self, expr: str):
        """The value of `expr` in the notebook's namespace (silent: nothing shows in the page)."""
        msg_id = self.client.execute("", silent=True, store_history=False,
                                     user_expressions={"value": expr})
        reply = self.client.get_shell_msg(timeout=120)
        assert reply["parent_header"]["msg_id"] == msg_id
        result = reply["content"]["user_expressions"]["value"]
        assert result["status"] == "ok", result
        return ast.literal_eval(result["data"]["text/plain"])

    def expected_map(self, state: dict) -> list[tuple[str, str]]:
        """Per block, the colours the map must show at its left and right edge (stripes)."""
        from pagedlab.viz import FREE_COLOR, seq_color

        return [(seq_color(who[0]), seq_color(who[-1])) if (who := state["owners"].get(b))
                else (FREE_COLOR, FREE_COLOR) for b in range(state["total"])]

    def close(self):
        self.client.stop_channels()


@pytest.fixture()
def browser(tmp_path):
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-quic", "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        opts.add_argument(flag)
    # Both paths given and SE_OFFLINE set: Selenium Manager never tries to download a driver.
    os.environ.setdefault("SE_OFFLINE", "true")
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
    driver.set_script_timeout(30)
    yield driver
    driver.quit()


SHOTS: list[Path] = []  # the running test's tmp folder, for a screenshot on failure


def _wait(driver, what: str, cond, timeout: float = 60):
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.25,
                             ignored_exceptions=(StaleElementReferenceException,)).until(lambda d: cond(d))
    except TimeoutException:
        shot = SHOTS[-1] / f"timeout_{re.sub(r'[^a-z0-9]+', '_', what.lower())[:60]}.png" if SHOTS else None
        if shot:
            driver.save_screenshot(str(shot))
        raise AssertionError(f"timed out after {timeout} s waiting for {what} (screenshot {shot})") from None


ACTIVE = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook in the front tab


def _open_from_file_browser(driver, name: str):
    """Double-click `name` in the file browser (the left sidebar shows it on a first open)."""
    item = _wait(driver, f"{name} in the file browser", lambda d: [i for i in d.find_elements(
        By.XPATH, "//li[contains(@class,'jp-DirListing-item')][.//span[contains(@class,'jp-DirListing-itemText')]"
                  f"[normalize-space()='{name}']]") if i.is_displayed()], 30)[0]
    ActionChains(driver).double_click(item).perform()


def _prompts(driver) -> list[str]:
    """Each cell's input prompt in the front notebook (`[*]:` while it runs), in one round trip:
    a poll asking each prompt for its text cost a WebDriver call per cell."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), "
        "c => (c.querySelector('.jp-InputPrompt') || {}).textContent || '')",
        f"{ACTIVE} .jp-Notebook .jp-Cell")


def _run_cell(driver, index: int):
    """Select cell `index` by its prompt (command mode) and run it with Ctrl+Enter."""
    cell = driver.find_elements(By.CSS_SELECTOR, f"{ACTIVE} .jp-Notebook .jp-Cell")[index]
    driver.execute_script("arguments[0].scrollIntoView()", cell)
    cell.find_element(By.CSS_SELECTOR, ".jp-InputPrompt").click()
    ActionChains(driver).key_down(Keys.CONTROL).send_keys(Keys.ENTER).key_up(Keys.CONTROL).perform()


def _widget_input(widget, label: str):
    return widget.find_element(By.XPATH, f".//div[contains(@class,'widget-inline-hbox')]"
                                         f"[.//label[normalize-space()='{label}']]//input")


def _set_int(driver, widget, label: str, value: int):
    box = _widget_input(widget, label)
    box.click()
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(str(value), Keys.TAB)  # ipywidgets sends the value on change (blur)
    _wait(driver, f"{label} = {value}", lambda d: box.get_attribute("value") == str(value), 10)


def _fresh(read):
    """Retry a read of the page that raced a redraw (the widget replaces its HTML on update)."""
    for _ in range(20):
        try:
            return read()
        except StaleElementReferenceException:
            time.sleep(0.25)
    return read()


def _picture(widget) -> str | None:
    """Base64 PNG of the explorer's picture, or None when the output area shows no image."""
    def read():
        imgs = widget.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output img")
        return imgs[-1].get_attribute("src") if imgs else ""
    src = _fresh(read)
    return src.split(",", 1)[1] if src.startswith("data:image/png;base64,") else None


def _block_map(png_b64: str, total: int, cols: int = 16) -> list[tuple[str, str]]:
    """Read the pool map back from the picture's pixels: per block, (left, right) colour.

    The map is the topmost band of solid course colours (free grey or a sequence colour); its
    cells are equal, so the grid follows from the band's extent. Each cell is sampled near its
    lower-left and lower-right corners, clear of the labels; a shared block is striped, so the
    two samples are its first and last owner.
    """
    import numpy as np
    from PIL import Image

    from pagedlab import viz

    palette = [viz.FREE_COLOR, *viz._PALETTE]
    rgb = np.array([[int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in palette])
    img = np.asarray(Image.open(io.BytesIO(base64.b64decode(png_b64))).convert("RGB")).astype(np.int32)
    # A pixel is solid when it is exactly a course colour: compare 24-bit keys, one per pixel
    # (a difference image per colour took 3 CPU-s per picture, 0.03 this way).
    def key(a):
        return (a[..., 0] << 16) | (a[..., 1] << 8) | a[..., 2]
    solid = np.isin(key(img), key(rgb))
    rows = -(-total // cols)
    per_row = solid.sum(1)
    band = np.flatnonzero(per_row >= 0.6 * per_row.max())
    gaps = np.flatnonzero(np.diff(band) > 8)  # the map's rows are 2 px apart; the table is far below
    y0, y1 = band[0], band[gaps[0]] if len(gaps) else band[-1]
    per_col = solid[y0:y1 + 1].sum(0)
    xs = np.flatnonzero(per_col >= 0.5 * (y1 - y0 + 1))  # legend swatches are too short to count
    x0, x1 = xs[0], xs[-1]
    w, h = (x1 - x0 + 1) / cols, (y1 - y0 + 1) / rows

    def colour(x, y):
        d = np.abs(rgb - img[int(y), int(x)]).sum(1)
        return palette[int(d.argmin())] if d.min() < 40 else "#%02x%02x%02x" % tuple(img[int(y), int(x)])

    out = []
    for b in range(total):
        r, c = divmod(b, cols)
        y = y0 + (r + 0.88) * h
        out.append((colour(x0 + (c + 0.12) * w, y), colour(x0 + (c + 0.88) * w, y)))
    return out


def _shown_map(widget, total: int) -> list[tuple[str, str]] | None:
    """The block map the explorer's picture shows now (None: no picture)."""
    png = _picture(widget)
    return None if png is None else _block_map(png, total)


def _check_map(shown: list[tuple[str, str]] | None, expected: list[tuple[str, str]], after: str):
    assert shown is not None, f"after {after} the explorer shows no picture"
    wrong = {b: (shown[b], expected[b]) for b in range(len(expected)) if shown[b] != expected[b]}
    assert not wrong, f"after {after}, blocks drawn (shown, engine): {wrong}"


def _log_lines(widget) -> list[str]:
    def read():
        pres = widget.find_elements(By.CSS_SELECTOR, ".widget-html pre, .widget-html-content pre")
        return pres[-1].text.splitlines() if pres else []
    return _fresh(read)


def _assert_no_toast(driver, shot: Path):
    toasts = [t.text for t in driver.find_elements(By.CSS_SELECTOR, TOAST) if t.is_displayed()]
    if toasts:
        driver.save_screenshot(str(shot))
    assert not toasts, f"notification pop-up(s) shown: {toasts} (see {shot})"


def _tag_targets(nb: dict) -> tuple[int, int]:
    """The cells the instructor edits: the first markdown cell tagged TAG loses it, the last
    untagged markdown cell above it gains it (markdown: their `# %%` lines differ by the tag only)."""
    remove = next(i for i, c in enumerate(nb["cells"])
                  if c["cell_type"] == "markdown" and c["metadata"].get("tags") == [TAG])
    add = max(i for i, c in enumerate(nb["cells"][:remove])
              if c["cell_type"] == "markdown" and not c["metadata"])
    return add, remove


def _with_tag_moved(nb: dict, add: int, remove: int) -> dict:
    """nb as it must read after the edit and a sync: only the two cells' tags differ."""
    nb = json.loads(json.dumps(nb))
    nb["cells"][add]["metadata"] = {"tags": [TAG]}
    nb["cells"][remove]["metadata"] = {}
    return nb


def _cell_tags(path: Path) -> list[list[str]] | None:
    """Each cell's tags in the .ipynb on disk; None while the server is still writing it."""
    try:
        return [c["metadata"].get("tags", []) for c in json.loads(path.read_text())["cells"]]
    except ValueError:
        return None


def _changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    """(old, new) for every line that differs; a different line count is a difference too."""
    old, new = before.splitlines(), after.splitlines()
    assert len(old) == len(new), f"line count {len(old)} -> {len(new)}"
    return [(a, b) for a, b in zip(old, new) if a != b]


def _open_cell_tags(driver):
    """The right sidebar's Property Inspector with its Common Tools (where Cell Tags live) open."""
    panel = driver.find_element(By.ID, "jp-property-inspector")
    if not panel.is_displayed():
        driver.find_element(By.CSS_SELECTOR, "li.lm-TabBar-tab[data-id='jp-property-inspector']").click()
    header = _wait(driver, "the Common Tools header", lambda d: panel.find_elements(
        By.XPATH, ".//div[contains(@class,'jp-Collapse-header')][.//span[text()='Common Tools']]"), 20)[0]
    if "jp-Collapse-header-collapsed" in header.get_attribute("class"):
        header.click()
    return panel


def _select_cell(driver, panel, index: int, first_line: str):
    """Click cell `index`'s prompt (command mode) and wait until the inspector shows that cell."""
    cell = driver.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell")[index]
    driver.execute_script("arguments[0].scrollIntoView()", cell)
    cell.find_element(By.CSS_SELECTOR, ".jp-InputPrompt").click()
    _wait(driver, f"the inspector on cell {index}", lambda d: panel.find_element(
        By.CSS_SELECTOR, ".jp-ActiveCellTool").text.strip() == first_line, 20)


def _applied_tags(panel) -> list[str]:
    return [t.text for t in panel.find_elements(By.CSS_SELECTOR, ".jp-CellTags-Applied")]


def _check_tag_save(path: Path, committed: dict, committed_py: str, add: int, remove: int):
    """The pair as the server saved it after the tag edit, then after `pagedlab notebook sync`.

    The save carries the edit on both sides, plus what JupyterLab's inspector adds (`"tags": []`,
    `editable`, `slideshow`); the sync leaves the edit and nothing else: the committed files
    but for the two cells' tags, same cell ids, a clean pair.
    """
    import jupytext

    from pagedlab import notebooks

    def cells(nb):
        return [(c["id"], c["cell_type"], "".join(c["source"])) for c in nb["cells"]]

    assert cells(json.loads(path.read_text())) == cells(committed), "the save changed cells or their ids"
    text = jupytext.read(path.with_suffix(".py"))
    assert [c.metadata.get("tags", []) for c in text.cells] == _cell_tags(path), "the .py's tags differ"
    notebooks.sync(path)
    assert notebooks.problems(path) == []
    assert json.loads(path.read_text()) == _with_tag_moved(committed, add, remove)
    assert _changed_lines(committed_py, path.with_suffix(".py").read_text()) == [
        ("# %% [markdown]", f'# %% [markdown] tags=["{TAG}"]'), (f'# %% [markdown] tags=["{TAG}"]', "# %% [markdown]")]


def test_explorer_clicks_show_the_engine_state_and_a_saved_edit_reaches_disk(browser, course_lab, tmp_path):
    SHOTS.append(tmp_path)
    lab = course_lab
    kernel = None
    try:
        # ---- first open: the course's landing page, quiet
        browser.get(f"{lab.url}/?token={TOKEN}")
        _wait(browser, "JupyterLab's shell", lambda d: d.find_elements(By.CSS_SELECTOR, "#jp-main-dock-panel"))
        assert "/lab/tree/00_welcome.ipynb" in browser.current_url, browser.current_url
        _wait(browser, "00_welcome's first cell", lambda d: d.find_elements(
            By.CSS_SELECTOR, ".jp-Notebook .jp-MarkdownCell"))
        landed = time.time()

        # ---- notebook 02, opened as a student does: a double click in the file browser (no second
        # page load: loading JupyterLab costs Chromium about 8 CPU-s)
        _open_from_file_browser(browser, "02_block_table.ipynb")
        _wait(browser, "notebook 02's kernel to be idle", lambda d: all(w in d.find_element(
            By.CSS_SELECTOR, "#jp-main-statusbar").text for w in ("Idle", "02_block_table.ipynb")), 120)
        # JupyterLab asks about news a moment after start-up (a toast that stays until answered):
        # give it 3 s, spent opening 02 when that took longer
        time.sleep(max(0.0, landed + 3 - time.time()))
        _assert_no_toast(browser, tmp_path / "01_first_open.png")
        # ---- the instructor's tag edit by clicks: TAG typed onto one cell, clicked off another
        nb_file = lab.folder / "02_block_table.ipynb"
        pair = nb_file.with_suffix(".py")
        committed, committed_py = json.loads(nb_file.read_text()), pair.read_text()
        add, remove = _tag_targets(committed)
        first = ["".join(committed["cells"][i]["source"]).splitlines()[0] for i in (add, remove)]
        inspector = _open_cell_tags(browser)
        _select_cell(browser, inspector, remove, first[1])
        assert _applied_tags(inspector) == [TAG], _applied_tags(inspector)
        inspector.find_element(By.XPATH, f".//div[contains(@class,'jp-CellTags-Applied')][.//span[text()='{TAG}']]").click()
        _wait(browser, f"{TAG} off cell {remove}", lambda d: _applied_tags(inspector) == [], 10)
        _select_cell(browser, inspector, add, first[0])
        box = inspector.find_element(By.CSS_SELECTOR, "input.jp-CellTags-Add")
        box.click()
        box.send_keys(TAG, Keys.ENTER)
        _wait(browser, f"{TAG} on cell {add}", lambda d: _applied_tags(inspector) == [TAG], 10)
        ActionChains(browser).key_down(Keys.CONTROL).send_keys("s").key_up(Keys.CONTROL).perform()
        expected_tags = [c["metadata"].get("tags", []) for c in committed["cells"]]
        expected_tags[add], expected_tags[remove] = [TAG], []
        _wait(browser, "the tag edit in the .ipynb on disk", lambda d: _cell_tags(nb_file) == expected_tags, 30)
        _wait(browser, "the tag edit in the .py on disk", lambda d: pair.read_text() != committed_py, 30)
        tag_save = tmp_path / "tag_save"  # the pair as the server saved it, checked below
        tag_save.mkdir()
        for name in (nb_file.name, pair.name, "jupytext.toml"):
            shutil.copy2(lab.folder / name, tag_save / name)
        browser.find_element(By.CSS_SELECTOR, "li.lm-TabBar-tab[data-id='jp-property-inspector']").click()
        _wait(browser, "the inspector to close", lambda d: not inspector.is_displayed(), 10)

        # ---- the explorer's cell (the notebook's last), run with Ctrl+Enter: the clicks need
        # nothing else, and nbval runs every cell of 02
        explorer_cell = len(committed["cells"]) - 1
        assert "Explorer(" in "".join(committed["cells"][explorer_cell]["source"])
        for attempt in range(3):  # a notebook ignores the key until it is fully up
            _run_cell(browser, explorer_cell)
            try:
                _wait(browser, "the explorer's cell to start", lambda d: re.search(
                    r"\[(\*|\d+)\]", _prompts(d)[explorer_cell]), 20)
                break
            except AssertionError:
                if attempt == 2:
                    raise
        _check_tag_save(tag_save / nb_file.name, committed, committed_py, add, remove)  # while it runs
        widget = _wait(browser, "the explorer widget", lambda d: (
            d.find_elements(By.XPATH, "//div[contains(@class,'widget-vbox')][.//button[normalize-space()='create']]") or [None])[-1], 300)
        _wait(browser, "the explorer's cell to finish", lambda d: "[*]" not in _prompts(d)[explorer_cell], 300)
        browser.execute_script("arguments[0].scrollIntoView()", widget)
        kernel = Kernel(lab)

        state = kernel.state()
        assert state["seqs"] == {1: 40, 2: 20}, state["seqs"]  # what the notebook's cell created
        _check_map(_shown_map(widget, state["total"]), kernel.expected_map(state), "running the explorer's cell")

        clicks = [  # (inputs, button, the call the log must show)
            ({"seq id": 3, "length / value": 20}, "create", "create_sequence(engine, 3, 20)"),
            ({"fork from": 3, "seq id": 4}, "fork", "fork_sequence(engine, 3, 4)"),
            ({"seq id": 4, "length / value": 7}, "append", "append_kv(engine, 4, 7)"),
            ({"seq id": 3}, "free", "free_sequence(engine, 3)"),
        ]
        for step, (inputs, button, call) in enumerate(clicks, start=1):
            for label, value in inputs.items():
                _set_int(browser, widget, label, value)
                # The box has the number; wait until the kernel's widget model has it too.
                box = f"explorer.{BOXES[label]}.value"
                deadline = time.time() + 60
                while kernel.eval(box) != value:
                    assert time.time() < deadline, f"the kernel never saw {label} = {value}"
                    time.sleep(0.2)
            before = len(_log_lines(widget))
            widget.find_element(By.XPATH, f".//button[normalize-space()='{button}']").click()
            try:
                _wait(browser, f"the log line of {call}", lambda d, before=before, call=call:
                      len(_log_lines(widget)) > before and call in _log_lines(widget)[-1], 90)
            except AssertionError as exc:
                raise AssertionError(f"{exc}; the log ends with {_log_lines(widget)[-2:]}") from None
            state = kernel.state()
            line = _log_lines(widget)[-1]
            assert "✓" in line, f"{button}: the explorer logged a failure: {line}"
            free = re.search(r"\[free blocks: (\d+)\]", line)
            assert free and int(free.group(1)) == state["free"], (
                f"{button}: the log shows {line!r}, the engine has {state['free']} free blocks")
            expected = kernel.expected_map(state)
            shot = tmp_path / f"step{step}_{button}.png"
            try:  # the picture is redrawn right after the log: give the browser a moment
                _wait(browser, f"the block map after {button}", lambda d, expected=expected:
                      _shown_map(widget, len(expected)) == expected, 15)
            except AssertionError:
                pass  # _check_map says what differs
            shown = _shown_map(widget, len(expected))
            if shown != expected:
                widget.screenshot(str(shot))
            _check_map(shown, expected, f"{button} (screenshot {shot})")
        assert set(state["seqs"]) == {1, 2, 4}, state["seqs"]
        assert state["owners"], "the engine has no mapped blocks: the clicks did nothing"

        # ---- edit a markdown cell, save, check the file(s) on disk
        pair_before = pair.read_text() if pair.exists() else None
        cell = browser.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-MarkdownCell")[0]
        browser.execute_script("arguments[0].scrollIntoView()", cell)
        ActionChains(browser).double_click(cell.find_element(By.CSS_SELECTOR, ".jp-MarkdownOutput")).perform()
        editor = _wait(browser, "the markdown cell's editor", lambda d: cell.find_elements(
            By.CSS_SELECTOR, ".cm-content[contenteditable='true']"), 20)[0]
        editor.send_keys(Keys.CONTROL, Keys.END)
        editor.send_keys(Keys.ENTER, Keys.ENTER, MARK)
        ActionChains(browser).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
        ActionChains(browser).key_down(Keys.CONTROL).send_keys("s").key_up(Keys.CONTROL).perform()
        _wait(browser, "the saved notebook on disk", lambda d: MARK in nb_file.read_text(), 30)
        source = "".join(json.loads(nb_file.read_text())["cells"][0]["source"])
        assert source.rstrip().endswith(MARK), source[-200:]
        if pair_before is not None:  # the jupytext pair (py:percent) is written on the same save
            _wait(browser, "the paired .py on disk", lambda d: MARK in pair.read_text(), 30)
        _assert_no_toast(browser, tmp_path / "10_end.png")
    finally:
        if kernel is not None:
            kernel.close()
        lab.shutdown_kernels()  # the server serves the next course-venv tests
