# -*- coding: utf-8 -*-
"""Pure parsers and comparisons for the live state of a Basalt box.

Everything here takes text that was read from /proc, /sys, the kernel log or a command, and
returns plain data; nothing reads the system. library/basalt_live_state.py does the reading on
the target, and tests/unit/ feeds these functions recorded snippets.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

TSC_UNSTABLE_RE = re.compile(r"(?:clocksource|tsc):.*(?:Marking TSC unstable|TSC found unstable)"
                             r"|Marking clocksource 'tsc' as unstable"
                             r"|TSC found unstable after boot", re.IGNORECASE)
BOOST_PATHS = ("/sys/devices/system/cpu/cpufreq/boost", "/sys/devices/system/cpu/intel_pstate/no_turbo")
# The fuse module's switch for FUSE over io_uring (Linux 6.14+; Y or N).
FUSE_URING_PATH = "/sys/module/fuse/parameters/enable_uring"


def parse_cmdline(text):
    """Split /proc/cmdline into tokens (kernel arguments only, init arguments after `--` kept)."""
    return text.strip().split()


def cmdline_missing(text, wanted):
    """Wanted kernel arguments absent from the running command line, in wanted order.

    `key=value` must appear exactly; the last occurrence of a key wins as in the kernel, so
    `clocksource=hpet clocksource=tsc` satisfies `clocksource=tsc` but the reverse does not.
    A bare flag (e.g. `nosmt`) must appear as a token."""
    tokens = parse_cmdline(text)
    if "--" in tokens:
        tokens = tokens[:tokens.index("--")]
    last = {}
    flags = set()
    for tok in tokens:
        if "=" in tok:
            key, value = tok.split("=", 1)
            last[key] = value
        else:
            flags.add(tok)
    missing = []
    for want in wanted:
        if "=" in want:
            key, value = want.split("=", 1)
            if last.get(key) != value:
                missing.append(want)
        elif want not in flags:
            missing.append(want)
    return missing


def tsc_unstable_lines(kernel_log):
    """Kernel log lines saying the TSC was found or marked unstable."""
    return [line.strip() for line in kernel_log.splitlines() if TSC_UNSTABLE_RE.search(line)]


def active_scheduler(text):
    """`[none] mq-deadline kyber` -> `none`; a queue without choice (`none`) -> `none`."""
    text = text.strip()
    match = re.search(r"\[([^\]]+)\]", text)
    if match:
        return match.group(1)
    parts = text.split()
    return parts[0] if len(parts) == 1 else None


def boost_state(boost_text=None, no_turbo_text=None):
    """Turbo/boost state from cpufreq/boost (1 = on) or intel_pstate/no_turbo (1 = off).

    Returns (`on`|`off`|None, source) where None means the host has no such control."""
    if boost_text is not None and boost_text.strip() != "":
        return ("on" if boost_text.strip() == "1" else "off"), BOOST_PATHS[0]
    if no_turbo_text is not None and no_turbo_text.strip() != "":
        return ("off" if no_turbo_text.strip() == "1" else "on"), BOOST_PATHS[1]
    return None, None


def smt_state(control_text=None, active_text=None):
    """SMT state from /sys/devices/system/cpu/smt/{control,active}.

    control is one of on, off, forceoff, notsupported, notimplemented; the last two mean the
    host has no SMT control (a VM without SMT, a kernel without the knob)."""
    if control_text is None:
        return None
    control = control_text.strip()
    if control in ("notsupported", "notimplemented"):
        return None
    if control in ("off", "forceoff"):
        return "off"
    if active_text is not None and active_text.strip() == "0":
        return "off"
    return "on"


def fuse_uring_state(text=None):
    """FUSE over io_uring from the fuse module's enable_uring parameter: `on`, `off`, or None
    when the file is absent (a kernel before 6.14, or fuse not loaded)."""
    if text is None or text.strip() == "":
        return None
    return "on" if text.strip() in ("Y", "1") else "off"


def _unescape_mount_field(field):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text):
    """Parse /proc/self/mountinfo into a dict keyed by mount point (last mount wins).

    Each value has `source`, `fstype` and `options` (the per-mount and superblock options
    merged into one ordered list, e.g. ['rw', 'noatime', 'nodiratime', 'attr2', 'discard'])."""
    mounts = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        left, _, right = line.partition(" - ")
        lf = left.split()
        rf = right.split()
        if len(lf) < 6 or len(rf) < 3:
            continue
        options = lf[5].split(",")
        for opt in rf[2].split(","):
            if opt not in options:
                options.append(opt)
        mounts[_unescape_mount_field(lf[4])] = {
            "source": _unescape_mount_field(rf[1]),
            "fstype": rf[0],
            "options": options,
        }
    return mounts


def parse_chrony_tracking(csv_text):
    """Parse `chronyc -c tracking` (one CSV line).

    Fields: ref id, ref name, stratum, ref time, system time offset, last offset, rms offset,
    frequency, residual freq, skew, root delay, root dispersion, update interval, leap status."""
    line = csv_text.strip().splitlines()[-1] if csv_text.strip() else ""
    fields = line.split(",")
    if len(fields) < 14:
        return {"synchronized": False, "reason": "unparsable chronyc tracking output: %r" % line}
    ref_id, ref_name, stratum = fields[0], fields[1], int(fields[2])
    leap = fields[13].strip()
    info = {
        "reference_id": ref_id,
        "reference_name": ref_name,
        "stratum": stratum,
        "system_offset_s": float(fields[4]),
        "leap_status": leap,
    }
    if leap == "Not synchronised" or ref_id in ("00000000", "7F7F0101") and stratum == 0:
        info["synchronized"] = False
        info["reason"] = "chrony is not synchronised (leap status %r, reference %s)" % (leap, ref_name or ref_id)
    elif stratum == 0:
        info["synchronized"] = False
        info["reason"] = "chrony has no reference (stratum 0)"
    else:
        info["synchronized"] = True
        info["reason"] = ""
    return info


def parse_systemd_ini(text):
    """Minimal parser for systemd .conf files: {section: {key: last value}}."""
    result = {}
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            result.setdefault(section, {})
            continue
        if section is None or "=" not in line:
            continue
        key, value = line.split("=", 1)
        result[section][key.strip()] = value.strip()
    return result


def effective_systemd_setting(texts, section, key, default):
    """Value of section/key after applying the main file then drop-ins (given in order)."""
    value = default
    for text in texts:
        parsed = parse_systemd_ini(text).get(section, {})
        if key in parsed:
            value = parsed[key]
    return value


def sysctl_path(key):
    """kernel.yama.ptrace_scope -> /proc/sys/kernel/yama/ptrace_scope."""
    return "/proc/sys/" + key.replace(".", "/")


def normalize_sysctl_value(text):
    return " ".join(str(text).split())


def _mismatch(live, writable, drift, notes, msg):
    """A live value differs. In a container whose /proc/sys or /sys is read-only the value is
    the host kernel's and cannot be changed from inside: that is a note (the persisted setting
    is checked separately), not drift. Everywhere else it is drift."""
    if live.get("container") and not writable:
        notes.append("%s: read-only in this %s container, the host kernel's value (persisted setting checked instead)"
                     % (msg, live["container"]))
    else:
        drift.append(msg)


def compare_state(live, wanted):
    """Compare live state (as gathered by basalt_live_state) with what is wanted.

    Returns (drift, notes): drift is a list of precise messages for each mismatch; notes is a
    list of things that could not be checked on this host and why (missing hardware knob,
    container, unreadable kernel log). Each wanted key is optional; absent means unchecked."""
    drift = []
    notes = []

    if wanted.get("cmdline"):
        missing = cmdline_missing(live["cmdline"], wanted["cmdline"])
        if missing:
            msg = "running kernel command line lacks %s (running: %s)" % (" ".join(missing), live["cmdline"].strip())
            if live.get("container"):
                notes.append("%s container shares the host kernel: %s" % (live["container"], msg))
            else:
                drift.append(msg)

    if wanted.get("clocksource"):
        current = live.get("clocksource")
        if current is None:
            notes.append("no /sys/devices/system/clocksource/clocksource0/current_clocksource: clocksource not checked")
        elif current != wanted["clocksource"]:
            drift.append("clocksource is %s, wanted %s (available: %s)" % (
                current, wanted["clocksource"], live.get("clocksource_available", "?")))

    if wanted.get("tsc_stable"):
        if live.get("kernel_log") is None:
            notes.append("kernel log not readable here (%s): 'TSC found unstable' not checked"
                         % (live.get("kernel_log_error") or "unknown reason"))
        elif live.get("tsc_unstable_lines"):
            drift.append("kernel log says the TSC is unstable: %s" % " | ".join(live["tsc_unstable_lines"][:3]))

    if wanted.get("boost"):
        if live.get("boost") is None:
            notes.append("no boost/turbo control (%s): skipped" % " nor ".join(BOOST_PATHS))
        elif live["boost"] != wanted["boost"]:
            _mismatch(live, live.get("boost_writable"), drift, notes,
                      "turbo/boost is %s, wanted %s (%s)" % (live["boost"], wanted["boost"], live.get("boost_source")))

    if wanted.get("smt"):
        if live.get("smt") is None:
            notes.append("no SMT control (/sys/devices/system/cpu/smt/control is %s): skipped"
                         % (live.get("smt_control") or "absent"))
        elif live["smt"] != wanted["smt"]:
            _mismatch(live, live.get("smt_writable"), drift, notes, "SMT is %s, wanted %s" % (live["smt"], wanted["smt"]))

    if wanted.get("fuse_io_uring"):
        if live.get("fuse_io_uring") is None:
            notes.append("no %s (FUSE over io_uring needs Linux 6.14+): persisted for a later kernel"
                         % FUSE_URING_PATH)
        elif live["fuse_io_uring"] != wanted["fuse_io_uring"]:
            _mismatch(live, live.get("fuse_io_uring_writable"), drift, notes,
                      "FUSE over io_uring is %s, wanted %s" % (live["fuse_io_uring"], wanted["fuse_io_uring"]))

    if wanted.get("scheduler"):
        if not live.get("schedulers"):
            notes.append("no block device matches %s: IO scheduler not checked" % wanted.get("scheduler_devices", "?"))
        for dev, sched in sorted((live.get("schedulers") or {}).items()):
            if sched != wanted["scheduler"]:
                _mismatch(live, (live.get("schedulers_writable") or {}).get(dev), drift, notes,
                          "IO scheduler of %s is %s, wanted %s" % (dev, sched, wanted["scheduler"]))

    for key, want in sorted((wanted.get("sysctls") or {}).items()):
        have = (live.get("sysctls") or {}).get(key)
        if have is None:
            notes.append("sysctl %s does not exist in this kernel: skipped" % key)
        elif normalize_sysctl_value(have) != normalize_sysctl_value(want):
            _mismatch(live, (live.get("sysctls_writable") or {}).get(key), drift, notes,
                      "sysctl %s = %s, wanted %s" % (key, normalize_sysctl_value(have), normalize_sysctl_value(want)))

    for want in wanted.get("mounts") or []:
        path = want["path"]
        have = (live.get("mounts") or {}).get(path)
        if have is None:
            drift.append("%s is not mounted" % path)
            continue
        if want.get("fstype") and have["fstype"] != want["fstype"]:
            drift.append("%s is %s, wanted %s" % (path, have["fstype"], want["fstype"]))
        if want.get("source") and have["source"] != want["source"] and have["source"] != want.get("source_resolved"):
            drift.append("%s is mounted from %s, wanted %s" % (path, have["source"], want["source"]))
        lacking = [o for o in want.get("options") or [] if o not in have["options"]]
        if lacking:
            drift.append("%s mount lacks options %s (has %s)" % (path, ",".join(lacking), ",".join(have["options"])))

    if wanted.get("chrony_synchronized"):
        chrony = live.get("chrony") or {}
        if not chrony.get("synchronized"):
            drift.append(chrony.get("reason") or "chrony state unknown")

    if wanted.get("logind_remove_ipc") is not None:
        have = live.get("logind_remove_ipc")
        if have != wanted["logind_remove_ipc"]:
            drift.append("logind RemoveIPC=%s, wanted %s" % (have, wanted["logind_remove_ipc"]))

    for unit in wanted.get("units_active") or []:
        state = (live.get("units") or {}).get(unit)
        if state != "active":
            drift.append("unit %s is %s, wanted active" % (unit, state or "unknown"))

    return drift, notes
