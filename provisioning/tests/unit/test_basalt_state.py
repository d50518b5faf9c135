"""The live-state parsers, fed recorded /proc, /sys, dmesg and chronyc output."""
import pytest

import basalt_state as bs
from conftest import fixture

WANTED_CMDLINE = ["clocksource=tsc", "tsc=reliable", "pcie_aspm=off", "amd_pstate=disable"]


def test_cmdline_all_present_last_occurrence_wins():
    assert bs.cmdline_missing(fixture("cmdline-ser5-tuned.txt"), WANTED_CMDLINE) == []


def test_cmdline_missing_in_order_and_overridden_value_counts_as_missing():
    missing = bs.cmdline_missing(fixture("cmdline-ser5-untuned.txt"), WANTED_CMDLINE)
    # clocksource=tsc is there but a later clocksource=hpet overrides it.
    assert missing == WANTED_CMDLINE


def test_cmdline_ignores_init_arguments_and_handles_flags():
    text = fixture("cmdline-firecracker-vm.txt")
    assert bs.cmdline_missing(text, ["quiet", "panic=1"]) == []
    # '--addr' comes after '--': it is an argument of init, not of the kernel.
    assert bs.cmdline_missing(text, ["--addr", "nosmt"]) == ["--addr", "nosmt"]


def test_tsc_unstable_lines_found():
    lines = bs.tsc_unstable_lines(fixture("dmesg-tsc-unstable.txt"))
    assert len(lines) == 3
    assert "Marking clocksource 'tsc' as unstable" in lines[0]
    assert lines[2].endswith("Use 'tsc=unstable'.")


def test_tsc_stable_log_has_no_lines():
    assert bs.tsc_unstable_lines(fixture("dmesg-tsc-stable.txt")) == []


@pytest.mark.parametrize("name,want", [
    ("scheduler-nvme-none.txt", "none"),
    ("scheduler-nvme-mqdeadline.txt", "mq-deadline"),
    ("scheduler-single.txt", "none"),
])
def test_active_scheduler(name, want):
    assert bs.active_scheduler(fixture(name)) == want


def test_boost_state_sources():
    assert bs.boost_state("1\n", None) == ("on", bs.BOOST_PATHS[0])
    assert bs.boost_state("0\n", None) == ("off", bs.BOOST_PATHS[0])
    # intel_pstate: no_turbo=1 means turbo off.
    assert bs.boost_state(None, "1\n") == ("off", bs.BOOST_PATHS[1])
    assert bs.boost_state(None, "0\n") == ("on", bs.BOOST_PATHS[1])
    assert bs.boost_state(None, None) == (None, None)


@pytest.mark.parametrize("control,active,want", [
    ("on\n", "1\n", "on"),
    ("off\n", "0\n", "off"),
    ("forceoff\n", "0\n", "off"),
    ("on\n", "0\n", "off"),  # control on but no sibling online (e.g. SMT-less CPU)
    ("notsupported\n", "0\n", None),
    ("notimplemented\n", None, None),
    (None, None, None),
])
def test_smt_state(control, active, want):
    assert bs.smt_state(control, active) == want


def test_parse_mountinfo_merges_options_and_unescapes():
    mounts = bs.parse_mountinfo(fixture("mountinfo-nuc.txt"))
    data = mounts["/srv/basalt"]
    assert data["fstype"] == "xfs"
    assert data["source"] == "/dev/nvme1n1"
    for opt in ("noatime", "nodiratime", "discard", "inode64"):
        assert opt in data["options"]
    assert "/mnt/with space" in mounts


def test_chrony_tracking():
    synced = bs.parse_chrony_tracking(fixture("chronyc-tracking-synced.csv"))
    assert synced["synchronized"] and synced["stratum"] == 9 and synced["reference_name"] == "10.251.0.11"
    unsynced = bs.parse_chrony_tracking(fixture("chronyc-tracking-unsynced.csv"))
    assert not unsynced["synchronized"] and "Not synchronised" in unsynced["reason"]
    local = bs.parse_chrony_tracking(fixture("chronyc-tracking-local.csv"))
    assert local["synchronized"] and local["stratum"] == 8
    assert not bs.parse_chrony_tracking("garbage")["synchronized"]


