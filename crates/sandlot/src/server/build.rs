//! Build routes: `POST /v1/images/build` (the context as a tar body, options in the query) and
//! `POST /v1/snapshots/{id}/image`.

use std::convert::Infallible;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use sandlot_api::{BuildEvent, BuildImage, ErrorDetail, SnapshotImage, NDJSON};
use sandlot_control::BuildFailure;

use super::app::AppState;
use super::error::ApiError;
use super::extract::{ApiJson, ApiPath, ApiQuery, Auth, Leased};
use super::images::{spool, wants_ndjson};
use super::stream::{channel_body, leased};

/// The build's options from its query string; `allow` and `build_arg` may repeat.
fn options(pairs: Vec<(String, String)>) -> Result<BuildImage, ApiError> {
    let mut req = BuildImage::default();
    let mut name = None;
    let bool_of = |k: &str, v: &str| match v {
        "" | "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(ApiError::invalid(format!("{k}={v:?}: write true or false"))),
    };
    let num = |k: &str, v: &str| v.parse::<u64>().map_err(|_| ApiError::invalid(format!("{k}={v:?} is not a number")));
    for (k, v) in pairs {
        match k.as_str() {
            "name" => name = Some(v),
            "file" => req.file = Some(v),
            "no_cache" => req.no_cache = bool_of(&k, &v)?,
            "public" => req.public = bool_of(&k, &v)?,
            "allow" => req.allow.push(v),
            "build_arg" => {
                let (a, b) = v
                    .split_once('=')
                    .ok_or_else(|| ApiError::invalid(format!("build_arg={v:?}: write it as NAME=value")))?;
                req.build_args.insert(a.to_string(), b.to_string());
            }
            "memory_mb" => req.memory_mb = Some(num(&k, &v)?),
            "timeout_s" => req.timeout_s = Some(num(&k, &v)?),
            "cpu" => {
                req.cpu = Some(v.parse::<f64>().map_err(|_| ApiError::invalid(format!("cpu={v:?} is not a number")))?)
            }
            _ => {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter {k:?}; known: name, file, no_cache, public, allow, build_arg, memory_mb, cpu, timeout_s"
                )))
            }
        }
    }
    req.name = name.ok_or_else(|| ApiError::invalid("missing `name`: POST /v1/images/build?name=NAME"))?;
    Ok(req)
}

fn line(ev: &BuildEvent) -> Result<Bytes, Infallible> {
    let mut v = serde_json::to_vec(ev).expect("events serialise");
    v.push(b'\n');
    Ok(Bytes::from(v))
}

fn error_event(f: BuildFailure) -> BuildEvent {
    let e = f.error;
    BuildEvent::Error {
        error: ErrorDetail { code: e.code().into(), message: e.message.clone(), retryable: e.retryable() },
        line: f.line,
        tail: f.tail,
    }
}

pub async fn build(
    State(app): State<AppState>,
    Leased(caller, lease): Leased,
    ApiQuery(pairs): ApiQuery<Vec<(String, String)>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req = match options(pairs) {
        Ok(r) => r,
        Err(e) => return Err(super::files::refused(body, e).await),
    };
    // Admitted (one of the tenant's builds, its quota, the server's spool budget) before a byte is read.
    let mut upload = match app.control.begin_build(&caller, &req.name, req.public) {
        Ok(u) => u,
        Err(e) => return Err(super::files::refused(body, e).await),
    };
    let context = spool(&app, body, &mut upload).await?;
    let control = std::sync::Arc::clone(&app.control);
    let (events_tx, mut events_rx) = tokio::sync::mpsc::unbounded_channel();
    // Its own task: a client that goes away does not cut the build short (its build sandboxes are
    // deleted by the build itself, whatever happens).
    let task = tokio::spawn(async move { control.build_image(&caller, req, upload, context, events_tx).await });
    if !wants_ndjson(&headers) {
        drop(events_rx);
        let result = task.await.map_err(|e| ApiError::from(sandlot_control::Error::internal(e.to_string())))?;
        return match result {
            Ok(image) => Ok((StatusCode::CREATED, Json(image)).into_response()),
            Err(f) => {
                let mut e = f.error;
                if let Some(tail) = f.tail.filter(|t| !t.is_empty()) {
                    e.message = format!("{}\n--- last output ---\n{tail}", e.message);
                }
                Err(e.into())
            }
        };
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(256);
    tokio::spawn(async move {
        while let Some(ev) = events_rx.recv().await {
            // Step lines must reach the client; output a slow client has no room for is dropped.
            match ev {
                BuildEvent::Output { .. } => {
                    let _ = tx.try_send(line(&ev));
                }
                ev => {
                    if tx.send(line(&ev)).await.is_err() {
                        break;
                    }
                }
            }
        }
        let last = match task.await {
            Ok(Ok(image)) => BuildEvent::Done { image: Box::new(image) },
            Ok(Err(f)) => error_event(f),
            Err(e) => error_event(sandlot_control::Error::internal(e.to_string()).into()),
        };
        let _ = tx.send(line(&last)).await;
    });
    Ok(leased(&app, lease, ([(header::CONTENT_TYPE, NDJSON)], channel_body(rx)).into_response()))
}

pub async fn from_snapshot(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<SnapshotImage>,
) -> Result<Response, ApiError> {
    let image = app.control.snapshot_image(&caller, &id, &req.name).await?;
    Ok((StatusCode::CREATED, Json(image)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(q: &[(&str, &str)]) -> Vec<(String, String)> {
        q.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn options_take_repeated_allow_and_build_args_and_refuse_unknown_ones() {
        let req = options(pairs(&[
            ("name", "app"),
            ("allow", "a.test"),
            ("allow", "b.test"),
            ("build_arg", "V=1=2"),
            ("no_cache", "true"),
            ("memory_mb", "256"),
        ]))
        .unwrap();
        assert_eq!(req.name, "app");
        assert_eq!(req.allow, ["a.test", "b.test"]);
        assert_eq!(req.build_args.get("V").map(String::as_str), Some("1=2"));
        assert!(req.no_cache);
        assert_eq!(req.memory_mb, Some(256));
        assert!(options(pairs(&[("allow", "x")])).unwrap_err().message.contains("missing `name`"));
        assert!(options(pairs(&[("name", "a"), ("tag", "x")]))
            .unwrap_err()
            .message
            .contains("unknown query parameter"));
        assert!(options(pairs(&[("name", "a"), ("build_arg", "X")])).unwrap_err().message.contains("NAME=value"));
    }
}
