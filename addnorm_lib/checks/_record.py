"""Observations as files: how a graded kernel hands what the learner's code did to the grader.

When the environment variable ``ADDNORM_OBSERVATIONS`` names a folder, a check only *observes*
(runs the learner's code and records plain data) and writes ``<check>-seed<seed>.npz`` there;
the grader *judges* the file in its own process, where the learner's code never ran. The format is
numpy's ``.npz`` with a JSON description: reading it never unpickles anything.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from addnorm_lib.checks._core import Observation

OBSERVATIONS_ENV = "ADDNORM_OBSERVATIONS"
MAX_FILE_BYTES = 64 * 2**20  # an observation file is a few kB; anything huge is not ours


def observation_path(folder, check_name: str, seed: int) -> Path:
    """The file of one check's observations: ``<folder>/<check_name>-seed<seed>.npz``."""
    return Path(folder) / f"{check_name}-seed{int(seed)}.npz"


def _encode(value, arrays: dict):
    if isinstance(value, np.ndarray):
        key = f"a{len(arrays)}"
        arrays[key] = value
        return {"array": key}
    if isinstance(value, Observation):
        return {
            "observation": {
                "value": _encode(value.value, arrays),
                "type_name": value.type_name,
                "error": value.error,
                "not_implemented": value.not_implemented,
                "mutated": list(value.mutated),
            }
        }
    if isinstance(value, dict):
        return {"dict": {str(k): _encode(v, arrays) for k, v in value.items()}}
    if isinstance(value, list | tuple):
        return {"list": [_encode(v, arrays) for v in value]}
    if value is None or isinstance(value, str | bool | int | float):
        return {"json": value}
    raise TypeError(f"cannot record a {type(value).__name__}")


def _decode(node, arrays):
    ((kind, content),) = node.items()
    if kind == "array":
        return arrays[content]
    if kind == "observation":
        return Observation(
            _decode(content["value"], arrays),
            str(content["type_name"]),
            content["error"],
            bool(content["not_implemented"]),
            tuple(content["mutated"]),
        )
    if kind == "dict":
        return {k: _decode(v, arrays) for k, v in content.items()}
    if kind == "list":
        return [_decode(v, arrays) for v in content]
    if kind == "json":
        return content
    raise ValueError(f"unknown node {kind!r}")


def save(path: Path, observations) -> None:
    """Write ``observations`` (plain data: see :class:`Observation`) to ``path`` as ``.npz``."""
    arrays: dict = {}
    meta = json.dumps(_encode(observations, arrays))
    with open(path, "wb") as file:
        np.savez(file, __meta__=np.array(meta), **arrays)


def load(path: Path):
    """Read an observation file written by :func:`save`; never unpickles (allow_pickle=False)."""
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"{path.name} is larger than {MAX_FILE_BYTES} bytes")
    with np.load(path, allow_pickle=False) as archive:
        meta = json.loads(str(archive["__meta__"]))
        arrays = {key: archive[key] for key in archive.files if key != "__meta__"}
    return _decode(meta, arrays)


def run_check(check_name: str, observe, judge, target, seed: int) -> None:
    """Observe ``target``; then judge here (a learner's self-check) or record for the grader.

    ``observe(target, seed)`` returns plain observations; ``judge(observations, seed)`` raises
    CheckFailed or returns the summary printed for the learner.
    """
    __tracebackhide__ = True
    observations = observe(target, seed)
    folder = os.environ.get(OBSERVATIONS_ENV)
    if folder:
        save(observation_path(folder, check_name, seed), observations)
        print(f"{check_name}: recorded for grading")
        return
    print(judge(observations, seed))
