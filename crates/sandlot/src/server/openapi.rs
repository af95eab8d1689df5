//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of the `/v1` API (`sandlot_api::openapi`). No key
//! is needed: the document is public knowledge, the same for every server of this version.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;

/// The document, built once.
pub fn text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(sandlot_api::openapi::document_text)
}

pub async fn get() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], text())
}

#[cfg(test)]
mod tests {
    //! The document against the router itself: every documented operation reaches a handler of its
    //! own, its documented query parameters are the ones the handler takes, and each error status is
    //! the one the server answers for that code.

    use std::sync::Arc;
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::{Method, Request, StatusCode};
    use clap::Parser;
    use serde_json::Value;
    use tower::ServiceExt;

    use super::super::{app, e2b, error, router, App, ServeArgs};

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        serve: ServeArgs,
    }

    struct Server {
        router: axum::Router,
        admin_key: String,
        _dir: tempfile::TempDir,
    }

    /// The server's router over the fake driver, with `sandlot serve`'s default settings.
    fn server() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let store: Box<dyn sandlot_store::Store> =
            Box::new(sandlot_store::SqliteStore::open(&dir.path().join("sandlot.db")).unwrap());
        let admin_key = store.ensure_admin_key().unwrap().expect("a new store has no admin key yet");
        let engine = sandlot_engine::Engine::new(
            Arc::new(sandlot_engine::fake::FakeDriver::new()),
            sandlot_engine::EngineConfig {
                net: sandlot_engine::network::offline(),
                start_timeout: Duration::from_secs(5),
            },
            256 << 20,
        );
        let args = Args::parse_from(["sandlot"]).serve;
        let host = sandlot_control::capacity::Host { memory_mb: 16_384, pid_max: 1 << 22, disk_mb: None };
        let control = sandlot_control::Control::new(engine, store, args.control_config().unwrap(), host, None);
        let app = Arc::new(App {
            control,
            preview_domain: app::preview_domain(args.preview_domain.as_deref(), args.listen),
            listen: args.listen,
            spool_dir: dir.path().to_path_buf(),
            e2b: e2b::E2bSettings::new(&[], None).unwrap(),
            mcp_shutdown: tokio_util::sync::CancellationToken::new(),
            http_metrics: Default::default(),
            streams: Default::default(),
        });
        Server { router: router(app), admin_key, _dir: dir }
    }

    /// Every documented operation: method, path with its parameters filled in, and the operation.
    fn operations(doc: &Value) -> Vec<(Method, String, Value)> {
        let mut ops = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            let concrete = path
                .replace("{id}", "sb_nosuchsandbox0000000")
                .replace("{pid}", "1")
                .replace("{port}", "8000")
                .replace("{tenant}", "alice")
                .replace("{name}", "registry.example:5000/team/app:1")
                .replace("{path}", "some/page");
            assert!(!concrete.contains('{'), "{path}: a path parameter the test does not fill");
            for (method, op) in item.as_object().unwrap() {
                ops.push((method.to_uppercase().parse().unwrap(), concrete.clone(), op.clone()));
            }
        }
        ops
    }

    async fn call(router: &axum::Router, method: Method, uri: &str, key: Option<&str>) -> (StatusCode, Value) {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(key) = key {
            req = req.header("authorization", format!("Bearer {key}"));
        }
        let resp = router.clone().oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 16 << 20).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    #[tokio::test]
    async fn every_documented_operation_reaches_a_handler_that_asks_for_the_documented_credentials() {
        let server = server();
        let doc: Value = serde_json::from_str(super::text()).unwrap();
        let ops = operations(&doc);
        assert!(ops.len() >= 50, "only {} operations documented", ops.len());
        for (method, uri, op) in ops {
            let public = op["security"] == serde_json::json!([]);
            // A key no server issued: only a handler that checks keys answers 401; the router's
            // fallbacks answer 404 ("route not found") and 405.
            let (status, body) = call(&server.router, method.clone(), &uri, Some("sl_not_a_key_of_this_server")).await;
            if public {
                assert_eq!(status, StatusCode::OK, "{method} {uri}: {body}");
            } else {
                assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {uri}: {body}");
                assert_eq!(body["error"]["code"], "unauthenticated", "{method} {uri}: {body}");
            }
        }
        // The same check tells a missing route: the fallback answers it.
        let (status, body) = call(&server.router, Method::GET, "/v1/no-such-route", Some("sl_x")).await;
        assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")));
        let (status, _) = call(&server.router, Method::PUT, "/v1/sandboxes", Some("sl_x")).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    }

    #[tokio::test]
    async fn every_operation_takes_the_query_parameters_documented_and_refuses_others() {
        let server = server();
        let doc: Value = serde_json::from_str(super::text()).unwrap();
        for (method, uri, op) in operations(&doc) {
            if op["security"] == serde_json::json!([]) || op["operationId"].as_str().unwrap().starts_with("proxy") {
                // Public routes and the port proxy pass any query on.
                continue;
            }
            let mut query = vec!["bogus=1".to_string()];
            for p in op["parameters"].as_array().into_iter().flatten().filter(|p| p["in"] == "query") {
                let value = match p["schema"]["type"].as_str() {
                    Some("integer") => "2",
                    Some("number") => "0.5",
                    Some("boolean") => "true",
                    _ => match p["name"].as_str() {
                        Some("user") => "root",
                        Some("mode") => "0644",
                        Some("build_arg") => "A=b",
                        _ => "x",
                    },
                };
                query.push(format!("{}={value}", p["name"].as_str().unwrap()));
            }
            let documented = query.len() > 1;
            // With an undocumented parameter first: a handler that takes a query refuses it by name.
            let (status, body) =
                call(&server.router, method.clone(), &format!("{uri}?{}", query.join("&")), Some(&server.admin_key))
                    .await;
            let refused =
                status == StatusCode::BAD_REQUEST && body["error"]["message"].as_str().unwrap_or("").contains("bogus");
            assert_eq!(
                refused, documented,
                "{method} {uri}: documented query {query:?}; the server answered {status} {body}"
            );
            if documented {
                // Without it, every documented one is taken.
                let uri = format!("{uri}?{}", query[1..].join("&"));
                let (status, body) = call(&server.router, method.clone(), &uri, Some(&server.admin_key)).await;
                let message = body["error"]["message"].as_str().unwrap_or("");
                assert!(
                    !(status == StatusCode::BAD_REQUEST && message.contains("query")),
                    "{method} {uri}: the server refused a documented parameter: {body}"
                );
            }
        }
    }

    /// The methods a `.route(…)` line of the router takes (`get(handler)`, `.put(handler)`, …).
    fn methods_of(line: &str) -> Vec<&'static str> {
        let after_path = line.splitn(3, '"').nth(2).unwrap_or("");
        ["get", "post", "put", "patch", "delete", "any"]
            .into_iter()
            .filter(|m| {
                after_path
                    .match_indices(&format!("{m}("))
                    .any(|(i, _)| !after_path[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
            })
            .collect()
    }

    #[test]
    fn every_route_of_the_router_is_documented() {
        let doc: Value = serde_json::from_str(super::text()).unwrap();
        let documented = |path: &str, method: &str| doc["paths"][path][method].is_object();
        let routes: Vec<&str> =
            include_str!("mod.rs").lines().map(str::trim).filter(|l| l.starts_with(".route(\"")).collect();
        assert!(routes.len() > 40, "the router's .route lines were not found");
        for line in routes {
            let path = line.split('"').nth(1).unwrap();
            let methods = methods_of(line);
            assert!(!methods.is_empty(), "{line}: no method found");
            if path.contains("/ports/{port}") {
                // The proxy, any method: documented once, as its usual methods.
                assert_eq!(methods, ["any"], "{line}");
                for m in ["get", "post", "put", "patch", "delete"] {
                    assert!(documented("/v1/sandboxes/{id}/ports/{port}/{path}", m), "{m} {path}");
                }
                continue;
            }
            let path = path.replace("{*name}", "{name}");
            for m in methods {
                assert!(documented(&path, m), "{} {path} is routed but not in the OpenAPI document", m.to_uppercase());
            }
        }
    }

    #[test]
    fn each_error_code_has_the_status_and_retry_hint_the_server_answers() {
        use sandlot_control::Kind;
        let table = sandlot_api::openapi::ERROR_CODES;
        let kinds = [
            Kind::Invalid,
            Kind::Unauthenticated,
            Kind::Forbidden,
            Kind::NotFound,
            Kind::Conflict,
            Kind::AlreadyExists,
            Kind::LimitReached,
            Kind::ServerFull,
            Kind::TooLarge,
            Kind::FileNotFound,
            Kind::PermissionDenied,
            Kind::WrongFileKind,
            Kind::DirectoryNotEmpty,
            Kind::PortUnreachable,
            Kind::RegistryDenied,
            Kind::RegistryUnavailable,
            Kind::Internal,
        ];
        for kind in kinds {
            let row = table.iter().find(|(code, ..)| *code == kind.code()).unwrap_or_else(|| panic!("{kind:?}"));
            assert_eq!((row.1, row.2), (error::status(kind).as_u16(), kind.retryable()), "{}", kind.code());
        }
        // The listener's own answer (before any request is read), and nothing else.
        let listener = table.iter().filter(|(code, ..)| !kinds.iter().any(|k| k.code() == *code)).collect::<Vec<_>>();
        assert_eq!(listener, [&(sandlot_api::codes::UNAVAILABLE, 503, true, listener[0].3)]);
    }
}
