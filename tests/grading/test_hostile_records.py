"""Records as hostile input: the kernel that writes them runs the student's code.

Each test writes record files as a hostile kernel could (forged with the checks' own observers
and ``_record.save``, or built byte by byte) into an observations folder, then judges them as the
grader does (``judge.judge``). None may earn a point it should not, none may take the grader
down, and the messages may say nothing about the grader's files.

:data:`JUDGES` stands in for a judge with a bug that a record can trigger (it runs, or allocates,
without end): the loader's limits leave no such record for the real judges, so the worker's
limits are tested on these.
"""

import dataclasses
import io
import json
import os
import signal
import struct
import time
import types
import zipfile
import zlib

import numpy as np
import pytest
import torch

from addnorm_lib import checks
from addnorm_lib.checks import _record as record
from addnorm_lib.checks import batchnorm, layernorm, rmsnorm
from addnorm_lib.checks._core import Observation
from addnorm_lib.grading import _nbval_grades, judge
from addnorm_lib.grading.cell_record import CellRecord
from addnorm_lib.reference import modules, norms
from tests.grading.conftest import FORWARD
from tests.grading.test_judge import by_id, records_for

BACKWARD, MODULE = "test_layer_norm_backward", "test_layer_norm_module"
SEEDS = (0, 2024)


def save(folder, check, seed, observations):
    record.save(record.observation_path(folder, check, seed), observations)


def record_module(folder, cls=modules.LayerNorm, tamper=None):
    """Both seeds of the LayerNorm module check, observed on ``cls``, edited by ``tamper``."""
    for seed in SEEDS:
        observations = layernorm.observe_layer_norm_module(cls, seed)
        if tamper is not None:
            tamper(observations)
        save(folder, "check_layer_norm_module", seed, observations)


def record_forward(folder, layer_norm=norms.layer_norm):
    for seed in SEEDS:
        save(folder, "check_layer_norm", seed, layernorm.observe_layer_norm(layer_norm, seed))


def graded(assignment, folder):
    return by_id(judge.judge(assignment, records_for(assignment), folder, 60))


def assert_unusable(cell, reason=None):
    assert cell.points == 0 and cell.status == "failed", cell
    assert "the recorded result is unusable" in cell.message, cell.message
    if reason is not None:
        assert f"unusable ({reason})" in cell.message, cell.message


# ----------------------------------------------------------------------------------------------
# The judge requires exactly what it expects, derived from the reference, not from the record


class DetachedWeight(modules.LayerNorm):
    """Right outputs, but no gradient reaches weight or bias (they are detached)."""

    def forward(self, x):
        detached = [None if p is None else p.detach() for p in (self.weight, self.bias)]
        return modules.layer_norm(x, self.normalized_shape, *detached, self.eps)


def test_the_wrong_gradients_fail_when_recorded_honestly(assignment, tmp_path):
    record_module(tmp_path, DetachedWeight)
    cell = graded(assignment, tmp_path)[MODULE]
    assert cell.points == 0 and "No gradient reached LayerNorm's weight" in cell.message


@pytest.mark.parametrize("kept", [(), ("input",)], ids=["an empty dict", "the input's only"])
def test_gradients_left_out_check_nothing_and_earn_nothing(assignment, tmp_path, kept):
    def leave_out(observations):
        gradients = observations["gradients"].value
        observations["gradients"].value = {key: gradients[key] for key in kept}

    record_module(tmp_path, DetachedWeight, leave_out)
    assert_unusable(graded(assignment, tmp_path)[MODULE], "malformed record")


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda o: o["describe:default"].value.update(note="hi"), id="an extra key"),
        pytest.param(lambda o: o.pop("round_trip"), id="an observation left out"),
        pytest.param(lambda o: o.update(extra=o["round_trip"]), id="an extra observation"),
        pytest.param(
            lambda o: o["describe:default"].value.update(is_module="yes"), id="a str for a bool"
        ),
        pytest.param(
            lambda o: o["describe:default"].value.update(subclasses_torch=0), id="an int for a bool"
        ),
        pytest.param(
            lambda o: o["describe:default"].value["state"].update(weight=[5.0], bias=[5.0]),
            id="float shapes",
        ),
        pytest.param(
            lambda o: o["gradients"].value.update(extra=np.zeros(3)), id="an extra gradient"
        ),
        pytest.param(
            lambda o: o["gradients"].value.update(bias=o["gradients"].value["bias"].tolist()),
            id="a list for a gradient",
        ),
    ],
)
def test_a_module_record_must_have_the_structure_the_judge_expects(assignment, tmp_path, tamper):
    record_module(tmp_path, tamper=tamper)
    cell = graded(assignment, tmp_path)[MODULE]
    assert cell.points == 0, cell.message
    assert "unusable" in cell.message or "incomplete" in cell.message, cell.message