def test_logind_effective_remove_ipc():
    main, ours, later = fixture("logind.conf"), fixture("logind-basalt.conf"), fixture("logind-later-override.conf")
    assert bs.effective_systemd_setting([main], "Login", "RemoveIPC", "yes") == "yes"
    assert bs.effective_systemd_setting([main, ours], "Login", "RemoveIPC", "yes") == "no"
    # A drop-in sorted after ours wins: that is drift verify must see.
    assert bs.effective_systemd_setting([main, ours, later], "Login", "RemoveIPC", "yes") == "yes"


def _live(**over):
    live = {
        "container": "",
        "cmdline": fixture("cmdline-ser5-tuned.txt"),
        "clocksource": "tsc", "clocksource_available": "tsc hpet acpi_pm",
        "kernel_log": fixture("dmesg-tsc-stable.txt"), "tsc_unstable_lines": [],
        "boost": "off", "boost_source": bs.BOOST_PATHS[0], "boost_writable": True,
        "smt": "off", "smt_control": "off", "smt_writable": True,
        "fuse_io_uring": "on", "fuse_io_uring_writable": True,
        "schedulers": {"nvme0n1": "none", "nvme1n1": "none"}, "schedulers_writable": {"nvme0n1": True, "nvme1n1": True},
        "sysctls": {"kernel.perf_event_paranoid": "-1", "kernel.sysrq": "1"},
        "sysctls_writable": {"kernel.perf_event_paranoid": True, "kernel.sysrq": True},
        "mounts": bs.parse_mountinfo(fixture("mountinfo-nuc.txt")),
        "chrony": bs.parse_chrony_tracking(fixture("chronyc-tracking-synced.csv")),
        "logind_remove_ipc": "no",
        "units": {"chrony.service": "active"},
    }
    live.update(over)
    return live


WANTED = {
    "cmdline": WANTED_CMDLINE, "clocksource": "tsc", "tsc_stable": True, "boost": "off", "smt": "off",
    "fuse_io_uring": "on",
    "scheduler": "none", "sysctls": {"kernel.perf_event_paranoid": "-1", "kernel.sysrq": "1"},
    "mounts": [{"path": "/srv/basalt", "fstype": "xfs", "source": "/dev/disk/by-id/nvme-X", "source_resolved": "/dev/nvme1n1",
                "options": ["noatime", "nodiratime", "discard"]}],
    "chrony_synchronized": True, "logind_remove_ipc": "no", "units_active": ["chrony.service"],
}


def test_compare_clean_box_has_no_drift_and_no_notes():
    assert bs.compare_state(_live(), WANTED) == ([], [])


def test_compare_drifted_box_names_every_knob():
    live = _live(
        cmdline=fixture("cmdline-ser5-untuned.txt"), clocksource="hpet",
        tsc_unstable_lines=bs.tsc_unstable_lines(fixture("dmesg-tsc-unstable.txt")),
        boost="on", smt="on", fuse_io_uring="off", schedulers={"nvme0n1": "none", "nvme1n1": "mq-deadline"},
        sysctls={"kernel.perf_event_paranoid": "4", "kernel.sysrq": "1"},
        mounts=bs.parse_mountinfo(fixture("mountinfo-nodiscard.txt")),
        chrony=bs.parse_chrony_tracking(fixture("chronyc-tracking-unsynced.csv")),
        logind_remove_ipc="yes", units={"chrony.service": "inactive"},
    )
    drift, notes = bs.compare_state(live, WANTED)
    text = "\n".join(drift)
    assert notes == []
    for expected in [
        "running kernel command line lacks clocksource=tsc tsc=reliable pcie_aspm=off amd_pstate=disable",
        "clocksource is hpet, wanted tsc",
        "kernel log says the TSC is unstable",
        "turbo/boost is on, wanted off",
        "SMT is on, wanted off",
        "FUSE over io_uring is off, wanted on",
        "IO scheduler of nvme1n1 is mq-deadline, wanted none",
        "sysctl kernel.perf_event_paranoid = 4, wanted -1",
        "/srv/basalt mount lacks options noatime,nodiratime,discard",
        "chrony is not synchronised",
        "logind RemoveIPC=yes, wanted no",
        "unit chrony.service is inactive, wanted active",
    ]:
        assert expected in text, expected
    assert "nvme0n1" not in text
    assert len(drift) == 12


