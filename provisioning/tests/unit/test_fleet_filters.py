"""Controller-side filters: verify findings and the fio fleet report."""
import os

import pytest

import basalt_fleet as bf
from conftest import fixture


def test_findings_prefix_role_and_keep_order():
    variables = {"common_verify_drift": ["package gdb is not installed"], "clock_verify_drift": [],
                 "datadisk_verify_drift": ["/srv/basalt is not mounted"]}
    assert bf.basalt_findings(variables, ["common", "datadisk", "clock", "monitoring"], "drift") == [
        "common: package gdb is not installed", "datadisk: /srv/basalt is not mounted"]


def test_fio_summary_of_recorded_output():
    rows = bf.fio_summary(fixture("fio-randrw.json"))
    assert len(rows) == 1
    row = rows[0]
    assert row["job"] == "randrw-4k-qd32"
    assert row["read_iops"] > 0 and row["write_iops"] > 0
    assert row["read_p99_us"] > 0


def test_fio_summary_skips_notes_before_json_and_rejects_other_json():
    text = "fio: note: both iodepth >= 1 and synchronous I/O engine are selected\n" + fixture("fio-randrw.json")
    assert bf.fio_summary(text)[0]["job"] == "randrw-4k-qd32"
    with pytest.raises(ValueError):
        bf.fio_summary('{"devices": []}')
    with pytest.raises(ValueError):
        bf.fio_summary("fio: engine libaio not loadable")


def test_fleet_rows_sorted_and_spread(tmp_path):
    text = fixture("fio-randrw.json")
    for host in ("b", "a", "c"):
        os.makedirs(tmp_path / host)
        (tmp_path / host / "fio.json").write_text(text)
    results = bf.bench_read_results(str(tmp_path), ["b", "a", "c"], "fio.json")
    rows = bf.fio_fleet_rows(results)
    assert [r["host"] for r in rows] == ["a", "b", "c"]
    spread = bf.fleet_spread(rows, "read_iops")
    assert spread["min"] == spread["max"] == spread["median"] and spread["max_over_min"] == 1.0
    rows[0]["read_iops"] = 100.0
    rows[1]["read_iops"] = 200.0
    rows[2]["read_iops"] = 400.0
    assert bf.fleet_spread(rows, "read_iops") == {"min": 100.0, "median": 200.0, "max": 400.0, "max_over_min": 4.0}
    assert bf.fleet_spread([], "read_iops") is None


def _health(*devices):
    return {"devices": list(devices)}


def _dev(device, model, status, temp=35, used=3, reasons=()):
    return {"device": device, "model": model, "temperature_c": temp, "percentage_used": used,
            "status": status, "reasons": list(reasons)}


def test_health_rows_one_per_device_and_unknown_for_silent_hosts():
    hostvars = {
        "nuc-2": {"health_report": _health(_dev("/dev/nvme0", "Samsung SSD 970 EVO 500GB", "crit",
                                                reasons=["media_errors 7"]))},
        "nuc-1": {"health_report": _health(_dev("/dev/nvme1", "INTEL SSDPE2KX010T8", "ok", temp=None, used=73),
                                           _dev("/dev/nvme4", "KCD61LUL3T84", "warn", reasons=["temperature 71 C"]))},
        "nuc-3": {},
        "nuc-4": {"health_report": {"devices": []}},
    }
    rows = bf.health_fleet_rows(hostvars, ["nuc-2", "nuc-1", "nuc-3", "nuc-4"])
    assert [(r["host"], r["device"], r["status"]) for r in rows] == [
        ("nuc-1", "/dev/nvme1", "ok"), ("nuc-1", "/dev/nvme4", "warn"), ("nuc-2", "/dev/nvme0", "crit"),
        ("nuc-3", "-", "unknown"), ("nuc-4", "-", "unknown")]
    assert bf.health_problems(rows) == ["nuc-2 /dev/nvme0 (Samsung SSD 970 EVO 500GB): media_errors 7"]
    assert bf.health_problems(rows, ["unknown"]) == [
        "nuc-3 - (-): no basalt health output from this host", "nuc-4 - (-): basalt health found no device"]


def test_health_table_aligns_columns_and_shows_missing_values():
    rows = bf.health_fleet_rows({"a": {"health_report": _health(
        _dev("/dev/nvme0", "M1", "crit", reasons=["media_errors 7", "SMART overall-health failed"]),
        _dev("/dev/sda", "Long Model Name", "ok", temp=None, used=None))}}, ["a"])
    lines = bf.health_table(rows)
    assert lines[0].split() == ["host", "device", "model", "temp", "%", "used", "status", "reasons"]
    assert lines[1] == "a     /dev/nvme0  M1               35 C  3 %     crit    media_errors 7; SMART overall-health failed"
    assert lines[2] == "a     /dev/sda    Long Model Name  -     -       ok      -"
    # Every column starts at the same offset on every line.
    assert len({line.index("crit") if "crit" in line else line.index("ok  ") for line in lines[1:]}) == 1


def test_health_rows_of_recorded_basalt_health_output():
    import json
    rows = bf.health_fleet_rows({"box": {"health_report": json.loads(fixture("basalt-health-crit.json"))}}, ["box"])
    crit = [r for r in rows if r["status"] == "crit"]
    assert crit and crit[0]["device"] == "/dev/nvme0" and crit[0]["reasons"] == ["media_errors 7"]
    assert any(r["status"] == "ok" for r in rows)
