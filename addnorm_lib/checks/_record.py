"""Observations as files: how a graded kernel hands what the learner's code did to the grader.

When the environment variable ``ADDNORM_OBSERVATIONS`` names a folder, a check only *observes*
(runs the learner's code and records plain data) and writes ``<check>-seed<seed>.npz`` there;
the grader *judges* the file in its own process, where the learner's code never ran. The format is
numpy's ``.npz`` with a JSON description: reading it never unpickles anything.

The kernel that writes a record runs the learner's code, so :func:`load` reads a record as hostile
input: only a regular file, opened without following a link; every array's declared dtype, shape
and size checked in its header before a byte of it is read, within :data:`MAX_RECORD_BYTES` in
all; and a structure of exactly the kinds :func:`save` writes. Anything else raises
:class:`RecordRefused` with a reason that says nothing about what the file pointed to.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import stat
import zipfile
from pathlib import Path

import numpy as np

from addnorm_lib.checks._core import Observation

OBSERVATIONS_ENV = "ADDNORM_OBSERVATIONS"
# An honest record is at most a few tens of kB (the largest, the module checks', about 50 kB).
MAX_RECORD_BYTES = 32 * 2**20  # the file, and the arrays and description it declares, in all
MAX_DESCRIPTION_CHARS = 2**20  # the JSON description
MAX_ARRAYS = 1000
MAX_NODES = 100_000  # values in the description
MAX_DEPTH = 24  # nesting of the description
MAX_DIMENSIONS = 32
ARRAY_KINDS = "biufc"  # bool, integers, floats, complex: never objects, strings or records
META = "__meta__"
ARRAY_NAME = re.compile(r"a[0-9]{1,6}")
OBSERVATION_FIELDS = {"value", "type_name", "error", "not_implemented", "inputs"}


class RecordRefused(ValueError):
    """A record the grader does not read: the message is a neutral reason, safe to show."""


def observation_path(folder, check_name: str, seed: int) -> Path:
    """The file of one check's observations: ``<folder>/<check_name>-seed<seed>.npz``."""
    return Path(folder) / observation_name(check_name, seed)


def observation_name(check_name: str, seed: int) -> str:
    """The file name of one check's observations: ``<check_name>-seed<seed>.npz``."""
    return f"{check_name}-seed{int(seed)}.npz"


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
                "inputs": _encode(list(value.inputs), arrays),
            }
        }
    if isinstance(value, dict):
        return {"dict": {str(k): _encode(v, arrays) for k, v in value.items()}}
    if isinstance(value, list | tuple):
        return {"list": [_encode(v, arrays) for v in value]}
    if value is None or isinstance(value, str | bool | int | float):
        return {"json": value}
    raise TypeError(f"cannot record a {type(value).__name__}")


def save(path: Path, observations) -> None:
    """Write ``observations`` (plain data: see :class:`Observation`) to ``path`` as ``.npz``."""
    arrays: dict = {}
    meta = json.dumps(_encode(observations, arrays))
    with open(path, "wb") as file:
        np.savez(file, **{META: np.array(meta)}, **arrays)


# ----------------------------------------------------------------------------------------------
# Reading a record that hostile code may have written