def test_compare_unmounted_and_wrong_source():
    mounts = bs.parse_mountinfo(fixture("mountinfo-nuc.txt"))
    drift, _ = bs.compare_state(_live(mounts={}), {"mounts": WANTED["mounts"]})
    assert drift == ["/srv/basalt is not mounted"]
    mounts["/srv/basalt"]["source"] = "/dev/nvme0n1"
    drift, _ = bs.compare_state(_live(mounts=mounts), {"mounts": WANTED["mounts"]})
    assert drift == ["/srv/basalt is mounted from /dev/nvme0n1, wanted /dev/disk/by-id/nvme-X"]


def test_compare_missing_knobs_are_notes_not_drift():
    live = _live(boost=None, boost_source=None, smt=None, smt_control="notsupported", schedulers={},
                 fuse_io_uring=None, fuse_io_uring_writable=False,
                 kernel_log=None, kernel_log_error="dmesg: read kernel buffer failed: Operation not permitted",
                 sysctls={"kernel.perf_event_paranoid": "-1", "kernel.sysrq": None})
    drift, notes = bs.compare_state(live, WANTED)
    assert drift == []
    joined = "\n".join(notes)
    assert "no boost/turbo control" in joined
    assert "no SMT control (/sys/devices/system/cpu/smt/control is notsupported)" in joined
    assert "no block device matches" in joined
    assert "no /sys/module/fuse/parameters/enable_uring (FUSE over io_uring needs Linux 6.14+)" in joined
    assert "kernel log not readable here (dmesg: read kernel buffer failed" in joined
    assert "sysctl kernel.sysrq does not exist in this kernel" in joined


def test_compare_container_read_only_values_are_notes_but_writable_ones_drift():
    live = _live(container="systemd-nspawn", cmdline=fixture("cmdline-firecracker-vm.txt"),
                 fuse_io_uring="off", fuse_io_uring_writable=False,
                 sysctls={"kernel.perf_event_paranoid": "2", "kernel.sysrq": "0"},
                 sysctls_writable={"kernel.perf_event_paranoid": False, "kernel.sysrq": True})
    drift, notes = bs.compare_state(live, WANTED)
    assert drift == ["sysctl kernel.sysrq = 0, wanted 1"]
    assert any("shares the host kernel" in n for n in notes)
    assert any("kernel.perf_event_paranoid = 2, wanted -1: read-only in this systemd-nspawn container" in n for n in notes)
    assert any("FUSE over io_uring is off, wanted on: read-only in this systemd-nspawn container" in n for n in notes)
    # Outside a container a read-only value is still drift.
    drift, _ = bs.compare_state(_live(sysctls={"kernel.perf_event_paranoid": "2", "kernel.sysrq": "1"},
                                      sysctls_writable={"kernel.perf_event_paranoid": False, "kernel.sysrq": True}), WANTED)
    assert drift == ["sysctl kernel.perf_event_paranoid = 2, wanted -1"]


@pytest.mark.parametrize("text,want", [("Y\n", "on"), ("N\n", "off"), ("1", "on"), ("", None), (None, None)])
def test_fuse_uring_state(text, want):
    assert bs.fuse_uring_state(text) == want


def test_sysctl_path():
    assert bs.sysctl_path("kernel.yama.ptrace_scope") == "/proc/sys/kernel/yama/ptrace_scope"
