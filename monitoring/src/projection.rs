//! End-of-life projection from the trend of `percentage_used` and of bytes written per day.
//!
//! With enough history (a least-squares slope over at least [`MIN_WEAR_TREND_DAYS`] days for
//! wear, [`MIN_WRITE_TREND_DAYS`] for writes) the trend is used; otherwise the lifetime average
//! (current value ÷ power-on days) stands in, so a fresh install still shows an estimate.

use chrono::{DateTime, NaiveDate};
use serde::Serialize;

use crate::record::HealthRecord;

/// Minimum history span, in days, before the `percentage_used` trend is trusted.
pub const MIN_WEAR_TREND_DAYS: f64 = 7.0;
/// Minimum history span, in days, before the bytes-written trend is trusted.
pub const MIN_WRITE_TREND_DAYS: f64 = 1.0;
/// Projections further out than this are reported as none ("not in the foreseeable future").
pub const MAX_HORIZON_DAYS: f64 = 100.0 * 365.25;

/// How a rate was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RateSource {
    Trend,
    LifetimeAverage,
}

/// Projected end of life of one device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Projection {
    pub device: String,
    pub percentage_used_per_day: Option<f64>,
    pub percentage_used_rate_source: Option<RateSource>,
    pub bytes_written_per_day: Option<f64>,
    pub bytes_written_rate_source: Option<RateSource>,
    pub rated_tbw_bytes: Option<f64>,
    /// Date `percentage_used` reaches 100.
    pub wear_out_date: Option<NaiveDate>,
    /// Date host writes pass the rated TBW.
    pub tbw_date: Option<NaiveDate>,
    /// The earlier of the two.
    pub end_of_life_date: Option<NaiveDate>,
    /// `"percentage_used"` or `"tbw"`: which projection gave `end_of_life_date`.
    pub end_of_life_basis: Option<&'static str>,
}

/// Least-squares slope of `(unix seconds, value)` points, per day, and the span in days.
pub fn slope_per_day(points: &[(i64, f64)]) -> Option<(f64, f64)> {
    if points.len() < 2 {
        return None;
    }
    let t0 = points[0].0;
    let n = points.len() as f64;
    let xs: Vec<f64> = points
        .iter()
        .map(|(t, _)| (t - t0) as f64 / 86_400.0)
        .collect();
    let mx = xs.iter().sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (x, (_, y)) in xs.iter().zip(points) {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
    }
    if sxx <= 0.0 {
        return None;
    }
    let span =
        xs.iter().cloned().fold(f64::MIN, f64::max) - xs.iter().cloned().fold(f64::MAX, f64::min);
    Some((sxy / sxx, span))
}

fn date_after(now: i64, days: f64) -> Option<NaiveDate> {
    if !days.is_finite() || days > MAX_HORIZON_DAYS {
        return None;
    }
    let secs = now + (days.max(0.0) * 86_400.0).round() as i64;
    DateTime::from_timestamp(secs, 0).map(|d| d.date_naive())
}

fn lifetime_days(r: &HealthRecord) -> Option<f64> {
    r.power_on_hours.filter(|h| *h > 0).map(|h| h as f64 / 24.0)
}

/// Projects end of life for `record` at time `now` from history of `percentage_used` and
/// `host_bytes_written` (oldest first) and an optional rated TBW in bytes.
pub fn project(
    record: &HealthRecord,
    used_history: &[(i64, f64)],
    written_history: &[(i64, f64)],
    rated_tbw_bytes: Option<f64>,
    now: i64,
) -> Projection {
    let used_now = record
        .percentage_used
        .map(f64::from)
        .or_else(|| used_history.last().map(|p| p.1));
    let written_now = record
        .host_bytes_written
        .map(|b| b as f64)
        .or_else(|| written_history.last().map(|p| p.1));

    let (used_rate, used_src) = match slope_per_day(used_history) {
        Some((s, span)) if span >= MIN_WEAR_TREND_DAYS && s > 0.0 => {
            (Some(s), Some(RateSource::Trend))
        }
        _ => match (used_now, lifetime_days(record)) {
            (Some(u), Some(d)) if u > 0.0 => (Some(u / d), Some(RateSource::LifetimeAverage)),
            _ => (None, None),
        },
    };
    let (written_rate, written_src) = match slope_per_day(written_history) {
        Some((s, span)) if span >= MIN_WRITE_TREND_DAYS && s >= 0.0 => {
            (Some(s), Some(RateSource::Trend))
        }
        _ => match (written_now, lifetime_days(record)) {
            (Some(w), Some(d)) => (Some(w / d), Some(RateSource::LifetimeAverage)),
            _ => (None, None),
        },
    };

    let wear_out_date = match (used_now, used_rate) {
        (Some(u), _) if u >= 100.0 => date_after(now, 0.0),
        (Some(u), Some(r)) if r > 0.0 => date_after(now, (100.0 - u) / r),
        _ => None,
    };
    let tbw_date = match (written_now, written_rate, rated_tbw_bytes) {
        (Some(w), _, Some(tbw)) if w >= tbw => date_after(now, 0.0),
        (Some(w), Some(r), Some(tbw)) if r > 0.0 => date_after(now, (tbw - w) / r),
        _ => None,
    };
    let (end_of_life_date, end_of_life_basis) = match (wear_out_date, tbw_date) {
        (Some(a), Some(b)) if b < a => (Some(b), Some("tbw")),
        (Some(a), _) => (Some(a), Some("percentage_used")),
        (None, Some(b)) => (Some(b), Some("tbw")),
        (None, None) => (None, None),
    };
    Projection {
        device: record.device.clone(),
        percentage_used_per_day: used_rate,
        percentage_used_rate_source: used_src,
        bytes_written_per_day: written_rate,
        bytes_written_rate_source: written_src,
        rated_tbw_bytes,
        wear_out_date,
        tbw_date,
        end_of_life_date,
        end_of_life_basis,
    }
}
