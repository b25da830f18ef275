"""The learner kit: a reader of the web page downloads one archive and, with Python 3.11 and
nothing of the course's, installs it with one command and grades a notebook with one more.

The slow tests do exactly that: build the kit, unpack it outside the course, install it into a
fresh virtual environment with the README's command, and grade with the README's commands, from
the kit's folder, with no way to reach the course's files. They share one installation (xdist
group ``learner-kit``: one worker, in parallel with the rest of the suite).
"""

import os
import re
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from addnorm_lib.authoring import kit, release
from addnorm_lib.grading import assemble
from tests.conftest import BOOK_GROUP, ROOT

SLOW_KIT = [pytest.mark.slow, pytest.mark.xdist_group("learner-kit")]
WHEEL = "addnorm_lib-0.1.0-py3-none-any.whl"


def bash_blocks(markdown: str) -> list[str]:
    """The ```bash blocks of a Markdown text, in order."""
    return [block.rstrip("\n") for block in re.findall(r"```bash\n(.*?)```", markdown, re.S)]


def pins_of(requirements: str) -> dict[str, str]:
    return dict(
        line.split("==") for line in requirements.splitlines() if "==" in line and "#" not in line
    )


# ----------------------------------------------------------------------------------------------
# What goes into the kit (in process)


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("*.ipynb")), ids=lambda p: p.stem)
def test_the_graders_copy_is_the_exercise_plus_answer_markers(path):
    """The kit's grader notebooks give nothing away: no answer and no hidden test, only the
    released exercise with its answers' markers, which the grader needs."""
    solution = nbformat.read(path, as_version=4)
    graded = kit.grader_notebook(solution, path.name)
    exercise = release.release(solution, path.name)
    assert len(graded.cells) == len(exercise.cells)
    for mine, released in zip(graded.cells, exercise.cells, strict=True):
        markers = (release.SOLUTION_BEGIN, release.SOLUTION_END)
        lines = [line for line in mine.source.split("\n") if line.strip() not in markers]
        assert "\n".join(lines) == released.source
        assert release.HIDDEN_BEGIN not in mine.source
    assert graded.metadata == solution.metadata  # the assignment's name, the kernel


def visible_checks(assignment, test) -> tuple:
    """The checks a test cell of the course's assignment calls outside its hidden tests."""
    source = assignment.graded_base.cells[test.index].source
    return assemble.checks_called(release.strip_hidden_tests(source, "cell"), "cell")


def test_the_grader_grades_against_the_kits_copies_with_every_visible_test(tmp_path):
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        solution = nbformat.read(path, as_version=4)
        nbformat.write(kit.grader_notebook(solution, path.name), tmp_path / path.name)
    ours = assemble.load_assignments(tmp_path)
    course = assemble.load_assignments(ROOT / "solutions")
    assert ours.keys() == course.keys()
    for name, assignment in ours.items():
        tests = [(test.grade_id, test.points, test.checks) for test in assignment.tests]
        visible = [
            (test.grade_id, test.points, visible_checks(course[name], test))
            for test in course[name].tests
        ]
        assert tests == visible, name
        assert not any(test.hidden for test in assignment.tests)


def test_the_requirements_pin_what_a_learner_needs_and_nothing_of_the_books():
    requirements = kit.requirements_text(ROOT, WHEEL)
    course = kit.read_pins((ROOT / "requirements.txt").read_text())
    pins = pins_of(requirements)
    for name in ("torch", "numpy", "jupyterlab", "ipykernel", "nbval", "pytest", "jinja2"):
        assert name in pins, f"{name} is missing from the kit's requirements"
    for name in ("jupyter-book", "transformers", "hypothesis", "ruff", "sphinx", "matplotlib"):
        assert name not in pins, f"{name} is for the book or the tests, not for a learner"
    for name, version in pins.items():
        assert name in kit.PACKAGING_TOOLS or course.get(name) == version, name
    assert requirements.rstrip().endswith(f"./{WHEEL}")


def test_the_dependency_closure_follows_markers_and_extras():
    graph = {
        "app": ["lib[fast]", "win-only; sys_platform == 'win32'", "old; python_version < '3'"],
        "lib": ["base", "speedup; extra == 'fast'", "docs-tool; extra == 'docs'"],
        "base": [],
        "speedup": [],
    }
    closure = kit.dependency_closure(["app"], lambda name: graph[name])
    assert set(closure) == {"app", "lib", "base", "speedup"}
    assert closure["lib"] == {"", "fast"}


