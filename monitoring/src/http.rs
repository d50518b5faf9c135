//! HTTP: dashboard at `/`, Prometheus at `/metrics`, JSON API under `/api/`.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::history::{downsample_for_chart, SampleStore};
use crate::record::device_key;
use crate::sampler::{hwmon_metric, Snapshot, DEVICE_METRICS};

/// Supplies engine statistics as JSON (numbers become `basalt_engine_*` metrics).
pub type EngineStatsProvider = Arc<dyn Fn() -> Value + Send + Sync>;

const INDEX_HTML: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const STYLE_CSS: &str = include_str!("../assets/style.css");

/// Points returned per series by `/api/history` at most.
pub const MAX_CHART_POINTS: usize = 720;

/// Shared state of the monitoring HTTP endpoints.
#[derive(Clone)]
pub struct MonitoringState {
    snapshot: Arc<RwLock<Snapshot>>,
    /// History store read by `/api/history` (and written by the sampler).
    pub store: Arc<dyn SampleStore>,
    /// Optional engine statistics, served at `/api/stats` and as `basalt_engine_*` metrics.
    pub engine_stats: Option<EngineStatsProvider>,
}

impl MonitoringState {
    /// State with an empty snapshot.
    pub fn new(store: Arc<dyn SampleStore>) -> Self {
        MonitoringState {
            snapshot: Arc::new(RwLock::new(Snapshot::default())),
            store,
            engine_stats: None,
        }
    }

    /// Adds an engine statistics provider.
    pub fn with_engine_stats(mut self, provider: EngineStatsProvider) -> Self {
        self.engine_stats = Some(provider);
        self
    }

    /// Replaces the current snapshot.
    pub fn publish(&self, snapshot: Snapshot) {
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = snapshot;
    }

    /// A copy of the current snapshot.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The monitoring routes: `/`, `/assets/app.js`, `/assets/style.css`, `/metrics`,
/// `/api/health`, `/api/history`, and `/api/stats` when an engine stats provider is set.
pub fn router(state: MonitoringState) -> Router {
    let mut r = Router::new()
        .route("/", get(index))
        .route("/assets/app.js", get(app_js))
        .route("/assets/style.css", get(style_css))
        .route("/metrics", get(metrics))
        .route("/api/health", get(health))
        .route("/api/history", get(history));
    if state.engine_stats.is_some() {
        r = r.route("/api/stats", get(stats));
    }
    r.with_state(state)
}

fn text(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn index() -> Response {
    text("text/html; charset=utf-8", INDEX_HTML)
}

async fn app_js() -> Response {
    text("text/javascript; charset=utf-8", APP_JS)
}

async fn style_css() -> Response {
    text("text/css; charset=utf-8", STYLE_CSS)
}

async fn metrics(State(st): State<MonitoringState>) -> Response {
    let snap = st.snapshot();
    let stats = st.engine_stats.as_ref().map(|f| f());
    let body = crate::metrics::render(&snap, stats.as_ref());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

async fn health(State(st): State<MonitoringState>) -> Json<Snapshot> {
    Json(st.snapshot())
}

async fn stats(State(st): State<MonitoringState>) -> Json<Value> {
    Json(st.engine_stats.as_ref().map(|f| f()).unwrap_or(Value::Null))
}

/// Query of `/api/history`.
#[derive(Debug, Deserialize)]
pub struct HistoryQuery {
    pub device: String,
    /// `1h`, `1d` or `30d` (default `1d`).
    pub range: Option<String>,
    /// One metric only (default: all metrics of the device).
    pub metric: Option<String>,
}

/// Seconds covered by a range name.
pub fn range_seconds(range: &str) -> Option<i64> {
    match range {
        "1h" => Some(3600),
        "1d" => Some(86_400),
        "7d" => Some(7 * 86_400),
        "30d" => Some(30 * 86_400),
        _ => None,
    }
}

async fn history(State(st): State<MonitoringState>, Query(q): Query<HistoryQuery>) -> Response {
    let range = q.range.as_deref().unwrap_or("1d");
    let Some(secs) = range_seconds(range) else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": format!("unknown range `{range}` (use 1h, 1d, 7d or 30d)")})),
        )
            .into_response();
    };
    let snap = st.snapshot();
    let to = if snap.taken_at > 0 {
        snap.taken_at + 1
    } else {
        chrono::Utc::now().timestamp() + 1
    };
    let from = to - secs;
    let metrics: Vec<String> = match (&q.metric, q.device.strip_prefix("hwmon/")) {
        (Some(m), _) => vec![m.clone()],
        (None, Some(chip)) => snap
            .sensors
            .iter()
            .filter(|s| s.chip == chip)
            .map(|s| hwmon_metric(&s.sensor))
            .collect(),
        (None, None) => DEVICE_METRICS.iter().map(|m| m.to_string()).collect(),
    };
    let device = if q.device.starts_with("hwmon/") {
        q.device.clone()
    } else {
        snap.devices
            .iter()
            .find(|d| device_key(&d.device) == device_key(&q.device))
            .map(|d| d.device.clone())
            .unwrap_or_else(|| q.device.clone())
    };
    let mut series = BTreeMap::new();
    for m in metrics {
        match st.store.range(&device, &m, from, to) {
            Ok(points) => {
                let pts = downsample_for_chart(&points, from, to, MAX_CHART_POINTS);
                series.insert(m, pts);
            }
            Err(e) => {
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    Json(json!({"error": e.to_string()})),
                )
                    .into_response()
            }
        }
    }
    Json(json!({
        "device": device,
        "range": range,
        "from": from,
        "to": to,
        "series": series,
    }))
    .into_response()
}
