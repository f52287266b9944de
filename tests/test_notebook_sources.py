"""Each notebook is a py:percent source paired with its .ipynb (notebooks/README.md).

The committed pairs are in sync and clean; an edit on either side (the .py in an editor, the
.ipynb through JupyterLab's jupytext contents manager) syncs without touching the ids of the
other cells or the outputs nbval checks; and the problems the check reports are real ones.
"""

import re
import shutil
from pathlib import Path

import jupytext
import nbformat
import pytest

from pagedlab import notebooks
from pagedlab.spec import manifest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = notebooks.notebook_paths()
GRADED = re.compile(r'^\s*(?:pagedlab\.)?graded\.run\("(task\d+)"\)', re.MULTILINE)


def test_every_source_has_its_notebook_and_back():
    sources = {p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]*_*.py")}
    books = {p.stem for p in NOTEBOOKS}
    assert sources == books, f"unpaired: {sorted(sources ^ books)}"
    assert len(books) >= 10


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_pair_is_in_sync(path):
    assert notebooks.sync_problems(path) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_clean(path):
    """Only the cells and the checked outputs: no other outputs, counts or kernel metadata."""
    assert notebooks.clean_problems(path) == []


def _copy(tmp_path, stem):
    for name in (f"{stem}.ipynb", f"{stem}.py", "jupytext.toml"):
        shutil.copy2(ROOT / "notebooks" / name, tmp_path / name)
    return tmp_path / f"{stem}.ipynb"


def _checked(nb):
    return {c.id: c.outputs for c in nb.cells if notebooks.is_checked(c)}


def test_sync_of_an_unedited_pair_changes_nothing(tmp_path):
    path = _copy(tmp_path, "02_block_table")
    before = path.read_bytes(), path.with_suffix(".py").read_bytes()
    notebooks.sync(path)
    assert (path.read_bytes(), path.with_suffix(".py").read_bytes()) == before


def test_editing_the_source_keeps_ids_and_checked_outputs(tmp_path):
    path = _copy(tmp_path, "06_paged_kv_cache")
    before = nbformat.read(path, as_version=4)
    text = path.with_suffix(".py")
    source = text.read_text()
    edited = source.replace("# # 06 ·", "# # 06 (edited) ·", 1)
    edited = edited.replace("\n# %% [markdown]\n# ## The layout",
                            "\n# %% [markdown]\n# A new paragraph.\n\n# %% [markdown]\n# ## The layout", 1)
    assert edited.count("(edited)") == 1 and "A new paragraph." in edited
    text.write_text(edited)
    notebooks.sync(path)

    after = nbformat.read(path, as_version=4)
    assert after.cells[0].source.startswith("# 06 (edited) ·")
    assert after.cells[0].id == before.cells[0].id, "an edited cell keeps its id"
    kept = [c.id for c in after.cells if c.source != "A new paragraph."]
    assert kept == [c.id for c in before.cells], "every other cell keeps its id, in order"
    assert _checked(after) == _checked(before) and _checked(after), "checked outputs survive"
    assert notebooks.problems(path) == []


def test_a_jupyterlab_save_reaches_the_source(tmp_path):
    """Save through jupytext's contents manager, as JupyterLab does, then sync the noise away."""
    import asyncio

    from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
    from jupytext.async_contentsmanager import build_async_jupytext_contents_manager_class

    path = _copy(tmp_path, "06_paged_kv_cache")
    ids = [c.id for c in nbformat.read(path, as_version=4).cells]
    # The class jupytext's server extension installs in place of JupyterLab's default manager.
    manager = build_async_jupytext_contents_manager_class(AsyncLargeFileManager)(root_dir=str(tmp_path))
    model = asyncio.run(manager.get(path.name))
    nb = model["content"]
    assert nb.cells[0].cell_type == "markdown"
    nb.cells[0].source += "\nA sentence typed in JupyterLab."
    # What a live kernel adds before the save: its language_info and an execution count.
    nb.metadata["language_info"] = {"name": "python", "version": "3.12.3", "mimetype": "text/x-python"}
    code = next(c for c in nb.cells if c.cell_type == "code" and not notebooks.is_checked(c))
    code.execution_count = 7
    asyncio.run(manager.save({"type": "notebook", "content": nb}, path.name))

    assert "# A sentence typed in JupyterLab." in path.with_suffix(".py").read_text()
    assert notebooks.sync_problems(path) == [], "the save wrote both sides"
    found = notebooks.clean_problems(path)
    assert any("language_info" in p for p in found) and any("execution count 7" in p for p in found)
    notebooks.sync(path)
    assert notebooks.problems(path) == []
    assert [c.id for c in nbformat.read(path, as_version=4).cells] == ids
    assert "# A sentence typed in JupyterLab." in path.with_suffix(".py").read_text()


