"""What the executor says of one code cell it ran: the record that the judge decides points from.

Written by the executor (the grader's nbval plugin, ``_nbval_grades``, in the pytest process; the
suite's in-process executor, ``tests/inprocess.py``), read by ``execute`` and ``judge``. Between
processes it travels as JSON (:meth:`CellRecord.to_dict`, :func:`read_cell_records`), and is
checked field by field on the way in: nothing else is a cell record.

Kept light: the pytest process imports it, and so do graded kernels' neighbours.
"""

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Literal, get_args

# What the executor did with a cell: ran it and it passed or failed, skipped it on purpose (a
# hidden tail whose visible cell failed), or did not run it (nbval after a timeout).
CellStatus = Literal["passed", "failed", "skipped", "not_run"]
CELL_STATUSES: tuple[str, ...] = get_args(CellStatus)
# The metadata (under "addnorm") of a hidden tail cell (``assemble.hidden_tail``): the test cell
# whose hidden tests it holds, and the records to seal before it runs (the visible checks').
HIDDEN_OF = "hidden_tests_of"
SEAL = "seal"
RECORDS_LIMIT = 64 * 2**20  # bytes of a records file: more than this is not a file of ours


class CellRecordsRefused(ValueError):
    """A records file that does not hold cell records: what is wrong with it."""


@dataclass(frozen=True)
class CellRecord:
    """One code cell, as the executor ran it.

    ``code_index`` counts the graded notebook's code cells from 0 (as nbval does), which the
    judge maps back to cells; ``timed_out`` is the executor's own clock running out on the cell
    (never what the cell printed or raised); ``kernel_alive`` whether the kernel lived when the
    cell ended; ``report`` the executor's account of a failure (its last characters).
    """

    code_index: int
    id: str | None  # the cell's id, where the notebook has ids
    grade_id: str | None  # the cell's nbgrader grade_id, if it has one
    hidden_tests_of: str | None  # the test cell whose hidden tests it holds (a tail cell)
    status: CellStatus
    timed_out: bool
    kernel_alive: bool
    report: str = ""
    sealed: str | None = None  # where the visible checks' records were sealed, if they were
    observations: str | None = None  # the folder its checks recorded into, if not the run's

    def passed_in_time(self) -> bool:
        """Whether the cell ran, passed, and did not time out."""
        return self.status == "passed" and not self.timed_out

    def to_dict(self) -> dict:
        """The record as JSON-ready data."""
        return asdict(self)

    @staticmethod
    def from_dict(data) -> "CellRecord":
        """The record :meth:`to_dict` gave ``data`` for; raises :class:`CellRecordsRefused`
        unless every field is there with its type (and no other)."""
        if not isinstance(data, dict):
            raise CellRecordsRefused(f"a cell record is an object, not {type(data).__name__}")
        names = [field.name for field in fields(CellRecord)]
        if set(data) != set(names):
            raise CellRecordsRefused(f"a cell record has the fields {names}, not {sorted(data)}")
        if type(data["code_index"]) is not int or data["code_index"] < 0:
            raise CellRecordsRefused("code_index must be a whole number >= 0")
        for name in ("timed_out", "kernel_alive"):
            if type(data[name]) is not bool:
                raise CellRecordsRefused(f"{name} must be true or false")
        for name in ("id", "grade_id", "hidden_tests_of", "sealed", "observations"):
            if data[name] is not None and not isinstance(data[name], str):
                raise CellRecordsRefused(f"{name} must be text or null")
        if data["status"] not in CELL_STATUSES or not isinstance(data["report"], str):
            raise CellRecordsRefused(f"status must be one of {CELL_STATUSES}; report, text")
        return CellRecord(**data)


def write_cell_records(path: Path, records: list[CellRecord]) -> None:
    """Write ``records`` to ``path`` as JSON (``{"cells": [...]}``)."""
    with open(path, "w", encoding="utf-8") as file:
        json.dump({"cells": [found.to_dict() for found in records]}, file)


def read_cell_records(path: Path) -> list[CellRecord] | None:
    """The records an executor wrote to ``path``; None if it wrote none, or too much. Raises
    :class:`CellRecordsRefused` for a file that is not cell records."""
    if not path.exists() or path.stat().st_size > RECORDS_LIMIT:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise CellRecordsRefused(f"not JSON: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise CellRecordsRefused('a records file is {"cells": [...]}')
    return [CellRecord.from_dict(found) for found in data["cells"]]
