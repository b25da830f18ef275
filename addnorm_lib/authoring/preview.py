"""Build the book with only some pages taken from the working tree, the rest from the last commit.

An author editing one chapter wants to see it built (executed, cross-referenced, with Sphinx's
nitpicky warnings) without re-executing the chapters other authors are editing at the same time.
This copies the last commit into a folder of its own, lays the named pages (and the book's data,
bibliography and table of contents) from the working tree over it, seeds its execution cache from
the main build's, and builds it there. Unchanged chapters come from the cache:

    python -m addnorm_lib.authoring.preview book/depth.md book/depth-deeper.md

The HTML is in ``/tmp/addnorm-preview/<first page>/_build/html``. The chapters import the course's
library from the working tree (the editable install), as ``make book`` does.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Working-tree files every preview takes: what any page may read or link to.
#: The flags of ``make book``: a warning is an error, every reference must resolve.
STRICT = ["--warningiserror", "--nitpick", "--keep-going"]
SHARED = ["_toc.yml", "_config.yml", "references.bib", "book/data", "_vendor"]


def _export_head(dest: Path) -> None:
    """The last commit's files, written under ``dest``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")


def _overlay(dest: Path, relative: str) -> None:
    """Copy one file or folder of the working tree over the export."""
    source, target = ROOT / relative, dest / relative
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    elif source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def main(argv: list[str] | None = None) -> int:
    """Build a preview of the named pages; the exit status is the build's."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="+", help="pages to take from the working tree (book/x.md)")
    args = parser.parse_args(argv)
    missing = [page for page in args.pages if not (ROOT / page).is_file()]
    if missing:
        print(f"error: no such page: {', '.join(missing)}", file=sys.stderr)
        return 2
    dest = Path("/tmp/addnorm-preview") / Path(args.pages[0]).stem
    cache = dest / "_build" / ".jupyter_cache"
    if not cache.is_dir() and (ROOT / "_build" / ".jupyter_cache").is_dir():
        shutil.copytree(ROOT / "_build" / ".jupyter_cache", cache)
    for stale in ("_build/html", "_build/.doctrees", "_build/jupyter_execute"):
        shutil.rmtree(dest / stale, ignore_errors=True)
    _export_head(dest)
    for relative in [*SHARED, *args.pages]:
        _overlay(dest, relative)
    start = time.time()
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    build = subprocess.run([str(jupyter_book), "build", str(dest), "--builder", "html", *STRICT])
    print(f"Built in {time.time() - start:.0f} s: {dest / '_build' / 'html'}")
    return build.returncode


if __name__ == "__main__":
    raise SystemExit(main())
