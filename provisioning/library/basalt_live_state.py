#!/usr/bin/python
# -*- coding: utf-8 -*-
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: basalt_live_state
short_description: Read the live tuning state of a Basalt box and compare it with what is wanted
description:
  - Reads the running kernel command line, clocksource, kernel log, turbo/boost and SMT controls,
    IO schedulers, sysctls, mounts, chrony tracking, the effective logind RemoveIPC and unit states.
  - Never changes anything. Returns the live values, whether each knob can be changed here, and
    when I(wanted) is given the list of drift messages and of checks skipped (missing hardware
    knob, container, unreadable kernel log).
options:
  wanted:
    description: What the state should be; see module_utils/basalt_state.py compare_state.
    type: dict
    default: {}
  sysctls:
    description: Sysctl keys to read.
    type: list
    elements: str
    default: []
  scheduler_devices:
    description: Glob of /sys/block names whose IO scheduler is read.
    type: str
    default: nvme*n*
  units:
    description: systemd units whose ActiveState is read.
    type: list
    elements: str
    default: []
  read_chrony:
    description: Run C(chronyc -c tracking).
    type: bool
    default: false
  read_kernel_log:
    description: Read the kernel log (dmesg) for TSC instability messages.
    type: bool
    default: false
author: Basalt provisioning
"""

RETURN = r"""
live:
  description: Live values read from the host.
  returned: always
  type: dict
drift:
  description: One precise message per mismatch with I(wanted).
  returned: always
  type: list
  elements: str
notes:
  description: Checks that could not be made here, and why.
  returned: always
  type: list
  elements: str
"""

EXAMPLES = r"""
- name: Read the live state and compare
  basalt_live_state:
    sysctls: [kernel.sysrq]
    wanted:
      sysctls: {kernel.sysrq: "1"}
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.basalt_state import (
    active_scheduler, boost_state, compare_state, effective_systemd_setting, fuse_uring_state,
    parse_chrony_tracking, parse_mountinfo, smt_state, sysctl_path, tsc_unstable_lines, BOOST_PATHS,
    FUSE_URING_PATH)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except (IOError, OSError):
        return None


def writable(path):
    return os.path.exists(path) and os.access(path, os.W_OK)


def detect_container():
    value = read("/run/systemd/container")
    if value:
        return value.strip()
    environ = read("/proc/1/environ") or ""
    for item in environ.split("\0"):
        if item.startswith("container="):
            return item.split("=", 1)[1]
    return ""


def logind_texts():
    texts = []
    for path in ["/usr/lib/systemd/logind.conf", "/etc/systemd/logind.conf"]:
        text = read(path)
        if text is not None:
            texts.append(text)
    dropins = {}
    for d in ["/usr/lib/systemd/logind.conf.d", "/run/systemd/logind.conf.d", "/etc/systemd/logind.conf.d"]:
        for p in glob.glob(os.path.join(d, "*.conf")):
            dropins[os.path.basename(p)] = p  # later directories override same-named files
    for name in sorted(dropins):
        texts.append(read(dropins[name]) or "")
    return texts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            wanted=dict(type="dict", default={}),
            sysctls=dict(type="list", elements="str", default=[]),
            scheduler_devices=dict(type="str", default="nvme*n*"),
            units=dict(type="list", elements="str", default=[]),
            read_chrony=dict(type="bool", default=False),
            read_kernel_log=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    live = {"container": detect_container()}
    live["cmdline"] = read("/proc/cmdline") or ""
    cs_dir = "/sys/devices/system/clocksource/clocksource0"
    cs = read(cs_dir + "/current_clocksource")
    live["clocksource"] = cs.strip() if cs is not None else None
    avail = read(cs_dir + "/available_clocksource")
    live["clocksource_available"] = avail.strip() if avail is not None else None

    if p["read_kernel_log"]:
        rc, out, err = module.run_command(["dmesg"])
        if rc == 0:
            live["kernel_log"] = out
            live["tsc_unstable_lines"] = tsc_unstable_lines(out)
        else:
            live["kernel_log"] = None
            live["kernel_log_error"] = "dmesg: " + (err.strip() or "exit %d" % rc)
            live["tsc_unstable_lines"] = []

    live["boost"], live["boost_source"] = boost_state(read(BOOST_PATHS[0]), read(BOOST_PATHS[1]))
    live["boost_writable"] = bool(live["boost_source"]) and writable(live["boost_source"])
    control = read("/sys/devices/system/cpu/smt/control")
    live["smt_control"] = control.strip() if control is not None else None
    live["smt"] = smt_state(control, read("/sys/devices/system/cpu/smt/active"))
    live["smt_writable"] = live["smt"] is not None and writable("/sys/devices/system/cpu/smt/control")

    live["fuse_io_uring"] = fuse_uring_state(read(FUSE_URING_PATH))
    live["fuse_io_uring_writable"] = live["fuse_io_uring"] is not None and writable(FUSE_URING_PATH)

    schedulers = {}
    sched_writable = {}
    for path in sorted(glob.glob("/sys/block/" + p["scheduler_devices"])):
        dev = os.path.basename(path)
        text = read(path + "/queue/scheduler")
        if text is not None:
            schedulers[dev] = active_scheduler(text)
            sched_writable[dev] = writable(path + "/queue/scheduler")
    live["schedulers"] = schedulers
    live["schedulers_writable"] = sched_writable

    sysctls = {}
    sysctls_writable = {}
    for key in p["sysctls"]:
        text = read(sysctl_path(key))
        sysctls[key] = " ".join(text.split()) if text is not None else None
        sysctls_writable[key] = text is not None and writable(sysctl_path(key))
    live["sysctls"] = sysctls
    live["sysctls_writable"] = sysctls_writable

    live["mounts"] = parse_mountinfo(read("/proc/self/mountinfo") or "")
    live["logind_remove_ipc"] = effective_systemd_setting(logind_texts(), "Login", "RemoveIPC", "yes")

    if p["read_chrony"]:
        rc, out, err = module.run_command(["chronyc", "-c", "-n", "tracking"])
        if rc == 0:
            live["chrony"] = parse_chrony_tracking(out)
        else:
            live["chrony"] = {"synchronized": False, "reason": "chronyc tracking failed: %s" % (err.strip() or out.strip())}

    units = {}
    for unit in p["units"]:
        rc, out, err = module.run_command(["systemctl", "show", "--property=ActiveState", "--value", unit])
        units[unit] = out.strip() if rc == 0 else "unknown"
    live["units"] = units

    drift, notes = compare_state(live, p["wanted"]) if p["wanted"] else ([], [])
    # The kernel log can be large: return only what was found in it.
    if live.get("kernel_log") is not None:
        live["kernel_log"] = "(read: %d lines)" % len(live["kernel_log"].splitlines())
    module.exit_json(changed=False, live=live, drift=drift, notes=notes)


if __name__ == "__main__":
    main()
