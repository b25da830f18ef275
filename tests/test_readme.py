"""The README's map of the course names real files, and every topic module of the library."""

import re
import subprocess

import pytest

from tests.conftest import ROOT

LIBRARY = ROOT / "addnorm_lib"
ROLES_WITH_TOPICS = ("reference", "reference/mistakes", "checks", "transformer", "experiments")
TOPICS = ("depth", "residuals", "batchnorm", "layernorm", "rmsnorm", "deepnorm", "placement")


def map_section(readme: str) -> str:
    """The text of the README's "Map of the course" section."""
    match = re.search(r"^### Map of the course\n(.*?)(?=^#)", readme, re.M | re.S)
    assert match, "the README has no '### Map of the course' section"
    return match.group(1)


def map_rows(section: str) -> dict[str, list[str]]:
    """Topic -> the backquoted paths of its row."""
    rows = {}
    for line in section.splitlines():
        if line.startswith("| ") and "`" in line:
            topic = line.split("|")[1].strip().split(" ")[0]
            rows[topic] = re.findall(r"`([^`]+\.(?:py|md|ipynb))`", line)
    return rows


def resolve(path: str):
    """A map path: library paths are written relative to addnorm_lib/."""
    top = path.split("/")[0]
    return ROOT / path if (ROOT / top).is_dir() else LIBRARY / path


@pytest.fixture(scope="module")
def rows():
    return map_rows(map_section((ROOT / "README.md").read_text()))


def test_every_path_in_the_map_exists(rows):
    missing = [path for paths in rows.values() for path in paths if not resolve(path).is_file()]
    assert rows and not missing, f"the README's map names files that do not exist: {missing}"


def test_every_topic_has_a_row_with_its_chapter(rows):
    for topic in TOPICS:
        assert f"book/{topic}.md" in rows.get(topic, []), f"no row for {topic} with its chapter"


def test_every_topic_module_of_the_library_is_on_the_map(rows):
    named = {resolve(path) for paths in rows.values() for path in paths}
    modules = [
        path
        for role in ROLES_WITH_TOPICS
        for path in sorted((LIBRARY / role).glob("*.py"))
        if path.name != "__init__.py"
    ]
    assert modules
    unmapped = [str(path.relative_to(ROOT)) for path in modules if path not in named]
    assert not unmapped, f"library modules missing from the README's map: {unmapped}"


def test_each_topics_files_carry_its_name(rows):
    """`git ls-files | grep <topic>` finds the topic's chapter, exercise, solution and mistakes."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for topic in TOPICS:
        found = {path for path in tracked if topic in path}
        expected = {f"book/{topic}.md"}
        if f"exercises/{topic}.ipynb" in rows[topic]:
            expected |= {
                f"exercises/{topic}.ipynb",
                f"solutions/{topic}.ipynb",
                f"addnorm_lib/checks/{topic}.py",
                f"addnorm_lib/reference/mistakes/{topic}.py",
            }
        assert expected <= found, f"{topic}: {sorted(expected - found)} not found by name"


def test_the_map_check_fails_on_a_missing_file():
    section = "| topic | a |\n|---|---|\n| layernorm | `book/layernorm.md`, `checks/nope.py` |\n"
    rows = map_rows(section)
    assert rows == {"layernorm": ["book/layernorm.md", "checks/nope.py"]}
    assert not resolve("checks/nope.py").is_file() and resolve("book/layernorm.md").is_file()