def test_a_jupyterlab_save_after_a_tag_is_added_and_removed_syncs_clean(tmp_path):
    """JupyterLab saves `"tags": []` once a cell's last tag is removed, plus widget state and
    editor flags: one sync makes the pair check clean, and a second sync changes nothing."""
    import asyncio

    from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
    from jupytext.async_contentsmanager import build_async_jupytext_contents_manager_class

    path = _copy(tmp_path, "06_paged_kv_cache")
    manager = build_async_jupytext_contents_manager_class(AsyncLargeFileManager)(root_dir=str(tmp_path))
    nb = asyncio.run(manager.get(path.name))["content"]
    code = [c for c in nb.cells if c.cell_type == "code"]
    code[1].metadata["tags"] = []
    code[2].metadata.update({"tags": [], "collapsed": False, "scrolled": True, "editable": True})
    nb.cells[0].metadata["jp-MarkdownHeadingCollapsed"] = True
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2}}
    nb.metadata["language_info"] = {"name": "python", "version": "3.12.3"}
    asyncio.run(manager.save({"type": "notebook", "content": nb}, path.name))
    assert any("tags" in p for p in notebooks.clean_problems(path)), "the empty tags are reported"

    notebooks.sync(path)
    assert notebooks.problems(path) == []
    after = path.read_bytes(), path.with_suffix(".py").read_bytes()
    notebooks.sync(path)
    assert (path.read_bytes(), path.with_suffix(".py").read_bytes()) == after


def test_the_check_reports_unsynced_and_unclean_pairs(tmp_path):
    path = _copy(tmp_path, "02_block_table")
    nb = nbformat.read(path, as_version=4)
    plain = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and not notebooks.is_checked(c))
    checked = next(i for i, c in enumerate(nb.cells) if notebooks.is_checked(c))
    nb.cells[plain].outputs = [nbformat.v4.new_output("stream", text="stray\n")]
    nb.cells[checked].outputs = []
    nb.cells[checked].metadata["collapsed"] = True
    nbformat.write(nb, path)
    text = path.with_suffix(".py")
    text.write_text(text.read_text().replace("# ## Why two levels?", "# ## Why two levels, really?"))

    found = "\n".join(notebooks.problems(path))
    assert f"cell {plain} " in found and "outputs in a cell nbval does not check" in found
    assert f"cell {checked} " in found and "without its output" in found
    assert "cell metadata ['collapsed']" in found
    assert "differ" in found and "Why two levels" in found
    path.with_suffix(".py").unlink()
    assert "no paired source" in notebooks.problems(path)[0]


def test_the_translation_example_is_checked_output():
    nb = nbformat.read(ROOT / "notebooks" / "02_block_table.ipynb", as_version=4)
    text = "".join(o.get("text", "") for outputs in _checked(nb).values() for o in outputs)
    for line in ("logical block  = 613 // 16 = 38", "offset         = 613 % 16 = 5",
                 "L1 index       = 38 // 16 = 2", "L2 index       = 38 % 16 = 6"):
        assert line in text


@pytest.mark.task_wide
def test_graded_cells_run_the_tasks_the_manifest_gives_each_notebook():
    graded = {}
    for path in NOTEBOOKS:
        code = "\n".join(c.source for c in jupytext.read(path.with_suffix(".py")).cells
                         if c.cell_type == "code")
        graded[path.stem] = set(GRADED.findall(code))
    for task in manifest.select():
        if task.notebook in graded:
            assert task.id in graded[task.notebook], f"{task.notebook} has no graded cell for {task.id}"
    assert not graded["00_welcome"] and not graded["01_kv_cache_size"] and not graded["03_intrusive_list"]


