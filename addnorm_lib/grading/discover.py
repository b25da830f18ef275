"""Finding the submissions: every notebook under the given paths, each with an id of its own.

Symbolic links are never followed. A link, to a notebook or to a folder, found under a given
folder or given itself, is a submission of its own, which :func:`~.assemble.read_file` refuses:
it gets a row that says why, and nothing it points to is graded.
"""

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

UNSAFE_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]+")
# An id whose report name is itself, with "/" as "__": lower case (so that no two plain names are
# the same file on a case-insensitive disk), each part starting with a letter or digit, no "_"
# next to another or to a "/". Its "__" can then only have been a "/": no two plain ids collide.
PLAIN_PART = r"[a-z0-9][a-z0-9.-]*(?:_[a-z0-9.-]+)*"
PLAIN_ID = re.compile(rf"{PLAIN_PART}(?:/{PLAIN_PART})*")
NAME_LIMIT = 100  # characters of a report name, before the hash of an id that is not plain
HASH_LENGTH = 16  # hexadecimal digits of that hash
CHECKPOINTS = ".ipynb_checkpoints"


@dataclass(frozen=True)
class Submission:
    """A notebook to grade: its id (its path under the folder it was found in, unique in the
    run) and where it is. Once read (``pipeline.read``), it carries its bytes, or why they could
    not be read as a submission, so that a Dask worker on another machine grades it as is."""

    id: str
    path: Path
    raw: bytes | None = None  # the file's bytes, once read
    refused: tuple[str, str] | None = None  # (status, reason) when it could not be read


def missing_paths(paths: list[Path]) -> list[Path]:
    """The given paths that do not exist (a link counts as existing, wherever it points)."""
    return [path for path in paths if not os.path.lexists(path)]


def printable_id(relative: str) -> str:
    """A file's path as text that can be written anywhere: bytes that are not UTF-8 as ``\\xe9``."""
    return os.fsencode(relative).decode("utf-8", "backslashreplace")


def notebooks_under(root: Path) -> list[tuple[str, Path]]:
    """(id, path) of a notebook given as a file, or of every notebook in a folder, recursively.

    A notebook found in a folder has its path relative to that folder as its id; Jupyter's
    checkpoint copies are left out. Links are listed, never followed: a link given as ``root``
    is one submission, and so is each link to a notebook or to a folder found in a folder.
    """
    if root.is_symlink() or not root.is_dir():
        return [(printable_id(root.name), root)]
    found = []
    for folder, subfolders, files in os.walk(root):  # never into a linked folder
        here = Path(folder)
        found += [here / name for name in subfolders if (here / name).is_symlink()]
        subfolders[:] = [name for name in subfolders if name != CHECKPOINTS]
        found += [here / name for name in files if name.endswith(".ipynb")]
    notebooks = sorted(path for path in found if path.name != CHECKPOINTS)
    return [(printable_id(path.relative_to(root).as_posix()), path) for path in notebooks]


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


def discover(paths: list[Path]) -> list[Submission]:
    """Every notebook under the given paths, each with a unique id, not yet read."""
    found = unique_ids([found for root in paths for found in notebooks_under(root)])
    return [Submission(submission_id, path) for submission_id, path in found]


def safe_name(submission_id: str) -> str:
    """A flat file name for a submission's reports: its own, and the same in every run.

    A plain id (lower-case letters, digits, ``.``, ``-``, single ``_``, and ``/`` between parts)
    keeps a readable name, with ``/`` as ``__``: ``ada/hw.ipynb`` is ``ada__hw.ipynb``. Any other
    id gets its cleaned, shortened name and, after a ``~`` that no plain name has, a hash of the
    whole id: ``a b.ipynb`` and ``a_b.ipynb`` never share a feedback page or a record. Names are at
    most 117 characters, of ``A-Za-z0-9._~-`` only, and never start with ``-`` or ``.``.
    """
    flat = submission_id.replace("/", "__")
    if len(flat) <= NAME_LIMIT and PLAIN_ID.fullmatch(submission_id):
        return flat
    cleaned = UNSAFE_CHARACTERS.sub("_", flat)[:NAME_LIMIT].lstrip("-.") or "_"
    digest = hashlib.sha256(submission_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{cleaned}~{digest[:HASH_LENGTH]}"
