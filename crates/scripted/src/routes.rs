//! Everything but the chat endpoints: models, props, /metrics, /tokenize, llama.cpp slot actions,
//! and a fallback that logs any other call (preset actions of other servers).

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::request::{self, Api};
use super::{AppState, Fault, faults, lock, net};

pub(super) async fn models(State(s): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    s.record("GET", "/v1/models", &headers, &Value::Null);
    let (dialect, fault) = {
        let b = lock(&s.behaviour);
        (b.dialect, b.fault.clone())
    };
    let mut models = dialect.models(super::dialect::unix_now());
    if fault == Fault::EchoKey(faults::EchoKey::Shapes) {
        models["gateway"] = json!({"request_headers": faults::headers_echo(&headers)});
    }
    axum::Json(models)
}

/// The Prometheus page of the server imitated (its prompt and prefix-cache counters); 404 from
/// the hosted API, which has none.
pub(super) async fn metrics(State(s): State<AppState>, headers: HeaderMap) -> Response {
    s.record("GET", "/metrics", &headers, &Value::Null);
    let (dialect, late) = {
        let b = lock(&s.behaviour);
        (b.dialect, b.metrics_late)
    };
    let page = {
        let slots = lock(&s.slots);
        let (computed, cached) =
            if late { slots.before_latest } else { (slots.computed_total, slots.cached_total) };
        dialect.metrics(computed, cached)
    };
    match page {
        Some(page) => page.into_response(),
        None => (StatusCode::NOT_FOUND, "Not Found").into_response(),
    }
}

/// llama.cpp's `/props`; other servers answer 404.
pub(super) async fn props(State(s): State<AppState>, headers: HeaderMap) -> Response {
    s.record("GET", "/props", &headers, &Value::Null);
    let (serves, fault, server_args) = {
        let b = lock(&s.behaviour);
        (b.dialect.serves_props(), b.fault.clone(), b.server_args.clone())
    };
    if !serves {
        return (StatusCode::NOT_FOUND, "Not Found").into_response();
    }
    let mut props = json!({"total_slots": 2, "build_info": "scripted"});
    if fault == Fault::EchoKey(faults::EchoKey::Shapes) {
        props["server_args"] = json!(server_args);
        props["request_headers"] = faults::headers_echo(&headers);
    }
    axum::Json(props).into_response()
}

/// Any other call (preset actions of other servers): logged; the cache endpoints of agent-memory,
/// vLLM and SGLang act on the cache (`Slots::admin`); anything else is answered 200 `{"ok": true}`.
pub(super) async fn anything(State(s): State<AppState>, req: axum::extract::Request) -> Response {
    let method = req.method().to_string();
    let path = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    let headers = req.headers().clone();
    let body = axum::body::to_bytes(req.into_body(), 1 << 20).await.unwrap_or_default();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    s.record(&method, &path, &headers, &body);
    let fault = lock(&s.behaviour).fault.clone();
    if fault == Fault::EchoHeaders {
        let peer = net::Peer(([0, 0, 0, 0], 0).into(), 0);
        if let Some(response) = faults::respond(&fault, &headers, peer, &s.kills, 0) {
            return response;
        }
    }
    let refuse_after = lock(&s.behaviour).refuse_after;
    if let Some((text, after)) = refuse_after.filter(|(text, _)| path.contains(text)) {
        let mut slots = lock(&s.slots);
        slots.refusable_calls += 1;
        if slots.refusable_calls > after {
            return (StatusCode::SERVICE_UNAVAILABLE, format!("refused: {text} (scripted)")).into_response();
        }
    }
    if method == "GET" && path == "/v1/agents/list" {
        return axum::Json(lock(&s.slots).agents_list()).into_response();
    }
    match lock(&s.slots).admin(&method, &path) {
        Some(StatusCode::OK) | None => axum::Json(json!({"ok": true})).into_response(),
        Some(status) => (status, "no such agent").into_response(),
    }
}

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

