"""The cached calibration (testbed.experiment.calibration): used only on the machine, emulator
and data path it was measured with, and only while fresh."""

from __future__ import annotations

import json
import time

import pytest

from contracts import datapath
from testbed.experiment import calibration as cal


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(cal.CACHE_ENV, str(tmp_path / "calibration.json"))
    monkeypatch.setattr(datapath, "missing", lambda c: None)  # both extensions "built"
    monkeypatch.delenv(datapath.ENV, raising=False)
    return tmp_path / "calibration.json"


def test_a_fresh_calibration_of_this_machine_is_used(cache):
    cal.save_budget(12345.0, {"fabric": "2x2x2"})
    assert cal.load_budget() == (12345.0, "calibrated")


def test_each_data_path_has_its_own_calibration(cache, monkeypatch):
    cal.save_budget(12345.0, {})
    monkeypatch.setenv(datapath.ENV, "python")
    assert cal.load_budget() is None  # the compiled path's budget is not the Python path's
    cal.save_budget(999.0, {})
    assert cal.load_budget() == (999.0, "calibrated")
    monkeypatch.setenv(datapath.ENV, "c")
    assert cal.load_budget() == (12345.0, "calibrated")  # kept beside the other
    cal.save_budget(20000.0, {})  # a new one replaces its own data path's only
    assert cal.load_budget() == (20000.0, "calibrated")
    monkeypatch.setenv(datapath.ENV, "python")
    assert cal.load_budget() == (999.0, "calibrated")


def test_an_older_single_record_file_is_still_read(cache):
    cache.write_text(
        json.dumps(
            {"budget_hops_per_s": 777.0, "measured_at": time.time(), "machine": cal.machine()}
        )
    )
    assert cal.load_budget() == (777.0, "calibrated")


def test_an_old_or_foreign_or_broken_calibration_is_stale(cache, monkeypatch):
    cal.save_budget(12345.0, {})
    (record,) = json.loads(cache.read_text())["calibrations"]
    record["measured_at"] = time.time() - (cal.MAX_AGE_DAYS + 1) * 86400
    cache.write_text(json.dumps(record))
    assert cal.load_budget() is None
    record["measured_at"] = time.time()
    record["machine"]["emulator"] = cal.EMULATOR - 1
    cache.write_text(json.dumps(record))
    assert cal.load_budget() is None
    cache.write_text("{not json")
    assert cal.load_budget() is None
    record["machine"] = cal.machine()
    record["budget_hops_per_s"] = 0
    cache.write_text(json.dumps(record))
    assert cal.load_budget() is None