@pytest.mark.parametrize("change", [-1, 1], ids=["fewer", "more"])
def test_observations_must_be_one_per_case(assignment, tmp_path, change):
    for seed in SEEDS:
        observations = layernorm.observe_layer_norm(norms.layer_norm, seed)
        observations = observations[:change] if change < 0 else observations + observations[:1]
        save(tmp_path, "check_layer_norm", seed, observations)
    cell = graded(assignment, tmp_path)[FORWARD]
    assert cell.points == 0 and "incomplete" in cell.message, cell.message


def test_a_record_of_another_kind_is_unusable_not_an_error(assignment, tmp_path):
    for seed in SEEDS:  # a module's observations where a function's are expected
        save(tmp_path, "check_layer_norm", seed, {"a": Observation(value=1)})
    assert_unusable(graded(assignment, tmp_path)[FORWARD])


# ----------------------------------------------------------------------------------------------
# Self-reports: judged in the judge where it can, else never a source of points


def test_a_patched_comparison_in_the_kernel_cannot_hide_an_in_place_change(
    assignment, tmp_path, monkeypatch
):
    def in_place(x, gamma, beta, eps=1e-5):
        y = norms.layer_norm(x, gamma, beta, eps)
        x -= x.mean(axis=-1, keepdims=True)
        return y

    # what the kernel's code can do before the check observes it
    monkeypatch.setattr(np, "array_equal", lambda *args, **kwargs: True)
    for seed in SEEDS:
        save(tmp_path, "check_layer_norm", seed, layernorm.observe_layer_norm(in_place, seed))
    monkeypatch.undo()
    cell = graded(assignment, tmp_path)[FORWARD]
    assert cell.points == 0 and "modified its argument `x` in place" in cell.message


def test_a_claimed_round_trip_without_the_state_earns_nothing(assignment, tmp_path):
    def claimed(observations):
        observations["round_trip"] = Observation(value=True, type_name="bool")

    record_module(tmp_path, tamper=claimed)
    assert_unusable(graded(assignment, tmp_path)[MODULE], "malformed record")


def test_a_state_dict_that_torch_refuses_fails_in_the_judge():
    def extra_key(observations):
        state = observations["round_trip"].value
        state["running_scale"] = np.ones(3)

    observations = layernorm.observe_layer_norm_module(modules.LayerNorm, 0)
    extra_key(observations)
    with pytest.raises(checks.CheckFailed, match=r"torch\.nn\.LayerNorm could not load"):
        layernorm.judge_layer_norm_module(observations, 0)


class Float32RMSNorm(modules.RMSNorm):
    """Computes half-precision input in float32, but forgets to cast the result back."""

    def forward(self, x):
        if x.dtype not in (torch.float16, torch.bfloat16):
            return super().forward(x)
        weight = None if self.weight is None else self.weight.float()
        return modules.rms_norm(x.float(), self.normalized_shape, weight, self.eps)


def test_a_claimed_dtype_that_the_values_contradict_is_unusable(tmp_path):
    observations = rmsnorm.observe_rms_norm_module(Float32RMSNorm, 0)
    assert observations["half:float16_large"].value["dtype"] == "float32"  # recorded honestly
    with pytest.raises(checks.CheckFailed, match="dtype float32, but the input was float16"):
        rmsnorm.judge_rms_norm_module(observations, 0)
    for name in rmsnorm.HALF_INPUTS:  # the kernel claims what the judge wants to read
        observations[f"half:{name}"].value["dtype"] = rmsnorm.HALF_INPUTS[name][0]
    path = record.observation_path(tmp_path, "check_rms_norm_module", 0)
    record.save(path, observations)
    with pytest.raises(Exception) as raised:  # before: accepted, no exception
        rmsnorm.judge_rms_norm_module(record.load(path), 0)
    assert type(raised.value).__name__ == "RecordMalformed"