pub(super) async fn tokenize(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let body = match request::parse(&body, Api::Other) {
        Ok(body) => body,
        Err(why) => return request::refusal(lock(&s.behaviour).dialect, Api::Other, &why),
    };
    s.record("POST", "/tokenize", &headers, &body);
    if !lock(&s.behaviour).tokenizer {
        return (StatusCode::NOT_FOUND, "File Not Found").into_response();
    }
    let n = words(body["content"].as_str().unwrap_or(""));
    axum::Json(json!({"tokens": vec![1; n]})).into_response()
}

pub(super) async fn slot_action(
    State(s): State<AppState>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<net::Peer>,
    Path(id): Path<u64>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = match request::parse(&body, Api::Other) {
        Ok(body) => body,
        Err(why) => return request::refusal(lock(&s.behaviour).dialect, Api::Other, &why),
    };
    let action = q.get("action").cloned().unwrap_or_default();
    s.record_from(Some(peer), "POST", &format!("/slots/{id}?action={action}"), &headers, &body);
    if lock(&s.behaviour).no_slot_save_path && action != "erase" {
        let message = "This server does not support slots action. Start it with `--slot-save-path`";
        return (
            StatusCode::NOT_IMPLEMENTED,
            json!({"error": {"code": 501, "message": message}}).to_string(),
        )
            .into_response();
    }
    let (save_path, file_bytes, restore_ms) = {
        let b = lock(&s.behaviour);
        (b.slot_save_path.clone(), b.slot_file_bytes, b.slot_restore_ms)
    };
    if action == "restore" && restore_ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(restore_ms)).await;
    }
    let file = body["filename"].as_str().unwrap_or("").to_string();
    // A file name with a path in it is refused, as llama-server refuses one.
    let on_disk = save_path.filter(|_| !file.contains('/') && !file.is_empty()).map(|dir| dir.join(&file));
    let mut slots = lock(&s.slots);
    let mut written = None;
    match action.as_str() {
        "erase" => {
            slots.live.remove(&id);
        }
        "save" => {
            let prompt = slots.live.get(&id).cloned().unwrap_or_default();
            if let Some(path) = &on_disk {
                match write_slot_file(path, &prompt, file_bytes) {
                    Ok(n) => written = Some(n),
                    Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
                }
            }
            slots.files.insert(file.clone(), prompt);
        }
        "restore" => {
            if let Some(path) = &on_disk {
                let resident_share = ttft_model::page_cache::resident_share(path).ok().flatten();
                if std::fs::read(path).is_err() {
                    return (StatusCode::BAD_REQUEST, "failed to restore slot: no such file").into_response();
                }
                slots.restores.push(super::Restored { file: file.clone(), resident_share });
            }
            match slots.files.get(&file).cloned() {
                Some(p) => {
                    slots.live.insert(id, p);
                }
                None => return (StatusCode::BAD_REQUEST, "no such file").into_response(),
            }
        }
        _ => return (StatusCode::BAD_REQUEST, "bad action").into_response(),
    }
    drop(slots);
    let reply = match written {
        Some(n) => json!({"id_slot": id, "filename": file, "n_written": n}),
        None => json!({"id_slot": id}),
    };
    // A server (or proxy) that answers twice: a copy of this answer on the kept-alive connection
    // later, where the client's next call would take it for its own answer.
    if let Fault::StrayAfterReply(ms) = lock(&s.behaviour).fault {
        let copy = faults::stray_copy_of_body(reply.to_string().as_bytes());
        let at = tokio::time::Instant::now() + std::time::Duration::from_millis(ms);
        lock(&s.kills).insert(peer.0, net::Kill::Stray(at, std::sync::Arc::new(copy)));
    }
    axum::Json(reply).into_response()
}

/// A slot file as a server leaves it: written, not synced (its pages are dirty in the page cache
/// until the OS writes them back). Holds the session's words, padded to `bytes`.
fn write_slot_file(path: &std::path::Path, prompt: &[String], bytes: usize) -> std::io::Result<usize> {
    let mut data = prompt.join(" ").into_bytes();
    data.resize(data.len().max(bytes), 0);
    std::fs::write(path, &data)?;
    Ok(data.len())
}
