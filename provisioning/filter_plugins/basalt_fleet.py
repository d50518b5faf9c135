# -*- coding: utf-8 -*-
"""Controller-side filters: collecting verify findings and building fleet reports."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os


def basalt_findings(variables, roles, kind):
    """['role: message', ...] from the `<role>_verify_<kind>` lists each role's verify set."""
    out = []
    for role in roles:
        for msg in variables.get("%s_verify_%s" % (role, kind)) or []:
            out.append("%s: %s" % (role, msg))
    return out


def _job_summary(job):
    row = {"job": job.get("jobname", "?")}
    for op in ("read", "write"):
        side = job.get(op) or {}
        row["%s_iops" % op] = round(float(side.get("iops", 0.0)), 1)
        row["%s_bw_kib" % op] = int(side.get("bw", 0))
        pct = ((side.get("clat_ns") or {}).get("percentile") or {})
        p99 = pct.get("99.000000")
        row["%s_p99_us" % op] = round(p99 / 1000.0, 1) if p99 is not None else None
    return row


def fio_summary(fio_output):
    """Rows (one per fio job) from fio --output-format=json output (text or parsed)."""
    if isinstance(fio_output, str):
        # fio may print notes ("fio: ...") ahead of the JSON document in its output file.
        start = fio_output.find("{")
        if start < 0:
            raise ValueError("not fio JSON output: no JSON object found")
        data = json.loads(fio_output[start:])
    else:
        data = fio_output
    if "jobs" not in data:
        raise ValueError("not fio JSON output: no 'jobs' key")
    return [_job_summary(job) for job in data["jobs"]]


def fio_fleet_rows(results):
    """[{host, job, read_iops, ...}] from {host: fio JSON text} of the whole fleet, sorted."""
    rows = []
    for host in sorted(results):
        for row in fio_summary(results[host]):
            row = dict(row)
            row["host"] = host
            rows.append(row)
    return rows


def bench_read_results(out_dir, hosts, filename):
    """{host: text of out_dir/host/filename} for the hosts whose results were fetched."""
    results = {}
    for host in hosts:
        with open(os.path.join(out_dir, host, filename)) as f:
            results[host] = f.read()
    return results


def fleet_spread(rows, field):
    """(min, median, max, max/min) of one numeric field over the fleet; None when empty."""
    values = sorted(r[field] for r in rows if r.get(field) is not None)
    if not values:
        return None
    n = len(values)
    median = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2.0
    ratio = round(values[-1] / values[0], 3) if values[0] else None
    return {"min": values[0], "median": median, "max": values[-1], "max_over_min": ratio}


def health_fleet_rows(hostvars, hosts, key="health_report"):
    """One row per device of the fleet from each host's `basalt health --json` output.

    `hostvars[host][key]` is the parsed output ({"devices": [...]}); a host without it (failed,
    unreachable, unparsable output) gets one row with status "unknown", so it is never
    silently missing from the table.
    """
    rows = []
    for host in sorted(hosts):
        report = (hostvars.get(host) or {}).get(key)
        if not isinstance(report, dict):
            rows.append({"host": host, "device": "-", "model": "-", "temperature_c": None,
                         "percentage_used": None, "status": "unknown",
                         "reasons": ["no basalt health output from this host"]})
            continue
        devices = report.get("devices") or []
        if not devices:
            rows.append({"host": host, "device": "-", "model": "-", "temperature_c": None,
                         "percentage_used": None, "status": "unknown",
                         "reasons": ["basalt health found no device"]})
        for dev in devices:
            rows.append({
                "host": host,
                "device": dev.get("device") or "?",
                "model": dev.get("model") or "?",
                "temperature_c": dev.get("temperature_c"),
                "percentage_used": dev.get("percentage_used"),
                "status": dev.get("status") or "unknown",
                "reasons": list(dev.get("reasons") or []),
            })
    return rows


def health_table(rows):
    """Fixed-width table lines (header first) of health_fleet_rows output."""
    header = ["host", "device", "model", "temp", "% used", "status", "reasons"]
    body = []
    for r in rows:
        body.append([
            r["host"], r["device"], r["model"],
            "-" if r["temperature_c"] is None else "%s C" % r["temperature_c"],
            "-" if r["percentage_used"] is None else "%s %%" % r["percentage_used"],
            r["status"],
            "; ".join(r["reasons"]) or "-",
        ])
    widths = [max(len(str(line[i])) for line in [header] + body) for i in range(len(header) - 1)]
    out = []
    for line in [header] + body:
        cells = [str(c).ljust(w) for c, w in zip(line[:-1], widths)] + [str(line[-1])]
        out.append("  ".join(cells).rstrip())
    return out


def health_problems(rows, statuses=("crit",)):
    """'host device (model): reasons' for each row whose status is in `statuses`."""
    return ["%s %s (%s): %s" % (r["host"], r["device"], r["model"], "; ".join(r["reasons"]) or r["status"])
            for r in rows if r["status"] in statuses]


class FilterModule(object):
    def filters(self):
        return {
            "basalt_findings": basalt_findings,
            "fio_summary": fio_summary,
            "fio_fleet_rows": fio_fleet_rows,
            "fleet_spread": fleet_spread,
            "bench_read_results": bench_read_results,
            "health_fleet_rows": health_fleet_rows,
            "health_table": health_table,
            "health_problems": health_problems,
        }