class SubclassesTorch(torch.nn.LayerNorm):
    """torch's own LayerNorm: every output right, the point of the exercise missed."""


def test_what_only_the_kernel_can_know_is_named_unverified(assignment, tmp_path):
    def forged(observations):  # what a kernel that patches isinstance would record
        for key, observation in observations.items():
            if key.startswith("describe:"):
                observation.value["subclasses_torch"] = False

    for seed in SEEDS:  # torch's norm functions were not forbidden either
        observations = layernorm.observe_layer_norm_module(SubclassesTorch, seed, False)
        forged(observations)
        save(tmp_path, "check_layer_norm_module", seed, observations)
    cell = graded(assignment, tmp_path)[MODULE]
    # the outputs are right, so the points stand; the claim is shown for what it is, in words
    # that do not read as a deduction
    assert cell.status == "passed" and cell.points == cell.max_points
    assert cell.message.startswith("Passed: full points.")
    assert "cannot check" in cell.message and "earns no points" not in cell.message
    assert "not torch.nn.LayerNorm" in cell.message and "built-in norm functions" in cell.message


def test_a_self_incriminating_report_still_fails(assignment, tmp_path):
    record_module(tmp_path, SubclassesTorch)
    cell = graded(assignment, tmp_path)[MODULE]
    assert cell.points == 0 and "subclasses torch.nn.LayerNorm" in cell.message


def test_every_check_with_unverified_claims_is_listed():
    """What only the kernel can say (a module's class, its buffers, an initializer's Parameter
    objects, whether arrays returned are the ones passed in) is listed, so that it can fail a
    cell and never earn one."""
    assert set(checks.UNVERIFIED) == {
        "check_batch_norm",
        "check_layer_norm_module",
        "check_rms_norm_module",
        "check_batch_norm_module",
        "check_deepnorm_init",
    }
    assert set(checks.UNVERIFIED) <= set(checks.JUDGES)
    assert batchnorm.UNVERIFIED["check_batch_norm_module"]


# ----------------------------------------------------------------------------------------------
# Archives: sizes and dtypes from the headers, before reading