def test_an_unpinned_dependency_is_one_clear_error():
    with pytest.raises(kit.KitError, match="left-pad is needed by the kit but not pinned"):
        kit.pinned_requirements(["left-pad"], {}, lambda name: "1")


def test_the_page_links_the_kit_that_make_book_builds_and_prints_the_kits_commands():
    page = (ROOT / "book" / "exercises.md").read_text(encoding="utf-8")
    link = re.search(r"\{download\}`[^`<]*<([^>]*addnorm-kit\.zip)>`", page)
    assert link, "book/exercises.md does not offer the kit for download"
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    built = re.search(r"^KIT := (\S+)$", makefile, re.M).group(1)
    assert (ROOT / "book" / link.group(1)).resolve() == (ROOT / built).resolve()
    assert re.search(r"^book: .*\$\(KIT\)", makefile, re.M), "make book does not build the kit"
    assert re.search(r"^test: .*\$\(KIT\)", makefile, re.M), "the book's tests need the kit"
    assert bash_blocks(page)[-2:] == [kit.SETUP, kit.grade_command()]
    ignored = subprocess.run(["git", "check-ignore", "-q", built], cwd=ROOT, check=False)
    assert ignored.returncode == 0, f"{built} is built, not committed: .gitignore it"


def test_the_readme_prints_the_commands_a_learner_runs():
    readme = kit.readme_text(["layernorm"])
    assert bash_blocks(readme) == [kit.SETUP, kit.LAB, kit.grade_command()]
    assert "Python 3.11" in readme and "\n".join(kit.SETUP_WINDOWS) in readme
    assert all(len(line) <= 75 for block in bash_blocks(readme) for line in block.split("\n"))


def test_a_solution_cell_without_markers_stops_the_build_with_its_name():
    solution = nbformat.read(ROOT / "solutions" / "deepnorm.ipynb", as_version=4)
    answer = next(c for c in solution.cells if c.metadata.get("nbgrader", {}).get("solution"))
    answer.source = answer.source.replace(release.SOLUTION_BEGIN, "")
    with pytest.raises(release.ReleaseError, match=r"deepnorm\.ipynb, cell \d+"):
        kit.grader_notebook(solution, "deepnorm.ipynb")


# ----------------------------------------------------------------------------------------------
# The kit, built, installed and used as a learner would (slow)


