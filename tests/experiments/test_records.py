"""The cached-run files: one writer, and every file it wrote reads back to the same text."""

import json

import pytest

from addnorm_lib.experiments.records import dumps_record, write_record
from tests.conftest import ROOT

WRITTEN_BY_RECORDS = [
    "batchnorm_lr_grid.json",
    "beyond_grid.json",
    "deepnorm_ablation_grid.json",
    "deepnorm_runs.json",
    "deepnorm_stacks_grid.json",
    "depth_ics_grid.json",
    "depth_revival_grid.json",
    "depth_shift_grid.json",
]


def test_a_record_is_its_settings_then_one_line_per_run(tmp_path):
    record = {"config": {"lr": 0.1, "steps": [1, 2]}, "command": "python -m x", "runs": []}
    record["runs"] = [{"seed": 0, "loss": [1.0, 0.5]}, {"seed": 1, "loss": [2.0, float("nan")]}]
    text = dumps_record(record)
    lines = text.splitlines()
    assert lines.count(' "runs": [') == 1
    start = lines.index(' "runs": [') + 1
    shown = [json.loads(line.rstrip(",")) for line in lines[start : start + 2]]
    assert shown[0] == record["runs"][0]
    assert shown[1]["seed"] == 1 and shown[1]["loss"][0] == 2.0
    assert json.loads(text)["config"] == record["config"]
    out = tmp_path / "deeper" / "grid.json"
    write_record(out, record)
    assert out.read_text(encoding="utf-8") == text


@pytest.mark.parametrize("name", WRITTEN_BY_RECORDS)
def test_each_cached_file_is_in_the_one_format(name):
    text = (ROOT / "book" / "data" / name).read_text(encoding="utf-8")
    assert dumps_record(json.loads(text)) == text
