//! The one HTTP server: monitoring's router (dashboard `/`, `/metrics`, `/api/health`,
//! `/api/history`, `/api/stats`) plus `/api/changes`, behind bearer-token auth when the
//! listen address is not loopback (everything but `/metrics` then needs the token).

use crate::jsonbytes;
use axum::extract::{Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use basalt_engine::Db;
use basalt_monitoring::MonitoringState;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

/// The token that guards the server; `None` = open (loopback only). Replaced on reload.
pub type SharedToken = Arc<RwLock<Option<String>>>;

/// Refuses a non-loopback address without a token.
pub fn check_exposure(listen: &SocketAddr, token: &Option<String>) -> anyhow::Result<()> {
    if !listen.ip().is_loopback() && token.as_deref().is_none_or(str::is_empty) {
        anyhow::bail!(
            "refusing to listen on {listen} without a token: set [http] token or token_file in \
             the config (every path but /metrics will require `Authorization: Bearer TOKEN`), \
             or listen on 127.0.0.1"
        );
    }
    Ok(())
}

/// The full application.
pub fn app(monitoring: MonitoringState, db: Option<Db>, token: SharedToken) -> Router {
    let mut r = basalt_monitoring::router(monitoring);
    if let Some(db) = db {
        r = r.merge(
            Router::new()
                .route("/api/changes", get(changes))
                .with_state(db),
        );
    }
    r.layer(middleware::from_fn_with_state(token, auth))
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn auth(State(token): State<SharedToken>, req: Request, next: Next) -> Response {
    let want = token.read().unwrap_or_else(|p| p.into_inner()).clone();
    if let Some(want) = want {
        if req.uri().path() != "/metrics" {
            let got = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            if !got.is_some_and(|g| same(g.as_bytes(), want.as_bytes())) {
                return (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, "Bearer")],
                    "authorization required: send `Authorization: Bearer TOKEN`\n",
                )
                    .into_response();
            }
        }
    }
    next.run(req).await
}

/// Query of `/api/changes`.
#[derive(Debug, Deserialize)]
pub struct ChangesQuery {
    pub collection: String,
    #[serde(default)]
    pub since: u64,
    /// At most this many changes (default 10000).
    pub limit: Option<usize>,
}

/// One change as a JSON object (also the line format of `basalt changes`).
pub fn change_json(c: &basalt_engine::Change) -> Value {
    let mut m = Map::new();
    m.insert("seqno".into(), c.seqno.into());
    m.insert("collection".into(), c.collection.clone().into());
    m.insert(
        "op".into(),
        if c.value.is_some() { "put" } else { "delete" }.into(),
    );
    jsonbytes::put(&mut m, "key", &c.key);
    if let Some(v) = &c.value {
        jsonbytes::put(&mut m, "value", v);
    }
    Value::Object(m)
}

async fn changes(State(db): State<Db>, Query(q): Query<ChangesQuery>) -> Response {
    let limit = q.limit.unwrap_or(10_000);
    let res = tokio::task::spawn_blocking(move || -> Result<String, basalt_engine::Error> {
        let mut body = String::new();
        for c in db.collection(&q.collection)?.changes(q.since)?.take(limit) {
            body.push_str(&change_json(&c?).to_string());
            body.push('\n');
        }
        Ok(body)
    })
    .await;
    match res {
        Ok(Ok(body)) => ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response(),
        Ok(Err(e @ basalt_engine::Error::UnknownCollection(_))) => {
            (StatusCode::NOT_FOUND, format!("{e}\n")).into_response()
        }
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// Binds `listen`; the error says what to do when the port is taken.
pub async fn bind(listen: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            anyhow::anyhow!(
                "cannot listen on {listen}: the address is in use (another basalt? choose one with --listen)"
            )
        } else {
            anyhow::anyhow!("cannot listen on {listen}: {e}")
        }
    })
}