def learner_environment(home: Path) -> dict[str, str]:
    """This machine's environment as a learner's shell has it: no virtual environment active,
    nothing of the course's on PATH or PYTHONPATH (pip's own settings, with the local torch
    wheel, stay)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("PYTHON", "VIRTUAL_ENV", "PYTEST", "ADDNORM", "JUPYTER"))
    }
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and ROOT not in Path(p).parents]
    env["PATH"] = os.pathsep.join(path)
    env["JUPYTER_CONFIG_DIR"] = str(home / ".jupyter")
    return env


def run(command: str, folder: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """``command`` in bash, in ``folder``, as printed (a backslash continues a line)."""
    return subprocess.run(
        ["bash", "-c", command],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def installed_kit(tmp_path_factory):
    """The kit built, unpacked outside the course and installed with the README's command:
    (its folder, the learner's environment, seconds each step took). The environment is
    removed afterwards."""
    if shutil.which("python3.11") is None:
        pytest.skip("the kit's install command needs python3.11 on PATH")
    base = tmp_path_factory.mktemp("learner")
    assert ROOT not in base.parents and base != ROOT
    seconds = {}
    start = time.monotonic()
    archive = kit.build_kit(base / "download")
    seconds["build"] = time.monotonic() - start
    with zipfile.ZipFile(archive) as unpacked:
        unpacked.extractall(base / "unpacked")
    folder = base / "unpacked" / kit.FOLDER
    env = learner_environment(base)
    setup = bash_blocks((folder / "README.md").read_text(encoding="utf-8"))[0]
    start = time.monotonic()
    done = run(setup, folder, env, timeout=600)
    seconds["install"] = time.monotonic() - start
    assert done.returncode == 0, f"{setup}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    yield folder, env, seconds
    # 1.2 GB in small files, which pytest would keep for three runs: removed in the background,
    # as deleting them takes half a minute on a busy machine.
    remove = ["rm", "-rf", "--", str(folder / ".venv")]
    subprocess.Popen(
        remove, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


@pytest.mark.slow
@pytest.mark.xdist_group("learner-kit")
def test_the_kit_installs_into_its_own_environment(installed_kit):
    folder, env, seconds = installed_kit
    where = run(
        ".venv/bin/python -c 'import addnorm_lib, sys; print(addnorm_lib.__file__)'",
        folder,
        env,
        timeout=60,
    )
    assert where.returncode == 0, where.stderr
    library = Path(where.stdout.strip()).resolve()
    assert (folder / ".venv").resolve() in library.parents, f"addnorm_lib came from {library}"
    assert ROOT not in library.parents
    print(f"kit: built in {seconds['build']:.1f} s, installed in {seconds['install']:.1f} s")


@pytest.mark.slow
@pytest.mark.xdist_group("learner-kit")
def test_everything_the_notebooks_import_is_installed(installed_kit):
    folder, env, _ = installed_kit
    modules = set()
    for path in sorted((folder / "exercises").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                modules.update(re.findall(r"^\s*(?:from|import) ([\w.]+)", cell.source, re.M))
    assert {"torch", "numpy", "addnorm_lib"} <= {m.split(".")[0] for m in modules}
    command = f".venv/bin/python -c 'import {', '.join(sorted(modules))}'"
    done = run(command, folder, env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lab = run(kit.LAB.replace(" exercises", " --version"), folder, env, timeout=120)
    assert lab.returncode == 0 and re.match(r"\d+\.\d+", lab.stdout), lab.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.xdist_group("learner-kit")
def test_the_readmes_grade_command_gives_the_untouched_exercise_nothing(installed_kit):
    folder, env, _ = installed_kit
    command = bash_blocks((folder / "README.md").read_text(encoding="utf-8"))[2]
    done = run(command, folder, env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "layernorm.ipynb: graded, 0/10" in done.stdout
    assert "not implemented yet" in done.stdout  # what to do, for each test
    assert "warning: no sandbox" in done.stderr  # as the README says
    assert (folder / "grades" / "feedback" / "layernorm.ipynb.html").is_file()


@pytest.mark.slow
@pytest.mark.xdist_group("learner-kit")
def test_a_solution_gets_every_point_with_the_command_each_notebook_prints(installed_kit):
    folder, env, _ = installed_kit
    if shutil.which("make", path=env["PATH"]) is None:
        pytest.skip("needs make")
    (folder / "mine").mkdir()
    shutil.copy(ROOT / "solutions" / "deepnorm.ipynb", folder / "mine" / "deepnorm.ipynb")
    points = assemble.load_assignments(ROOT / "solutions")["deepnorm"].max_total
    done = run("make grade NB=mine/deepnorm.ipynb", folder, env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"deepnorm.ipynb: graded, {points:g}/{points:g}" in done.stdout, done.stdout


@pytest.mark.slow
@pytest.mark.xdist_group("learner-kit")
def test_the_same_sources_give_the_same_archive(installed_kit, tmp_path):
    """A rebuild with nothing changed leaves the page's download as it was."""
    folder, _, _ = installed_kit
    first = folder.parents[1] / "download" / kit.ARCHIVE
    assert kit.build_kit(tmp_path).read_bytes() == first.read_bytes()
    with zipfile.ZipFile(first) as archive:
        names = archive.namelist()
    assert all(name.startswith(f"{kit.FOLDER}/") for name in names)
    assert f"{kit.FOLDER}/{WHEEL}" in names
    assert sorted(n for n in names if "/exercises/" in n) == [
        f"{kit.FOLDER}/exercises/{p.name}" for p in sorted((ROOT / "solutions").glob("*.ipynb"))
    ]


@BOOK_GROUP
def test_the_built_exercises_page_offers_the_kit(built_book):
    page = (built_book / "book" / "exercises.html").read_text(encoding="utf-8")
    link = re.search(r'href="([^"]*_downloads/[^"]*addnorm-kit\.zip)"', page)
    assert link, "book/exercises.html has no download link to the learner kit"
    with zipfile.ZipFile((built_book / "book" / link.group(1)).resolve()) as archive:
        assert f"{kit.FOLDER}/README.md" in archive.namelist()