def test_no_notebook_reads_the_solutions_folder():
    """The student edition has no solutions/: a demo that needs reference code would break."""
    for path in NOTEBOOKS:
        for cell in jupytext.read(path.with_suffix(".py")).cells:
            if cell.cell_type != "code":
                continue
            code = "\n".join(line.split("#", 1)[0] for line in cell.source.splitlines())
            assert not re.search(r"""["']solutions\b|solutions/""", code), f"{path.stem}: {cell.source[:200]}"


def test_a_new_notebook_written_as_text_gets_its_pair(tmp_path):
    shutil.copy2(ROOT / "notebooks" / "jupytext.toml", tmp_path)
    text = tmp_path / "42_new.py"
    text.write_text('# %% [markdown]\n# # 42 · New\n\n# %%\n# NBVAL_CHECK_OUTPUT\nprint(6 * 7)\n')
    path = text.with_suffix(".ipynb")
    assert "no paired 42_new.ipynb" in notebooks.problems(path)[0]
    notebooks.sync(path)
    nb = nbformat.read(path, as_version=4)
    assert [c.cell_type for c in nb.cells] == ["markdown", "code"]
    assert nb.metadata["jupytext"]["formats"] == "ipynb,py:percent"
    assert "formats: ipynb,py:percent" in text.read_text()
    # The checked cell has no output until `pagedlab notebook run`: exactly that is reported.
    assert [p for p in notebooks.problems(path)] == [
        f"42_new.ipynb cell 1 (id {nb.cells[1].id}): a # NBVAL_CHECK_OUTPUT cell without its output "
        "(pagedlab notebook run 42)"]


def test_run_stores_only_the_checked_outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGEDLAB_IMPL", "exercises")  # `run` executes the solutions regardless
    shutil.copy2(ROOT / "notebooks" / "jupytext.toml", tmp_path)
    text = tmp_path / "43_run.py"
    text.write_text("# %%\nimport os\nprint('not kept')\n\n"
                    "# %%\n# NBVAL_CHECK_OUTPUT\nprint('impl', os.environ['PAGEDLAB_IMPL'])\n\n"
                    "# %%\n# NBVAL_CHECK_OUTPUT\n6 * 7\n")
    path = text.with_suffix(".ipynb")
    notebooks.sync(path)
    assert notebooks.run(path) == ["cell 1: print('impl', os.environ['PAGEDLAB_IMPL'])", "cell 2: 6 * 7"]
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[0].outputs == [] and nb.cells[0].execution_count is None
    assert nb.cells[1].outputs[0].text == "impl solutions\n" and nb.cells[1].execution_count == 1
    assert nb.cells[2].outputs[0].data["text/plain"] == "42" and nb.cells[2].outputs[0].execution_count == 2
    assert notebooks.problems(path) == []
    assert notebooks.run(path) == [], "a second run changes nothing"

    text.write_text(text.read_text().replace("6 * 7", "6 * 7\nraise RuntimeError('broken')"))
    with pytest.raises(Exception, match="broken"):
        notebooks.run(path)
    assert "42" in path.read_text() and nbformat.read(path, as_version=4).cells[2].outputs, \
        "a failed run keeps the stored outputs"


def test_every_notebook_says_whose_code_it_loaded_the_same_way():
    """The set-up cell prints where each student module came from, in one form everywhere."""
    loading = 0
    for path in NOTEBOOKS:
        setup = next(c.source for c in jupytext.read(path.with_suffix(".py")).cells if c.cell_type == "code")
        loads = re.findall(r'^(\w+) = pagedlab\.load\("(\w+)"\)', setup, re.MULTILINE)
        loading += bool(loads)
        for var, module in loads:
            assert f'print("{module} loaded from", {var}.__file__)' in setup, f"{path.stem}: {module}"
    assert loading >= 10
