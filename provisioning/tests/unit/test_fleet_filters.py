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
