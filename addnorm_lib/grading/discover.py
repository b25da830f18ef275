"""Finding the submissions: every notebook under the given paths, each with an id of its own."""

import re
from pathlib import Path

UNSAFE_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]+")


def missing_paths(paths: list[Path]) -> list[Path]:
    """The given paths that do not exist."""
    return [path for path in paths if not path.exists()]


def notebooks_under(root: Path) -> list[tuple[str, Path]]:
    """(id, path) of a notebook given as a file, or of every notebook in a folder, recursively.

    A notebook found in a folder has its path relative to that folder as its id; Jupyter's
    checkpoint copies are left out.
    """
    if root.is_file():
        return [(root.name, root)]
    notebooks = [
        path for path in sorted(root.rglob("*.ipynb")) if ".ipynb_checkpoints" not in path.parts
    ]
    return [(path.relative_to(root).as_posix(), path) for path in notebooks]


def unique_ids(found: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """The same list, with ``~2``, ``~3``, ... appended to ids seen before."""
    seen, unique = set(), []
    for submission_id, path in found:
        candidate, n = submission_id, 1
        while candidate in seen:
            n += 1
            candidate = f"{submission_id}~{n}"
        seen.add(candidate)
        unique.append((candidate, path))
    return unique


def discover(paths: list[Path]) -> list[tuple[str, Path]]:
    """(unique submission id, path) of every notebook under the given paths."""
    return unique_ids([found for root in paths for found in notebooks_under(root)])


def safe_name(submission_id: str) -> str:
    """A flat file name for a submission's reports: no folders, nothing a shell would trip on."""
    return UNSAFE_CHARACTERS.sub("_", submission_id.replace("/", "__"))
