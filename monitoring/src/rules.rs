//! Health rules: turn a record (and the previous sample of the same device) into a status and
//! one short reason per rule that fired.

use serde::{Deserialize, Serialize};

use crate::record::{HealthRecord, Status};

/// Rule thresholds; every default can be overridden in the `[rules]` config section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuleConfig {
    /// Warning temperature when the drive does not report WCTEMP.
    pub warning_temperature_c: i64,
    /// Critical temperature when the drive does not report CCTEMP.
    pub critical_temperature_c: i64,
    /// Use the drive's own WCTEMP/CCTEMP (or SCT limits) when known.
    pub use_drive_thresholds: bool,
    pub percentage_used_warn: u32,
    pub percentage_used_crit: u32,
    /// Warn when available spare is within this many points above its threshold.
    pub spare_margin_points: u32,
    pub crit_on_critical_warning: bool,
    pub crit_on_media_errors: bool,
    pub crit_on_smart_failed: bool,
    /// Warn when warning_temp_minutes, media_errors or error_log_entries grew since last sample.
    pub warn_on_growth: bool,
    /// Status of a device that could not be read or has no health data.
    pub unreadable_status: Status,
}

impl Default for RuleConfig {
    fn default() -> Self {
        RuleConfig {
            warning_temperature_c: 70,
            critical_temperature_c: 80,
            use_drive_thresholds: true,
            percentage_used_warn: 80,
            percentage_used_crit: 100,
            spare_margin_points: 10,
            crit_on_critical_warning: true,
            crit_on_media_errors: true,
            crit_on_smart_failed: true,
            warn_on_growth: true,
            unreadable_status: Status::Warn,
        }
    }
}

/// Names of the NVMe critical-warning bits, for readable reasons.
fn critical_warning_bits(v: u32) -> String {
    const NAMES: [&str; 6] = [
        "spare below threshold",
        "temperature threshold",
        "reliability degraded",
        "read-only",
        "volatile memory backup failed",
        "persistent memory region unreliable",
    ];
    let set: Vec<&str> = NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| v & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect();
    if set.is_empty() {
        String::new()
    } else {
        format!(" ({})", set.join(", "))
    }
}

impl RuleConfig {
    /// Effective (warning, critical) temperature thresholds for a record.
    pub fn temperature_thresholds(&self, r: &HealthRecord) -> (i64, i64) {
        let drive = |v: Option<i64>| v.filter(|_| self.use_drive_thresholds);
        (
            drive(r.temperature_warning_c).unwrap_or(self.warning_temperature_c),
            drive(r.temperature_critical_c).unwrap_or(self.critical_temperature_c),
        )
    }

    /// Sets `status` and `reasons` of `r` from its values, `previous` (the last sample of the same
    /// device, for the growth rules) and a collection `error`, if any.
    pub fn apply(
        &self,
        r: &mut HealthRecord,
        previous: Option<&HealthRecord>,
        error: Option<&str>,
    ) {
        let mut crit: Vec<String> = Vec::new();
        let mut warn: Vec<String> = Vec::new();
        let mut unreadable: Vec<String> = Vec::new();

        if let Some(e) = error {
            unreadable.push(format!("unreadable: {e}"));
        } else if r.has_no_health_data() {
            unreadable.push("no health data reported".to_string());
        }
        if let Some(cw) = r.critical_warning.filter(|v| *v != 0) {
            if self.crit_on_critical_warning {
                crit.push(format!(
                    "critical_warning {cw}{}",
                    critical_warning_bits(cw)
                ));
            }
        }
        if let Some(m) = r.media_errors.filter(|v| *v > 0) {
            if self.crit_on_media_errors {
                crit.push(format!("media_errors {m}"));
            }
        }
        if let (Some(s), Some(t)) = (r.available_spare_pct, r.available_spare_threshold_pct) {
            if s < t {
                crit.push(format!("available_spare {s}% below threshold {t}%"));
            } else if s < t.saturating_add(self.spare_margin_points) {
                warn.push(format!(
                    "available_spare {s}% within {} points of threshold {t}%",
                    self.spare_margin_points
                ));
            }
        }
        if let Some(p) = r.percentage_used {
            if p >= self.percentage_used_crit {
                crit.push(format!("percentage_used {p}%"));
            } else if p >= self.percentage_used_warn {
                warn.push(format!("percentage_used {p}%"));
            }
        }
        if r.smart_passed == Some(false) && self.crit_on_smart_failed {
            crit.push("SMART overall-health failed".to_string());
        }
        if let Some(t) = r.temperature_c {
            let (w, c) = self.temperature_thresholds(r);
            if t >= c {
                crit.push(format!("temperature {t}°C >= critical {c}°C"));
            } else if t >= w {
                warn.push(format!("temperature {t}°C >= warning {w}°C"));
            }
        }
        if let (true, Some(p)) = (self.warn_on_growth, previous) {
            let grew =
                |name: &str, now: Option<u64>, before: Option<u64>, warn: &mut Vec<String>| {
                    if let (Some(n), Some(b)) = (now, before) {
                        if n > b {
                            warn.push(format!("{name} grew {b} -> {n}"));
                        }
                    }
                };
            grew(
                "warning_temp_minutes",
                r.warning_temp_minutes,
                p.warning_temp_minutes,
                &mut warn,
            );
            grew("media_errors", r.media_errors, p.media_errors, &mut warn);
            grew(
                "error_log_entries",
                r.error_log_entries,
                p.error_log_entries,
                &mut warn,
            );
        }

        let unreadable_status = if unreadable.is_empty() {
            Status::Ok
        } else {
            self.unreadable_status
        };
        r.status = if !crit.is_empty() {
            Status::Crit
        } else if !warn.is_empty() {
            Status::Warn
        } else {
            Status::Ok
        }
        .max(unreadable_status);
        r.reasons = crit.into_iter().chain(warn).chain(unreadable).collect();
    }
}
