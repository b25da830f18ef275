"""The execution cache: a rebuild executes only the chapters whose code changed.

A two-chapter book with the course's own _config.yml is built, one chapter is edited, and the book
is built again: the edited chapter executes, the other comes from the cache. ``make book`` prints
the same table (``addnorm_lib.authoring.build_report``) at the end of every build.
"""

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from addnorm_lib.authoring import build_report
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

JUPYTER_BOOK = Path(sys.executable).parent / "jupyter-book"
CHAPTER = """---
jupytext:
  text_representation:
    format_name: myst
kernelspec:
  name: python3
  display_name: Python 3
---
# Chapter {name}

```{{code-cell}} ipython3
print({value})
```
"""


# A kernel that dies before its first reply lost a race this test does not study: jupyter_client
# picks free TCP ports before the kernel binds them, and the parallel suite starts many kernels.
KERNEL_START_FAILED = "Kernel died before replying to kernel_info"


def build(book: Path) -> float:
    """Build ``book``; return the start time (seconds since the epoch). A build whose kernel
    died at start is built once more (the cache it left holds nothing executed)."""
    for attempt in (1, 2):
        start = time.time()
        completed = subprocess.run(
            [str(JUPYTER_BOOK), "build", str(book), "--builder", "html", "--warningiserror"],
            capture_output=True,
            text=True,
            check=False,
        )
        output = completed.stdout + completed.stderr
        if completed.returncode == 0 or KERNEL_START_FAILED not in output or attempt == 2:
            break
    assert completed.returncode == 0, first_error(output) + output[-3000:]
    return start


def first_error(output: str) -> str:
    """The build output from its first traceback on (2000 characters), where the cause is."""
    at = output.find("Traceback")
    return "" if at < 0 else output[at : at + 2000] + "\n...\n"


def executed(book: Path, since: float) -> dict[str, bool]:
    rows = build_report.chapter_times(book / "_build" / ".jupyter_cache", since)
    return {row.name: row.executed_now for row in rows}


def test_only_the_edited_chapter_executes_again(tmp_path):
    for name in ("_config.yml", "references.bib", "favicon.svg"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "_vendor").mkdir()  # the config's static folder (widget scripts; none needed here)
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: a\nchapters:\n  - file: b\n", encoding="utf-8"
    )
    (tmp_path / "a.md").write_text(CHAPTER.format(name="a", value=1), encoding="utf-8")
    (tmp_path / "b.md").write_text(CHAPTER.format(name="b", value=2), encoding="utf-8")
    first = build(tmp_path)
    assert executed(tmp_path, first) == {"a.md": True, "b.md": True}

    (tmp_path / "b.md").write_text(CHAPTER.format(name="b", value=3), encoding="utf-8")
    second = build(tmp_path)
    assert executed(tmp_path, second) == {"a.md": False, "b.md": True}
    table = build_report.format_table(
        build_report.chapter_times(tmp_path / "_build" / ".jupyter_cache", second)
    )
    assert "1 of 2 chapters executed in this build" in table
    assert "from cache" in table


def test_the_report_says_when_there_is_no_cache(tmp_path, capsys):
    assert build_report.main(["--cache", str(tmp_path / "missing")]) == 0
    assert "No executed chapters" in capsys.readouterr().out
