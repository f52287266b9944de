"""`pagedlab.load`: whose code runs is chosen by impl=, then PAGEDLAB_IMPL, then exercises."""

import pytest

import pagedlab
from pagedlab.loader import ROOT, kernel_source, load


@pytest.fixture
def two_impls(tmp_path):
    for who in ("alice", "bob"):
        (tmp_path / who).mkdir()
        (tmp_path / who / "answer.py").write_text(f"WHO = {who!r}\n")
    return tmp_path


def test_folder_path_selects_a_submission(two_impls):
    assert load("answer", two_impls / "alice").WHO == "alice"
    assert load("answer", str(two_impls / "bob")).WHO == "bob"


def test_env_var_is_the_default_and_impl_overrides_it(two_impls, monkeypatch):
    monkeypatch.setenv("PAGEDLAB_IMPL", str(two_impls / "bob"))
    assert load("answer").WHO == "bob"
    assert load("answer", two_impls / "alice").WHO == "alice"


def test_default_without_env_is_exercises(monkeypatch):
    monkeypatch.delenv("PAGEDLAB_IMPL", raising=False)
    assert pagedlab.loader.impl_dir() == ROOT / "exercises"


def test_named_impls_resolve_to_the_repository_folders():
    assert pagedlab.loader.impl_dir("solutions") == ROOT / "solutions"
    assert pagedlab.loader.impl_dir("exercises") == ROOT / "exercises"


def test_reload_picks_up_edits(two_impls):
    path = two_impls / "alice" / "answer.py"
    assert load("answer", path.parent).WHO == "alice"
    path.write_text("WHO = 'alice, edited'\n")
    assert load("answer", path.parent).WHO == "alice, edited"


def test_missing_module_names_the_folder_searched(two_impls):
    with pytest.raises(ModuleNotFoundError, match=r"nope\.py not found in .*alice"):
        load("nope", two_impls / "alice")


def test_unknown_impl_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="neither 'exercises' nor 'solutions'"):
        load("answer", "/no/such/folder")
    with pytest.raises(TypeError, match="impl must be"):
        load("answer", 3)
    with pytest.raises(ValueError, match="Python identifier"):
        load("memory-manager", "solutions")


def test_kernel_source_reads_the_chosen_file(two_impls):
    (two_impls / "alice" / "k.cu").write_text("// alice's kernel\n")
    assert kernel_source("k.cu", two_impls / "alice") == "// alice's kernel\n"
    with pytest.raises(FileNotFoundError, match=r"k\.cu not found in .*bob"):
        kernel_source("k.cu", two_impls / "bob")
