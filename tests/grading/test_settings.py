"""Settings: every default in one dataclass, and the command line built from its fields."""

from dataclasses import fields
from pathlib import Path

import pytest

from addnorm_lib.grading import settings
from addnorm_lib.grading.settings import Settings, build_parser, flag_of, parse_command_line

# Every flag the grader had before its settings became a dataclass, with a value to give it.
FLAGS = {
    "--source": "elsewhere",
    "--out": "reports",
    "--jobs": "3",
    "--timeout": "5",
    "--notebook-timeout": "90",
    "--memory-mb": "512",
    "--file-mb": "8",
    "--notebook-mb": "4",
    "--resume": None,
}


def flags_by_setting() -> dict[str, list[str]]:
    """The parser's flags, grouped by the attribute they set."""
    found = {}
    for action in build_parser()._actions:
        if action.option_strings and action.dest != "help":
            found.setdefault(action.dest, []).extend(action.option_strings)
    return found


def test_every_setting_has_exactly_one_flag_and_every_flag_a_setting():
    assert flags_by_setting() == {field.name: [flag_of(field)] for field in fields(Settings)}


def test_no_flags_give_the_dataclass_defaults():
    paths, settings = parse_command_line(["a.ipynb", "class/"])
    assert paths == [Path("a.ipynb"), Path("class/")]
    assert settings == Settings()


def test_every_flag_of_the_grader_keeps_its_meaning():
    argv = ["a.ipynb"]
    for flag, value in FLAGS.items():
        argv += [flag] if value is None else [flag, value]
    _, settings = parse_command_line(argv)
    expected = Settings(Path("elsewhere"), Path("reports"), 3, 5.0, 90.0, 512, 8, 4, resume=True)
    assert settings == expected
    assert type(settings.cell_timeout) is float and type(settings.memory_mb) is int


def test_help_shows_the_defaults_of_the_dataclass():
    text = " ".join(build_parser().format_help().split())
    for field in fields(Settings):
        assert flag_of(field) in text
    assert "seconds per cell (default: 60.0)" in text
    assert "--notebook-mb NOTEBOOK_MB largest notebook file read, in MiB (default: 16)" in text
    assert f"(default: {Settings().jobs})" in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--jobs", "two"], "argument --jobs: invalid int value: 'two'"),
        (["--jobs", "0"], "argument --jobs: must be a positive number, got '0'"),
        (["--timeout", "-1"], "argument --timeout: must be a positive number, got '-1'"),
        (["--notebook-timeout", "nan"], "argument --notebook-timeout: must be a positive number"),
        (["--memory-mb", "1.5"], "argument --memory-mb: invalid int value: '1.5'"),
        (["--notebook-mb", "0"], "argument --notebook-mb: must be a positive number, got '0'"),
        (["--resume", "yes"], "unrecognized arguments: yes"),
        ([], None),  # no path to grade
    ],
)
def test_a_bad_value_is_a_clear_argparse_error(argv, message, capsys):
    command = argv if message is None else ["a.ipynb", *argv]
    with pytest.raises(SystemExit) as stopped:
        parse_command_line(command)
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert "usage: python -m addnorm_lib.grading" in error
    assert (message or "the following arguments are required: paths") in error


def test_the_grading_code_is_part_of_the_digest_resume_compares(tmp_path, monkeypatch):
    """A grade decided by another version of the grader, the checks or the references is graded
    again by --resume; files elsewhere do not count."""
    for folder in settings.GRADING_CODE:
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "a.py").write_text("x = 1\n")
    (tmp_path / "book.py").write_text("y = 1\n")
    first = settings.code_digest(tmp_path)
    (tmp_path / "book.py").write_text("y = 2\n")
    assert settings.code_digest.__wrapped__(tmp_path) == first
    (tmp_path / "addnorm_lib/checks/a.py").write_text("x = 2\n")
    assert settings.code_digest.__wrapped__(tmp_path) != first
    before = settings.grading_digest(settings.Settings(), True)
    monkeypatch.setattr(settings, "code_digest", lambda: "another grader")
    assert settings.grading_digest(settings.Settings(), True) != before
