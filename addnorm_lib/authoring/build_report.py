"""How long each chapter took to execute in a book build, read from the execution cache.

``make book`` ends with this table. Jupyter Book 1 keeps every executed notebook in
``_build/.jupyter_cache`` with its execution time; a chapter whose code did not change since the
last build is taken from the cache and not executed again. The table says which is which:

    python -m addnorm_lib.authoring.build_report [--cache _build/.jupyter_cache]
        [--since EPOCH_SECONDS]

``--since`` is when the build started: chapters executed after it are this build's.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

DEFAULT_CACHE = Path("_build") / ".jupyter_cache"


@dataclass(frozen=True)
class ChapterTime:
    """One cached notebook: its source file, execution time, and whether this build executed it."""

    name: str  # the source path relative to the book, e.g. "book/layernorm.md"
    seconds: float
    executed_now: bool


def chapter_times(cache: Path, since: float | None = None, root: Path | None = None):
    """The newest execution of every notebook in the execution cache, slowest first.

    Args:
        cache: the ``.jupyter_cache`` folder of a build.
        since: the build's start (seconds since the epoch); records created after it were
            executed by this build. ``None`` counts every record as executed now.
        root: the book's folder, to shorten the names (default: the cache's grandparent).

    Returns:
        A list of :class:`ChapterTime`; empty if the cache does not exist.
    """
    if not cache.is_dir():
        return []
    from jupyter_cache import get_cache

    root = (root or cache.parent.parent).resolve()
    newest = {}  # name -> (created, row): the cache keeps older executions of a changed chapter
    for record in get_cache(str(cache)).list_cache_records():
        path = Path(record.uri)
        name = str(path.relative_to(root)) if path.is_relative_to(root) else path.name
        created = record.created.replace(tzinfo=UTC).timestamp()  # the cache stores naive UTC
        seconds = float((record.data or {}).get("execution_seconds", 0.0))
        row = ChapterTime(name, seconds, since is None or created >= since)
        if name not in newest or created > newest[name][0]:
            newest[name] = (created, row)
    return sorted((row for _, row in newest.values()), key=lambda row: -row.seconds)


def format_table(rows: list[ChapterTime]) -> str:
    """A plain-text table of chapter, seconds and status, with the total executed now."""
    if not rows:
        return "No executed chapters in the cache."
    width = max(len("chapter"), *(len(row.name) for row in rows))
    lines = [
        f"{'chapter':<{width}}  {'seconds':>8}  this build",
        f"{'-' * width}  {'-' * 8}  ----------",
    ]
    for row in rows:
        status = "executed" if row.executed_now else "from cache"
        lines.append(f"{row.name:<{width}}  {row.seconds:8.1f}  {status}")
    executed = [row for row in rows if row.executed_now]
    total = sum(row.seconds for row in executed)
    lines.append(
        f"{len(executed)} of {len(rows)} chapters executed in this build, {total:.1f} s in all"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the chapter table for ``--cache`` (and ``--since``); exit status 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--since", type=float, default=None, help="the build's start, epoch s")
    args = parser.parse_args(argv)
    print("Chapter execution times (from the execution cache):")
    print(format_table(chapter_times(args.cache, args.since)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
