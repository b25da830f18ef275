"""Finding the submissions: every notebook once, each with an id and a safe report name."""

from addnorm_lib.grading import discover


def test_discover_gives_every_notebook_a_unique_id(tmp_path):
    for path in ("a/hw.ipynb", "b/hw.ipynb", "c/.ipynb_checkpoints/hw.ipynb", "notes.txt"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("{}")
    single = tmp_path / "a" / "hw.ipynb"
    found = discover.discover([tmp_path, single])
    assert [submission for submission, _ in found] == ["a/hw.ipynb", "b/hw.ipynb", "hw.ipynb"]
    assert [s for s, _ in discover.discover([single, single])] == ["hw.ipynb", "hw.ipynb~2"]


def test_a_submission_keeps_its_path(tmp_path):
    (tmp_path / "ada").mkdir()
    notebook = tmp_path / "ada" / "layernorm.ipynb"
    notebook.write_text("{}")
    assert discover.discover([tmp_path]) == [("ada/layernorm.ipynb", notebook)]


def test_an_empty_folder_has_no_submissions(tmp_path):
    assert discover.discover([tmp_path]) == []


def test_missing_paths_are_named(tmp_path):
    assert discover.missing_paths([tmp_path, tmp_path / "nowhere"]) == [tmp_path / "nowhere"]


def test_safe_names_are_flat_file_names():
    assert discover.safe_name("class a/bo's hw.ipynb") == "class_a__bo_s_hw.ipynb"
    assert "/" not in discover.safe_name("../../etc/passwd.ipynb")