def npy_header(dtype: str, shape: tuple) -> bytes:
    """An .npy version 1.0 header declaring ``dtype`` and ``shape``."""
    text = f"{{'descr': {dtype!r}, 'fortran_order': False, 'shape': {shape!r}, }}"
    text += " " * (-(len(text) + 11) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1")


def meta(description) -> bytes:
    """The ``__meta__.npy`` of a record holding ``description``."""
    buffer = io.BytesIO()
    np.save(buffer, np.array(json.dumps(description)))
    return buffer.getvalue()


# the description of a record of one observation whose value is the array a0
ONE_ARRAY = {
    "list": [
        {
            "observation": {
                "value": {"array": "a0"},
                "type_name": "ndarray",
                "error": None,
                "not_implemented": False,
                "inputs": {"list": []},
            }
        }
    ]
}


def deflated(size: int) -> bytes:
    """A raw deflate stream of ``size`` zero bytes (about a thousandth of it)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = bytes(2**20)
    parts = [
        compressor.compress(chunk[: min(2**20, size - done)]) for done in range(0, size, 2**20)
    ]
    return b"".join([*parts, compressor.flush()])


def archive(header: bytes, declared: int, data: bytes, crc: int) -> bytes:
    """A record's zip: ``__meta__.npy`` (:data:`ONE_ARRAY`), then ``a0.npy`` made by hand.

    a0's entry holds ``header`` then the raw deflate stream ``data``, and claims in both of its
    headers an uncompressed size of ``declared`` bytes (header included) and a CRC of ``crc``.
    """
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as honest:
        honest.writestr("__meta__.npy", meta(ONE_ARRAY))
    written = buffer.getvalue()
    central_at, end_at = written.index(b"PK\x01\x02"), written.index(b"PK\x05\x06")
    local, central = written[:central_at], written[central_at:end_at]
    header_part = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = header_part.compress(header) + header_part.flush(zlib.Z_FULL_FLUSH) + data
    name, offset, size = b"a0.npy", len(local), min(declared, 0xFFFFFFFF)
    # version, flags, method (deflate), time, date, crc, sizes, name length, extra length
    fields = (20, 0, 8, 0, 0, crc, len(body), size, len(name), 0)
    local += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", *fields) + name + body
    # version made by, then as above, then comment length, disk, attributes, local offset
    fields = (20, *fields, 0, 0, 0, 0, offset)
    central += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", *fields) + name
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 2, 2, len(central), len(local), 0)
    return local + central + end


def judged_forward(assignment, tmp_path, data: bytes):
    """The forward cell, judged with ``data`` as the record of check_layer_norm(seed=0)."""
    record_forward(tmp_path)
    record.observation_path(tmp_path, "check_layer_norm", 0).write_bytes(data)
    return graded(assignment, tmp_path)[FORWARD]


def test_a_tiny_archive_that_declares_gigabytes_is_refused_before_reading(assignment, tmp_path):
    header = npy_header("<f8", (2**31,))  # 16 GiB declared; a few kB there
    data = archive(header, len(header) + 2**34, deflated(2**16), 0)
    assert len(data) < 4096
    assert_unusable(judged_forward(assignment, tmp_path, data), "too large")


def test_an_array_header_that_declares_more_than_its_entry_is_refused(assignment, tmp_path):
    header = npy_header("<f8", (2**31,))  # 16 GiB in the array's header, 32 bytes in the zip's
    data = archive(
        header, len(header) + 32, deflated(32), zlib.crc32(bytes(32), zlib.crc32(header))
    )
    assert_unusable(judged_forward(assignment, tmp_path, data), "malformed archive")


def test_an_archive_that_expands_to_a_gigabyte_is_refused_before_reading(assignment, tmp_path):
    header = npy_header("<f8", (2**27,))  # 1 GiB, really there: about 1 MB compressed
    data = archive(header, len(header) + 2**30, deflated(2**30), 0)
    assert len(data) < 2 * 2**20
    assert_unusable(judged_forward(assignment, tmp_path, data), "too large")


def test_an_entry_that_declares_little_yields_no_more(assignment, tmp_path):
    """zipfile stops at the declared size: the rest of a stream that expands further is unread."""
    header = npy_header("<f8", (4,))
    crc = zlib.crc32(bytes(32), zlib.crc32(header))
    data = archive(header, len(header) + 32, deflated(2**30), crc)
    start = time.monotonic()
    cell = judged_forward(assignment, tmp_path, data)  # read: 4 zeros, one observation
    assert cell.points == 0 and "incomplete" in cell.message, cell.message
    assert time.monotonic() - start < 20


@pytest.mark.parametrize("key", ["a0", "__meta__"])
def test_object_arrays_are_refused_unread(assignment, tmp_path, key):
    buffer = io.BytesIO()
    arrays = {"__meta__": np.array(json.dumps(ONE_ARRAY)), "a0": np.zeros(3)}
    arrays[key] = np.array([{"pickled": True}, None], dtype=object)
    np.savez(buffer, **arrays)
    cell = judged_forward(assignment, tmp_path, buffer.getvalue())
    assert_unusable(cell, "unsupported array type")


def test_an_honest_record_reads_back_as_written(tmp_path):
    observations = layernorm.observe_layer_norm(norms.layer_norm, 0)
    path = record.observation_path(tmp_path, "check_layer_norm", 0)
    record.save(path, observations)
    loaded = record.load(path)
    assert [o.type_name for o in loaded] == [o.type_name for o in observations]
    for mine, theirs in zip(loaded, observations, strict=True):
        np.testing.assert_array_equal(mine.value, theirs.value)
        assert all(np.array_equal(a, b) for a, b in zip(mine.inputs, theirs.inputs, strict=True))


# ----------------------------------------------------------------------------------------------
# Only regular files, never followed links


@pytest.mark.parametrize("target", ["/etc/shadow", "/no/such/file"])
def test_a_linked_record_is_refused_whatever_it_points_to(assignment, tmp_path, target):
    record_forward(tmp_path)
    path = record.observation_path(tmp_path, "check_layer_norm", 0)
    path.unlink()
    path.symlink_to(target)
    cell = graded(assignment, tmp_path)[FORWARD]
    assert cell.message == (
        "check_layer_norm(seed=0): the recorded result is unusable (not a regular file)."
    )


def test_a_linked_observations_folder_is_refused(assignment, tmp_path):
    (tmp_path / "real").mkdir()
    record_forward(tmp_path / "real")
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    assert_unusable(graded(assignment, tmp_path / "linked")[FORWARD], "not a regular file")


def test_a_fifo_is_not_a_record(assignment, tmp_path):
    record_forward(tmp_path)
    fifo = record.observation_path(tmp_path, "check_layer_norm", 0)
    fifo.unlink()
    os.mkfifo(fifo)  # opening it to read would wait for a writer
    assert_unusable(graded(assignment, tmp_path)[FORWARD], "not a regular file")


def test_a_file_with_a_second_link_is_not_a_record(assignment, tmp_path):
    """A hard link could be to a file of the grader's: it is refused, whatever it holds."""
    record_forward(tmp_path)
    path = record.observation_path(tmp_path, "check_layer_norm", 0)
    os.link(path, tmp_path / "elsewhere.npz")
    assert_unusable(graded(assignment, tmp_path)[FORWARD], "not a regular file")


# ----------------------------------------------------------------------------------------------
# The worker's limits: a judge that runs, or allocates, without end costs its cell only


def hostile_judge(observations, seed):
    """Does what the record's first observation's error says: spin, hog, crash; else passes."""
    order = observations[0].error
    if order == "spin":
        while True:
            pass
    if order == "hog":
        hog = [bytearray(2**28) for _ in range(64)]  # 16 GiB, 256 MiB at a time
        return str(len(hog))
    if order == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    return "passed"


JUDGES = {**checks.JUDGES, "check_layer_norm": hostile_judge}
UNVERIFIED: dict = {}  # the worker names no unverified claims for these stand-ins


def order(folder, check, seed, what):
    save(folder, check, seed, [Observation(error=what)])


@pytest.fixture
def hostile_judges(monkeypatch):
    monkeypatch.setattr(judge, "JUDGES_MODULE", __name__, raising=False)
    monkeypatch.setattr(judge, "JUDGE_CHECK_SECONDS", 2, raising=False)
    monkeypatch.setattr(judge, "JUDGE_MEMORY_MB", 512, raising=False)


@pytest.mark.parametrize(
    ("what", "message"),
    [
        ("spin", "took longer than 2 s and was stopped"),
        ("hog", "needed more than the judge's 512 MiB of memory"),
        ("crash", "was stopped at the judge's limits"),
    ],
)
def test_a_judge_that_blows_up_costs_its_cell_only(
    assignment, tmp_path, hostile_judges, what, message
):
    order(tmp_path, "check_layer_norm", 0, what)
    order(tmp_path, "check_layer_norm", 2024, "pass")
    for seed in SEEDS:
        observations = layernorm.observe_layer_norm_backward(norms.layer_norm_backward, seed)
        save(tmp_path, "check_layer_norm_backward", seed, observations)
    record_module(tmp_path)
    start = time.monotonic()
    cells = graded(assignment, tmp_path)
    assert cells[FORWARD].points == 0 and message in cells[FORWARD].message
    assert cells[FORWARD].message.startswith("check_layer_norm(seed=0): ")
    assert cells[BACKWARD].status == "passed", cells[BACKWARD].message  # judged after it
    assert cells[MODULE].status == "passed", cells[MODULE].message
    assert time.monotonic() - start < 30


def test_after_a_blow_up_a_new_worker_judges_the_rest(tmp_path, hostile_judges):
    order(tmp_path, "check_layer_norm", 0, "crash")
    order(tmp_path, "check_layer_norm", 1, "pass")
    order(tmp_path, "check_layer_norm", 2, "spin")
    order(tmp_path, "check_layer_norm", 3, "pass")
    verdicts = judge.judge_records([("check_layer_norm", s) for s in range(4)], tmp_path)
    assert [verdicts[("check_layer_norm", s)].kind for s in range(4)] == [
        "stopped",
        "passed",
        "timeout",
        "passed",
    ]


# ----------------------------------------------------------------------------------------------
# Sealing the visible checks' records before the hidden tests run (_nbval_grades)


def test_sealing_copies_the_named_regular_records_only(tmp_path):
    """What the kernel does to its records once sealed (through a file it holds open, or a
    new file) leaves the sealed copies as they were; a link, a FIFO, a second hard link or a
    file over the cap is not copied (its check recorded no result)."""
    observations = tmp_path / "observations"
    observations.mkdir()
    names = [f"check_layer_norm-seed{seed}.npz" for seed in range(6)]
    honest = b"the kernel's record"
    for name in names[:2]:
        (observations / name).write_bytes(honest)
    (observations / names[2]).symlink_to(observations / names[0])
    os.mkfifo(observations / names[3])
    os.link(observations / names[1], tmp_path / "second-link")
    with open(observations / names[4], "wb") as big:
        big.truncate(record.MAX_RECORD_BYTES + 1)  # sparse: no disk used
    (observations / "check_other-seed0.npz").write_bytes(honest)  # not named
    held = open(observations / names[0], "r+b")  # noqa: SIM115 - held open past the seal
    sealed = tmp_path / "sealed"
    _nbval_grades.seal(observations, names, sealed)
    held.write(b"rewritten after the seal")
    held.close()
    (observations / names[5]).write_bytes(honest)  # written after the seal
    assert sorted(p.name for p in sealed.iterdir()) == [names[0]]
    assert (sealed / names[0]).read_bytes() == honest


def test_a_missing_or_linked_observations_folder_seals_nothing(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "check_layer_norm-seed0.npz").write_bytes(b"x")
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    for folder in ("linked", "missing"):
        _nbval_grades.seal(tmp_path / folder, ["check_layer_norm-seed0.npz"], tmp_path / folder[0])
        assert list((tmp_path / folder[0]).iterdir()) == []


def cell_record(code_index: int, grade_id: str | None = None, status="passed") -> CellRecord:
    """A record of the nbval plugin, as it keeps them while the notebook runs."""
    return CellRecord(code_index, None, grade_id, None, status, False, True)


def tail_item(grade_id: str) -> types.SimpleNamespace:
    """An nbval item of the hidden tail cell of ``grade_id``."""
    seal = ["check_layer_norm-seed0.npz"]
    metadata = {"addnorm": {"hidden_tests_of": grade_id, "seal": seal}}
    return types.SimpleNamespace(parent=types.SimpleNamespace(), cell={"metadata": metadata})


def test_the_plugin_seals_before_the_first_hidden_tail_cell(tmp_path):
    """The first tail cell's setup seals the records its metadata names and marks every record
    so far with the sealed folder; the tail cells' own records are not marked."""
    observations = tmp_path / "observations"
    observations.mkdir()
    (observations / "check_layer_norm-seed0.npz").write_bytes(b"visible")
    recorder = _nbval_grades.GradeRecorder(tmp_path / "private" / "grades.json", observations)
    (tmp_path / "private").mkdir()
    recorder.cells = [cell_record(0), cell_record(1, FORWARD)]
    visible = types.SimpleNamespace(parent=types.SimpleNamespace(), cell={"metadata": {}})
    recorder.pytest_runtest_setup(visible)
    assert recorder.sealed is None
    recorder.pytest_runtest_setup(tail_item(FORWARD))
    sealed = tmp_path / "private" / _nbval_grades.SEALED
    assert (sealed / "check_layer_norm-seed0.npz").read_bytes() == b"visible"
    assert [r.sealed for r in recorder.cells] == [str(sealed)] * 2
    recorder.cells.append(cell_record(2))
    recorder.pytest_runtest_setup(tail_item(FORWARD))
    assert recorder.cells[-1].sealed is None


@pytest.mark.parametrize("visible", ["failed", "timeout", "missing"])
def test_the_hidden_tests_of_a_failed_test_cell_are_not_run(tmp_path, visible):
    recorder = _nbval_grades.GradeRecorder(tmp_path / "grades.json", tmp_path / "observations")
    found = cell_record(1, FORWARD, "failed" if visible == "failed" else "passed")
    found = dataclasses.replace(found, timed_out=visible == "timeout")
    recorder.cells = [cell_record(0), *([found] if visible != "missing" else [])]
    with pytest.raises(pytest.skip.Exception, match="hidden tests are not run"):
        recorder.pytest_runtest_setup(tail_item(FORWARD))