def read_regular_file(name: str, folder_fd: int, limit: int = MAX_RECORD_BYTES) -> bytes:
    """The bytes of the regular file ``name`` in the open folder ``folder_fd``.

    Never follows a symbolic link (``O_NOFOLLOW``), never blocks on a FIFO, and refuses anything
    but a regular file with one link, or a file over ``limit`` bytes, with the same neutral
    reason whatever it pointed to. FileNotFoundError when there is no such name.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(name, flags, dir_fd=folder_fd)
    except FileNotFoundError:
        raise
    except OSError as err:  # ELOOP for a link, whatever its target; EACCES, ...
        raise RecordRefused("not a regular file") from err
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise RecordRefused("not a regular file")
        if info.st_size > limit:
            raise RecordRefused("too large")
        with os.fdopen(os.dup(fd), "rb") as file:
            data = file.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise RecordRefused("too large")
    return data


def open_folder(folder) -> int:
    """A descriptor of the folder ``folder`` itself (not of what a link there points to)."""
    return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _array_header(stream) -> tuple[np.dtype, tuple, bool, int]:
    """(dtype, shape, fortran_order, header length) of an .npy stream, read from its header."""
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version == (2, 0):
        shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise RecordRefused("unknown array format")
    return dtype, shape, fortran_order, stream.tell()


def _read_arrays(data: bytes) -> dict[str, np.ndarray]:
    """The arrays of an .npz archive, each checked in its header before it is read."""
    archive = zipfile.ZipFile(io.BytesIO(data))
    members = archive.infolist()
    names = [member.filename for member in members]
    if len(members) > MAX_ARRAYS + 1 or len(set(names)) != len(names):
        raise RecordRefused("malformed archive")
    if sum(member.file_size for member in members) > MAX_RECORD_BYTES:
        raise RecordRefused("too large")
    arrays = {}
    for member in members:
        key = member.filename.removesuffix(".npy")
        if not member.filename.endswith(".npy") or not (key == META or ARRAY_NAME.fullmatch(key)):
            raise RecordRefused("malformed archive")
        with archive.open(member) as stream:
            dtype, shape, fortran_order, header = _array_header(stream)
            kinds = "U" if key == META else ARRAY_KINDS
            if (
                dtype.hasobject
                or dtype.kind not in kinds
                or dtype.fields is not None
                or dtype.subdtype is not None
                or (key == META and shape != ())
                or len(shape) > MAX_DIMENSIONS
                or any(length < 0 for length in shape)
            ):
                raise RecordRefused("unsupported array type")
            size = math.prod(shape) * dtype.itemsize
            if header + size != member.file_size:  # what the header declares is what is there
                raise RecordRefused("malformed archive")
            if key == META and size > 4 * MAX_DESCRIPTION_CHARS:
                raise RecordRefused("too large")
            buffer = bytearray(stream.read(size))  # at most file_size: zipfile stops there
            if len(buffer) != size or stream.read(1):
                raise RecordRefused("malformed archive")
        array = np.frombuffer(buffer, dtype=dtype)
        arrays[key] = array.reshape(shape, order="F" if fortran_order else "C")
    if META not in arrays:
        raise RecordRefused("malformed archive")
    return arrays


class _Decoder:
    """Turns the JSON description back into observations, accepting only what :func:`save` writes.

    The top level is a list or a dict of observations; an observation's value and inputs hold
    plain data only; every array is used exactly once.
    """

    def __init__(self, arrays: dict):
        self.arrays = arrays
        self.used: set[str] = set()
        self.nodes = 0

    def node(self, node, depth: int) -> tuple[str, object]:
        self.nodes += 1
        if self.nodes > MAX_NODES or depth > MAX_DEPTH:
            raise RecordRefused("too large")
        if not isinstance(node, dict) or len(node) != 1:
            raise RecordRefused("malformed description")
        ((kind, content),) = node.items()
        return kind, content

    def top(self, node):
        kind, content = self.node(node, 0)
        if kind == "list" and isinstance(content, list):
            return [self.observation(item) for item in content]
        if kind == "dict" and isinstance(content, dict):
            return {key: self.observation(item) for key, item in content.items()}
        raise RecordRefused("malformed description")

    def observation(self, node) -> Observation:
        kind, content = self.node(node, 1)
        if kind != "observation" or not isinstance(content, dict):
            raise RecordRefused("malformed description")
        if set(content) != OBSERVATION_FIELDS:
            raise RecordRefused("malformed description")
        type_name, error = content["type_name"], content["error"]
        not_implemented = content["not_implemented"]
        if not isinstance(type_name, str) or len(type_name) > 200:
            raise RecordRefused("malformed description")
        if not (error is None or isinstance(error, str)) or not isinstance(not_implemented, bool):
            raise RecordRefused("malformed description")
        inputs = self.plain(content["inputs"], 2)
        if not isinstance(inputs, list) or not all(
            i is None or isinstance(i, np.ndarray) for i in inputs
        ):
            raise RecordRefused("malformed description")
        value = self.plain(content["value"], 2)
        return Observation(value, type_name, error, not_implemented, inputs)

    def plain(self, node, depth: int):
        kind, content = self.node(node, depth)
        if kind == "array" and isinstance(content, str) and content in self.arrays:
            if content in self.used or content == META:
                raise RecordRefused("malformed description")
            self.used.add(content)
            return self.arrays[content]
        if kind == "dict" and isinstance(content, dict):
            return {key: self.plain(item, depth + 1) for key, item in content.items()}
        if kind == "list" and isinstance(content, list):
            return [self.plain(item, depth + 1) for item in content]
        if kind == "json" and (content is None or isinstance(content, str | bool | int | float)):
            return content
        raise RecordRefused("malformed description")


def decode(meta: str, arrays: dict):
    """The observations that the JSON description ``meta`` and its ``arrays`` hold."""
    if len(meta) > MAX_DESCRIPTION_CHARS:
        raise RecordRefused("too large")
    try:
        description = json.loads(meta)
    except (ValueError, RecursionError) as err:
        raise RecordRefused("malformed description") from err
    decoder = _Decoder(arrays)
    observations = decoder.top(description)
    if decoder.used != set(arrays) - {META}:
        raise RecordRefused("malformed description")
    return observations


def load_from(folder_fd: int, name: str):
    """Read the record ``name`` in the open folder ``folder_fd`` (see :func:`load`)."""
    data = read_regular_file(name, folder_fd)
    try:
        arrays = _read_arrays(data)
    except (RecordRefused, MemoryError):
        raise
    except Exception as err:  # not a zip, a bad header, encrypted, a wrong CRC, ...
        raise RecordRefused("not a record") from err
    return decode(str(arrays[META][()]), arrays)


def load(path: Path):
    """Read an observation file written by :func:`save`, as hostile input; never unpickles.

    Raises FileNotFoundError if there is none, RecordRefused if it is not a record that
    :func:`save` could have written (a link, a FIFO, too large, an object array, ...).
    """
    path = Path(path)
    folder = open_folder(path.parent)
    try:
        return load_from(folder, path.name)
    finally:
        os.close(folder)


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
