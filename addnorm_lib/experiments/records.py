"""The files of cached training runs under ``book/data/``: one format, one writer.

A record is a dict whose ``"runs"`` entry lists one dict per run, beside its settings (config, the
command that regenerates it, the torch version). It is written as JSON with the settings indented
and one line per run, so that a diff of a regenerated file shows which runs changed.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["dumps_record", "write_record"]


def dumps_record(record: dict) -> str:
    """``record`` as JSON text: its settings indented, then its runs one per line."""
    head = json.dumps({k: v for k, v in record.items() if k != "runs"}, indent=1)
    runs = ",\n".join(json.dumps(run) for run in record["runs"])
    return head[:-2] + ',\n "runs": [\n' + runs + "\n ]\n}\n"


def write_record(path: Path, record: dict) -> None:
    """Write ``record`` (see :func:`dumps_record`) to ``path``, making its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_record(record), encoding="utf-8")
