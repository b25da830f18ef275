"""Finding the submissions: every notebook once, each with an id and a safe report name."""

import re
from dataclasses import astuple

import pytest

from addnorm_lib.grading import discover
from addnorm_lib.grading.discover import Submission


def test_discover_gives_every_notebook_a_unique_id(tmp_path):
    for path in ("a/hw.ipynb", "b/hw.ipynb", "c/.ipynb_checkpoints/hw.ipynb", "notes.txt"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("{}")
    single = tmp_path / "a" / "hw.ipynb"
    found = discover.discover([tmp_path, single])
    assert [submission.id for submission in found] == ["a/hw.ipynb", "b/hw.ipynb", "hw.ipynb"]
    twice = discover.discover([single, single])
    assert [s.id for s in twice] == ["hw.ipynb", "hw.ipynb~2"]
    assert all(s.raw is None and s.refused is None for s in twice)  # found, not yet read


def test_a_submission_keeps_its_path(tmp_path):
    (tmp_path / "ada").mkdir()
    notebook = tmp_path / "ada" / "layernorm.ipynb"
    notebook.write_text("{}")
    assert discover.discover([tmp_path]) == [Submission("ada/layernorm.ipynb", notebook)]


def test_an_empty_folder_has_no_submissions(tmp_path):
    assert discover.discover([tmp_path]) == []


def test_missing_paths_are_named(tmp_path):
    assert discover.missing_paths([tmp_path, tmp_path / "nowhere"]) == [tmp_path / "nowhere"]


def test_safe_names_are_flat_file_names():
    assert discover.safe_name("class a/bo's hw.ipynb").startswith("class_a__bo_s_hw.ipynb~")
    assert "/" not in discover.safe_name("../../etc/passwd.ipynb")


# Hostile names and links (issue 15)


def test_symlinks_are_listed_as_submissions_but_never_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "layernorm.ipynb").write_text("{}")
    folder = tmp_path / "submissions"
    (folder / "ada").mkdir(parents=True)
    (folder / "ada" / "layernorm.ipynb").write_text("{}")
    (folder / "link.ipynb").symlink_to(elsewhere / "layernorm.ipynb")
    (folder / "linked").symlink_to(elsewhere, target_is_directory=True)
    (folder / "dangling.ipynb").symlink_to(tmp_path / "nowhere.ipynb")
    (folder / "notes.txt").symlink_to(elsewhere / "layernorm.ipynb")  # not a notebook by name
    found = discover.discover([folder])
    assert found == [
        Submission("ada/layernorm.ipynb", folder / "ada" / "layernorm.ipynb"),
        Submission("dangling.ipynb", folder / "dangling.ipynb"),
        Submission("link.ipynb", folder / "link.ipynb"),
        Submission("linked", folder / "linked"),  # a row for the folder, nothing inside it
    ]


def test_a_symlink_given_as_a_path_is_a_submission_of_its_own(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "layernorm.ipynb").write_text("{}")
    (tmp_path / "folder").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "file.ipynb").symlink_to(tmp_path / "elsewhere" / "layernorm.ipynb")
    (tmp_path / "dangling.ipynb").symlink_to(tmp_path / "nowhere.ipynb")
    paths = [tmp_path / name for name in ("folder", "file.ipynb", "dangling.ipynb")]
    assert discover.missing_paths(paths) == []
    assert discover.discover(paths) == [Submission(path.name, path) for path in paths]


def test_an_undecodable_file_name_gets_a_printable_id(tmp_path):
    name = b"caf\xe9.ipynb"  # Latin-1, as an old archive may hold it
    (tmp_path / "class").mkdir()
    with open(bytes(tmp_path / "class") + b"/" + name, "w") as file:
        file.write("{}")
    ((submission_id, path, _, _),) = map(astuple, discover.discover([tmp_path / "class"]))
    assert submission_id == "caf\\xe9.ipynb"
    assert submission_id.encode("utf-8") and path.is_file()


@pytest.mark.parametrize(
    "first, second",
    [
        ("a b.ipynb", "a_b.ipynb"),
        ("a/b.ipynb", "a__b.ipynb"),
        ("a?b.ipynb", "a!b.ipynb"),
        ("a/_b.ipynb", "a_/b.ipynb"),
        ("Ada.ipynb", "ada.ipynb"),  # the same file on a case-insensitive disk
        ("hw.ipynb", "hw.ipynb~2"),
        ("x" * 300 + "a.ipynb", "x" * 300 + "b.ipynb"),
    ],
)
def test_safe_names_of_different_ids_differ(first, second):
    assert discover.safe_name(first).casefold() != discover.safe_name(second).casefold()
    assert discover.safe_name(first) == discover.safe_name(first)  # stable: the id alone decides


def test_plain_ids_keep_their_readable_names():
    assert discover.safe_name("ada.ipynb") == "ada.ipynb"
    assert discover.safe_name("same_name/b/layernorm.ipynb") == "same_name__b__layernorm.ipynb"


def test_a_safe_name_fits_in_a_file_name_whatever_the_id():
    for submission_id in ("a/" * 2000 + "hw.ipynb", "é" * 300, "\x1b[2J\n.ipynb", "../../x"):
        name = discover.safe_name(submission_id)
        assert len(name) <= 120 and re.fullmatch(r"[A-Za-z0-9._~-]+", name), name
        assert not name.startswith(("-", "."))
