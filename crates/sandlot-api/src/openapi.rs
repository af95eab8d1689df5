//! The OpenAPI 3.1 document of the `/v1` API, built from the wire types of this crate.
//!
//! Every body and event schema is derived (schemars) from the serde types the server and the clients
//! share, so it cannot drift from them: request bodies as the server parses them (what may be left
//! out, what is refused), answers as the server writes them (what is always sent). What a type cannot
//! say is in one table here: each route's method, path, parameters, the body it takes, its answers
//! with their media types (JSON, NDJSON streams of events, raw bytes) and the errors it may answer.
//! The server serves the result at `GET /v1/openapi.json`, `sandlot openapi` prints it, and
//! `docs/openapi.json` is it, checked byte for byte by this module's test.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

use crate::*;

/// Every stable error code with its HTTP status, whether the server marks it `retryable`, and what it
/// means: the `code` enum of the error body and the error answers of the document. The server decides
/// statuses in one place (`crates/sandlot/src/server/error.rs`); a test there holds it to this table.
pub const ERROR_CODES: &[(&str, u16, bool, &str)] = &[
    (
        codes::INVALID_REQUEST,
        400,
        false,
        "malformed JSON or query, unknown field, value out of range, bad tar entry, JSON body over 16 MiB \
         (also the answer, with 405, to a method a route does not take)",
    ),
    (codes::UNAUTHENTICATED, 401, false, "missing, malformed, unknown, expired or revoked API key"),
    (codes::FORBIDDEN, 403, false, "a valid key, but the route is admin-only"),
    (codes::PERMISSION_DENIED, 403, false, "the sandbox user may not access the path (EACCES, EPERM, EROFS)"),
    (codes::REGISTRY_DENIED, 403, false, "an image registry refused the pull's credentials"),
    (codes::NOT_FOUND, 404, false, "no such sandbox (for this tenant), snapshot, image, key, process or route"),
    (codes::FILE_NOT_FOUND, 404, false, "the path does not exist inside the sandbox"),
    (
        codes::CONFLICT,
        409,
        false,
        "the sandbox's state does not allow this (stopped, failed, deleted, ...), or the process already exited",
    ),
    (codes::WRONG_FILE_KIND, 409, false, "a directory where a file is needed, or the reverse"),
    (codes::ALREADY_EXISTS, 409, false, "the destination, sandbox name or snapshot name exists"),
    (codes::DIRECTORY_NOT_EMPTY, 409, false, "removing a non-empty directory without `recursive=true`"),
    (
        codes::TOO_LARGE,
        413,
        false,
        "upload over `--max-upload-mb`, listing over 10 000 entries, process listing over 16 MiB, disk full",
    ),
    (
        codes::LIMIT_REACHED,
        429,
        true,
        "a server, tenant or sandbox limit is reached (sandboxes, snapshots, output room, watches, \
         supervisor connections); retry when something has ended",
    ),
    (codes::SERVER_FULL, 429, true, "running sandboxes hold the host's memory, disk or pids; retry later"),
    (codes::INTERNAL, 500, false, "a bug or a host problem (also: the sandbox failed to start); see the server log"),
    (codes::PORT_UNREACHABLE, 502, true, "nothing answers on the sandbox port"),
    (
        codes::REGISTRY_UNAVAILABLE,
        502,
        true,
        "an image registry could not be reached, its certificate is not trusted, or its data did not match \
         its digests",
    ),
    (
        codes::UNAVAILABLE,
        503,
        true,
        "the API's connection caps are reached (answered before the request is read); retry with backoff",
    ),
];

/// The document as served and committed: pretty JSON and a final newline.
pub fn document_text() -> String {
    let mut text = serde_json::to_string_pretty(&sorted(document())).expect("a JSON value serialises");
    text.push('\n');
    text
}

/// `value` with every object's keys in order, whether or not serde_json keeps insertion order (its
/// `preserve_order` feature, which any crate of a build may turn on): the text is the same either way.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// The OpenAPI 3.1 document of the `/v1` API (and `GET /healthz`).
pub fn document() -> Value {
    // Request bodies are described as the server parses them, answers as it writes them: a field with
    // a default may be left out of a request, and is always present in an answer.
    let mut requests = generator(SchemaSettings::draft2020_12().for_deserialize(), REQUESTS);
    let mut answers = generator(SchemaSettings::draft2020_12().for_serialize(), ANSWERS);
    let mut paths = Map::new();
    let mut tags: Vec<&str> = Vec::new();
    for op in routes() {
        if !tags.contains(&op.tag) {
            tags.push(op.tag);
        }
        let item = paths.entry(op.path.to_string()).or_insert_with(|| json!({}));
        let operation = op.operation(&mut requests, &mut answers);
        let previous = item.as_object_mut().expect("a path item").insert(op.method.to_string(), operation);
        assert!(previous.is_none(), "{} {} is in the route table twice", op.method, op.path);
    }
    // The error answers of `components.responses` refer to it.
    let error_body = answers.subschema_for::<ErrorBody>();
    assert_eq!(error_body.get("$ref"), Some(&json!(format!("#{ANSWERS}/ErrorBody"))));
    let mut schemas = merge(requests.take_definitions(true), answers.take_definitions(true), &mut paths);
    let codes: Vec<&str> = ERROR_CODES.iter().map(|(code, ..)| *code).collect();
    let code =
        schemas.get_mut("ErrorDetail").and_then(|s| s.pointer_mut("/properties/code")).expect("ErrorDetail has a code");
    code["enum"] = json!(codes);
    code["description"] = json!(
        "Stable machine code (the table of `components.responses`); a newer server may add codes, so \
         treat an unknown one by its HTTP status."
    );
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "sandlot",
            "version": env!("CARGO_PKG_VERSION"),
            "summary": "Self-hosted sandboxes for untrusted code: the native HTTP API (/v1).",
            "description": DESCRIPTION,
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "servers": [{"url": format!("http://{}", crate::DEFAULT_LISTEN), "description": "`sandlot serve`'s default address"}],
        "security": [{"apiKey": []}],
        "tags": tags.iter().map(|t| json!({"name": t})).collect::<Vec<_>>(),
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": error_responses(),
            "securitySchemes": {
                "apiKey": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key (`sl_…`): `Authorization: Bearer <key>`, the scheme written `Bearer`. \
                        Each key acts for one tenant; the admin key (`<state-dir>/admin.key`) also for the admin routes.",
                },
                "previewToken": {
                    "type": "apiKey",
                    "in": "query",
                    "name": "sandlot_token",
                    "description": "The per-port token of an exposed port's preview URL (then kept as a cookie of the \
                        same name). Admits that port of that sandbox only, on the path-routed form only when the \
                        server has no preview domain.",
                },
            },
        },
    })
}

const DESCRIPTION: &str = "sandlot runs code you do not trust in sandboxes: an application asks for a \
sandbox, puts files in, runs commands and streams their output, takes files back and deletes the sandbox.\n\n\
This document is generated from the wire types in `crates/sandlot-api` (`sandlot openapi` prints it; \
`GET /v1/openapi.json` serves it without a key: it is public knowledge). docs/API.md is the reference \
with examples, limits and the reasons behind them.\n\n\
**Authentication.** Every route except `GET /healthz` and `GET /v1/openapi.json` needs `Authorization: \
Bearer <key>`. A key acts for one tenant; another tenant's sandbox answers `404 not_found`, never 403.\n\n\
**Bodies.** JSON bodies need `Content-Type: application/json`, reject unknown fields and take at most 16 MiB; \
query strings reject unknown parameters.\n\n\
**Errors.** Every error answer is `{\"error\": {\"code\", \"message\", \"retryable\"}}` (`ErrorBody`); \
`components.responses` lists each HTTP status with its codes.\n\n\
**Streams.** With `Accept: application/x-ndjson`, exec, image pulls, imports and builds answer a stream \
of JSON objects, one per line, each tagged by `type` (`ExecEvent`, `PullEvent`, `BuildEvent`); process \
logs and directory watches always do (`ExecEvent`, `WatchEvent`). The schema given for an \
`application/x-ndjson` answer is the schema of one line.\n\n\
**Not described here.** The E2B-compatible surface under `/e2b` (E2B's control plane) and the envd \
emulation reached with the `E2b-Sandbox-Id` header follow E2B's own API (docs/API.md, \"E2B compatibility\"); \
preview origins `{port}-{id}.{domain}` proxy to sandbox ports as `/v1/sandboxes/{id}/ports/{port}/…` does.";

/// Where the two generators put their references until [`merge`] names them.
const REQUESTS: &str = "/components/request-schemas";
const ANSWERS: &str = "/components/answer-schemas";

fn generator(settings: SchemaSettings, path: &'static str) -> SchemaGenerator {
    settings.with(|s| s.definitions_path = path.into()).into_generator()
}

/// The schemas of both generators under `components.schemas`, with the references in them and in
/// `paths` pointing there. A type whose request schema differs from its answer schema (a field with a
/// default: optional in a request, always sent in an answer), or that refers to such a type, keeps
/// its name for the answer and is `{Name}Request` for the request.
fn merge(
    requests: Map<String, Value>,
    answers: Map<String, Value>,
    paths: &mut Map<String, Value>,
) -> Map<String, Value> {
    let neutral = |v: &Value| rewrite(v.clone(), &|_, name| format!("#/components/schemas/{name}"));
    let mut split: std::collections::BTreeSet<String> = requests
        .iter()
        .filter(|(name, schema)| answers.get(*name).is_some_and(|a| neutral(a) != neutral(schema)))
        .map(|(name, _)| name.clone())
        .collect();
    // A schema that refers to a split one differs too: its references go to different schemas.
    loop {
        let more: Vec<String> = requests
            .iter()
            .filter(|(name, schema)| answers.contains_key(*name) && !split.contains(*name) && refers_to(schema, &split))
            .map(|(name, _)| name.clone())
            .collect();
        if more.is_empty() {
            break;
        }
        split.extend(more);
    }
    let name_of = |prefix: &str, name: &str| -> String {
        if prefix == REQUESTS && split.contains(name) {
            format!("#/components/schemas/{name}Request")
        } else {
            format!("#/components/schemas/{name}")
        }
    };
    let mut schemas = Map::new();
    for (name, schema) in answers {
        schemas.insert(name, rewrite(schema, &name_of));
    }
    for (name, schema) in requests {
        let key = if split.contains(&name) { format!("{name}Request") } else { name };
        let schema = rewrite(schema, &name_of);
        if let Some(previous) = schemas.insert(key.clone(), schema.clone()) {
            assert_eq!(previous, schema, "two schemas are named {key}");
        }
    }
    for item in paths.values_mut() {
        *item = rewrite(item.take(), &name_of);
    }
    schemas
}

/// `value` with each reference of either generator replaced by `to(prefix, name)`.
fn rewrite(value: Value, to: &dyn Fn(&str, &str) -> String) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| match (&*k, &v) {
                    ("$ref", Value::String(r)) => {
                        let target = [REQUESTS, ANSWERS]
                            .into_iter()
                            .find_map(|p| Some(to(p, r.strip_prefix('#')?.strip_prefix(p)?.strip_prefix('/')?)))
                            .unwrap_or_else(|| r.clone());
                        (k, Value::String(target))
                    }
                    _ => (k, rewrite(v, to)),
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(|v| rewrite(v, to)).collect()),
        other => other,
    }
}

/// Whether `schema` refers to one of `names` (in the request generator's references).
fn refers_to(schema: &Value, names: &std::collections::BTreeSet<String>) -> bool {
    match schema {
        Value::Object(m) => m.iter().any(|(k, v)| match (k.as_str(), v) {
            ("$ref", Value::String(r)) => r
                .strip_prefix('#')
                .and_then(|r| r.strip_prefix(REQUESTS))
                .and_then(|r| r.strip_prefix('/'))
                .is_some_and(|n| names.contains(n)),
            _ => refers_to(v, names),
        }),
        Value::Array(a) => a.iter().any(|v| refers_to(v, names)),
        _ => false,
    }
}

/// The reusable error answers: one per HTTP status, naming its codes.
fn error_responses() -> Value {
    let mut responses = Map::new();
    for (_, status, ..) in ERROR_CODES {
        if responses.contains_key(&error_name(*status)) {
            continue;
        }
        let lines: Vec<String> = ERROR_CODES
            .iter()
            .filter(|(_, s, ..)| s == status)
            .map(|(code, _, retryable, meaning)| {
                format!("- `{code}`{}: {meaning}", if *retryable { " (retryable)" } else { "" })
            })
            .collect();
        responses.insert(
            error_name(*status),
            json!({
                "description": lines.join("\n"),
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
            }),
        );
    }
    Value::Object(responses)
}

fn error_name(status: u16) -> String {
    format!("Error{status}")
}

type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

fn schema_of<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// What a body holds.
enum Content {
    /// One JSON value.
    Json(SchemaFn),
    /// JSON objects, one per line, each matching the schema.
    Ndjson(SchemaFn),
    /// Raw bytes of this media type.
    Bytes(&'static str),
    /// This document.
    Document,
}

impl Content {
    fn media(&self, g: &mut SchemaGenerator) -> (&'static str, Value) {
        match self {
            Content::Json(f) => ("application/json", json!({"schema": f(g)})),
            Content::Ndjson(f) => (crate::NDJSON, json!({"schema": f(g)})),
            Content::Bytes(media) => (media, json!({"schema": {"type": "string", "format": "binary"}})),
            Content::Document => (
                "application/json",
                json!({"schema": {"type": "object", "description": "An OpenAPI 3.1 document: this one."}}),
            ),
        }
    }
}

/// Who may call a route.
#[derive(Clone, Copy, PartialEq)]
enum Access {
    /// No key needed.
    Public,
    /// Any tenant's key.
    Key,
    /// The admin key only (others: 403 `forbidden`).
    Admin,
    /// The owner's key, or the port's preview token.
    KeyOrPreviewToken,
}

struct Param {
    name: &'static str,
    required: bool,
    schema: Value,
    description: &'static str,
}

struct Answer {
    status: u16,
    description: &'static str,
    content: Vec<Content>,
}

struct RequestBody {
    required: bool,
    description: &'static str,
    content: Vec<Content>,
}

/// One operation of the table.
struct Op {
    /// Lower-case HTTP method.
    method: &'static str,
    /// Path template, `{name}` for each path parameter.
    path: &'static str,
    id: &'static str,
    tag: &'static str,
    summary: &'static str,
    description: &'static str,
    access: Access,
    query: Vec<Param>,
    body: Option<RequestBody>,
    answers: Vec<Answer>,
    errors: Vec<u16>,
}

fn op(method: &'static str, path: &'static str, id: &'static str, tag: &'static str, summary: &'static str) -> Op {
    Op {
        method,
        path,
        id,
        tag,
        summary,
        description: "",
        access: Access::Key,
        query: Vec::new(),
        body: None,
        answers: Vec::new(),
        errors: Vec::new(),
    }
}

impl Op {
    fn doc(mut self, description: &'static str) -> Self {
        self.description = description;
        self
    }

    fn public(mut self) -> Self {
        self.access = Access::Public;
        self
    }

    fn admin(mut self) -> Self {
        self.access = Access::Admin;
        self
    }

    fn preview(mut self) -> Self {
        self.access = Access::KeyOrPreviewToken;
        self
    }

    fn query(mut self, name: &'static str, required: bool, schema: Value, description: &'static str) -> Self {
        self.query.push(Param { name, required, schema, description });
        self
    }

    fn json<T: JsonSchema>(mut self) -> Self {
        self.body = Some(RequestBody {
            required: true,
            description: "JSON, `Content-Type: application/json`; unknown fields are refused.",
            content: vec![Content::Json(schema_of::<T>)],
        });
        self
    }

    /// A JSON body that may be empty (then every field takes its default); no `Content-Type` needed.
    fn optional_json<T: JsonSchema>(mut self) -> Self {
        self.body = Some(RequestBody {
            required: false,
            description: "Optional JSON (no `Content-Type` needed): an empty body means every field's default.",
            content: vec![Content::Json(schema_of::<T>)],
        });
        self
    }

    fn raw(mut self, media: &'static str, description: &'static str) -> Self {
        self.body = Some(RequestBody { required: true, description, content: vec![Content::Bytes(media)] });
        self
    }

    fn answer(mut self, status: u16, description: &'static str, content: Vec<Content>) -> Self {
        self.answers.push(Answer { status, description, content });
        self
    }

    fn ok<T: JsonSchema>(self, status: u16, description: &'static str) -> Self {
        self.answer(status, description, vec![Content::Json(schema_of::<T>)])
    }

    fn no_content(self, description: &'static str) -> Self {
        self.answer(204, description, Vec::new())
    }

    /// Error statuses this route may answer besides 400, 401 (with a key), 403 (admin), 500 and 503.
    fn errors(mut self, statuses: &[u16]) -> Self {
        self.errors.extend_from_slice(statuses);
        self
    }

    fn operation(&self, requests: &mut SchemaGenerator, answers: &mut SchemaGenerator) -> Value {
        let mut parameters: Vec<Value> = path_params(self.path).into_iter().map(|n| path_param(self.path, n)).collect();
        for p in &self.query {
            parameters.push(json!({
                "name": p.name, "in": "query", "required": p.required, "schema": p.schema, "description": p.description,
            }));
        }
        let mut responses = Map::new();
        for a in &self.answers {
            let mut content = Map::new();
            for c in &a.content {
                let (media, object) = c.media(answers);
                content.insert(media.to_string(), object);
            }
            let mut answer = json!({"description": a.description});
            if !content.is_empty() {
                answer["content"] = Value::Object(content);
            }
            responses.insert(a.status.to_string(), answer);
        }
        let mut statuses = vec![400, 500, 503];
        match self.access {
            Access::Public => statuses.retain(|s| *s == 503),
            Access::Key | Access::KeyOrPreviewToken => statuses.push(401),
            Access::Admin => statuses.extend([401, 403]),
        }
        statuses.extend(&self.errors);
        statuses.sort_unstable();
        statuses.dedup();
        for s in statuses {
            assert!(ERROR_CODES.iter().any(|(_, status, ..)| *status == s), "no error code has status {s}");
            responses.insert(s.to_string(), json!({"$ref": format!("#/components/responses/{}", error_name(s))}));
        }
        let mut description = self.description.to_string();
        if self.access == Access::Admin {
            description.push_str(if description.is_empty() { "" } else { "\n\n" });
            description.push_str("Admin only: another key gets `403 forbidden`.");
        }
        let mut operation = json!({
            "operationId": self.id,
            "tags": [self.tag],
            "summary": self.summary,
            "responses": responses,
        });
        if !description.is_empty() {
            operation["description"] = json!(description);
        }
        if !parameters.is_empty() {
            operation["parameters"] = json!(parameters);
        }
        if let Some(body) = &self.body {
            let mut content = Map::new();
            for c in &body.content {
                let (media, object) = c.media(requests);
                content.insert(media.to_string(), object);
            }
            operation["requestBody"] =
                json!({"required": body.required, "description": body.description, "content": content});
        }
        match self.access {
            Access::Public => operation["security"] = json!([]),
            Access::KeyOrPreviewToken => operation["security"] = json!([{"apiKey": []}, {"previewToken": []}]),
            Access::Key | Access::Admin => {}
        }
        operation
    }
}

/// The `{name}`s of a path template, in order.
fn path_params(path: &str) -> Vec<&str> {
    path.split('/').filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}')).collect()
}

fn path_param(path: &str, name: &str) -> Value {
    let (schema, description) = match name {
        "id" if path.starts_with("/v1/keys") => (json!({"type": "string"}), "Key id (`key_…`)."),
        "id" if path.starts_with("/v1/webhooks") => (json!({"type": "string"}), "Webhook id (`wh_…`)."),
        "id" if path.starts_with("/v1/snapshots") => (json!({"type": "string"}), "Snapshot id (`snap_…`) or name."),
        "id" => (json!({"type": "string"}), "Sandbox id (`sb_…`)."),
        "pid" => (
            json!({"type": "integer", "minimum": 1}),
            "API process id (not the kernel's), as `started` or a background exec gave it.",
        ),
        "port" => (json!({"type": "integer", "minimum": 1, "maximum": 65535}), "Port inside the sandbox."),
        "tenant" => (json!({"type": "string"}), "Tenant name."),
        "name" => (
            json!({"type": "string"}),
            "Image name; it may contain `/` and `:` (`/v1/images/127.0.0.1:5000/team/app:1`), written as is.",
        ),
        "path" => (
            json!({"type": "string"}),
            "The rest of the request path, `/` included, passed to the sandbox's server (may be empty).",
        ),
        other => panic!("path parameter {{{other}}} has no description"),
    };
    json!({"name": name, "in": "path", "required": true, "schema": schema, "description": description})
}

fn string() -> Value {
    json!({"type": "string"})
}

fn boolean() -> Value {
    json!({"type": "boolean"})
}

fn user() -> Value {
    json!({"type": "string", "enum": ["user", "root"], "default": "user"})
}

const PATH: &str = "Path inside the sandbox; a relative one is relative to the user's home. 1–4096 bytes, no NUL.";
const USER: &str = "Identity the operation runs as inside the sandbox.";
const NDJSON_EXEC: &str = "With `Accept: application/x-ndjson`: one `ExecEvent` per line as it happens, `exited` last.";

/// Every route of `/v1` and `GET /healthz`, in the router's order.
fn routes() -> Vec<Op> {
    let sandbox = [404, 409, 429];
    let file = [403, 404, 409, 413, 429];
    let mut routes = vec![
        op("get", "/healthz", "health", "server", "The server answers; which host features run degraded")
            .public()
            .ok::<Health>(200, "Always `status: ok` while the server answers."),
        op("get", "/v1/openapi.json", "openapi", "server", "This document")
            .public()
            .answer(200, "The OpenAPI 3.1 document of this server's `/v1` API.", vec![Content::Document]),
        op("post", "/v1/keys", "createKey", "keys", "Create an API key for a tenant")
            .admin()
            .doc("The secret is in the answer only; the server keeps a hash.")
            .json::<CreateKey>()
            .ok::<KeyCreated>(201, "The key, shown once."),
        op("get", "/v1/keys", "listKeys", "keys", "List API keys (never their secrets)")
            .admin()
            .query("tenant", false, string(), "Only this tenant's keys.")
            .ok::<KeyList>(200, "Keys, oldest first; revoked ones too."),
        op("delete", "/v1/keys/{id}", "revokeKey", "keys", "Revoke an API key")
            .admin()
            .no_content("Revoked: requests with it get 401.")
            .errors(&[404, 409]),
        op("get", "/v1/tenants/{tenant}/network", "getTenantNetwork", "tenants", "A tenant's exemptions from the always-deny list")
            .admin()
            .ok::<TenantNetwork>(200, "The tenant's exemptions.")
            .errors(&[404]),
        op("put", "/v1/tenants/{tenant}/network", "setTenantNetwork", "tenants", "Replace a tenant's exemptions from the always-deny list")
            .admin()
            .doc("The tenant's running sandboxes apply them to new connections at once.")
            .json::<TenantNetwork>()
            .ok::<TenantNetwork>(200, "The exemptions now in force.")
            .errors(&[404]),
        op("get", "/v1/audit", "audit", "audit", "The audit log, newest first")
            .doc("A tenant key sees its tenant's records; the admin key sees every tenant's.")
            .query("sandbox_id", false, string(), "Only this sandbox's records.")
            .query("limit", false, json!({"type": "integer", "minimum": 0, "default": 100}), "At most this many (clamped to 1–10 000).")
            .ok::<AuditList>(200, "Records, newest first."),
        op("get", "/v1/usage", "usage", "tenants", "What the caller's tenant holds")
            .ok::<TenantUsage>(200, "Sandboxes, snapshots, images and the bytes they are charged."),
        op("get", "/v1/tenants/{tenant}/usage", "tenantUsage", "tenants", "What a tenant holds (the admin key, or the tenant's own)")
            .ok::<TenantUsage>(200, "Sandboxes, snapshots, images and the bytes they are charged.")
            .errors(&[403, 404]),
        op("get", "/v1/events", "listEvents", "events", "Lifecycle events after a cursor, oldest first")
            .doc("created, started, paused, resumed, stopped, deleted, expired, oom, failed. A tenant key sees its tenant's events; the admin key every tenant's, or one's with `tenant`. Events are kept for the server's retention window (`--events-retention-s`, 7 days by default) and up to a count per tenant. Pass the answer's `next` as `since` to read on.")
            .query("since", false, json!({"type": "integer", "minimum": 0, "default": 0}), "Events with an id above this.")
            .query("limit", false, json!({"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}), "At most this many.")
            .query("sandbox_id", false, string(), "Only this sandbox's events.")
            .query("kind", false, string(), "Only these kinds, comma-separated (`created,deleted`).")
            .query("tenant", false, string(), "The admin key: only this tenant's events.")
            .query("wait_s", false, json!({"type": "integer", "minimum": 0, "maximum": 60, "default": 0}), "When none is there yet, wait up to this long for one (long poll).")
            .ok::<EventList>(200, "Events and the next cursor.")
            .errors(&[403]),
        op("post", "/v1/webhooks", "createWebhook", "events", "Register a webhook for the tenant's events")
            .doc("Each event of the kinds named is POSTed as JSON (an `Event`) with headers `Sandlot-Event-Id`, `Sandlot-Timestamp` (Unix seconds) and `Sandlot-Signature: v1=<hex HMAC-SHA256(secret, \"<timestamp>.<body>\")>`; retried with backoff on connection errors, timeouts, 408, 429 and 5xx; redirects are not followed. Loopback, private and link-local targets are refused unless the server allows them.")
            .json::<CreateWebhook>()
            .ok::<Webhook>(201, "The webhook; `secret` only when the server made it (shown once).")
            .errors(&[429]),
        op("get", "/v1/webhooks", "listWebhooks", "events", "List the tenant's webhooks (the admin key: every tenant's)")
            .ok::<WebhookList>(200, "Webhooks, oldest first, without their secrets."),
        op("get", "/v1/webhooks/{id}", "getWebhook", "events", "Inspect a webhook")
            .ok::<Webhook>(200, "The webhook, without its secret.")
            .errors(&[404]),
        op("delete", "/v1/webhooks/{id}", "deleteWebhook", "events", "Delete a webhook and its delivery log")
            .no_content("Deleted: no further delivery starts.")
            .errors(&[404]),
        op("get", "/v1/webhooks/{id}/deliveries", "webhookDeliveries", "events", "A webhook's delivery log")
            .query("limit", false, json!({"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}), "At most this many.")
            .ok::<DeliveryList>(200, "Attempts, newest first (the newest 1000 are kept).")
            .errors(&[404]),
        op("post", "/v1/sandboxes", "createSandbox", "sandboxes", "Create a sandbox")
            .doc("Answers once the sandbox is `running`. With `name` and `get_or_create`, the tenant's live sandbox of that name is returned (resumed if needed) with 200.")
            .json::<CreateSandbox>()
            .ok::<SandboxInfo>(201, "Created and running.")
            .ok::<SandboxInfo>(200, "`get_or_create`: the existing sandbox of that name.")
            .errors(&[404, 409, 429]),
        op("get", "/v1/sandboxes", "listSandboxes", "sandboxes", "List the tenant's sandboxes that are not deleted")
            .ok::<SandboxList>(200, "Newest first."),
        op("get", "/v1/sandboxes/{id}", "getSandbox", "sandboxes", "Inspect a sandbox")
            .doc("A deleted or expired sandbox of one's own still answers, state `deleted` with its `reason`.")
            .ok::<SandboxInfo>(200, "The sandbox.")
            .errors(&[404]),
        op("delete", "/v1/sandboxes/{id}", "deleteSandbox", "sandboxes", "Delete a sandbox")
            .doc("Kills every process and removes its files; foreground execs still running end `killed`. A second delete is 404.")
            .no_content("Deleted.")
            .errors(&[404]),
        op("post", "/v1/sandboxes/{id}/exec", "exec", "exec", "Run a command")
            .doc("Three answer modes: wait and answer an `ExecResult` (default); stream `ExecEvent`s as NDJSON (`Accept: application/x-ndjson`); or `background: true` (wins over `Accept`), answered at once with the process id. A program that cannot start is not an HTTP error: it ends `exited` with 127 or 126. Validation comes before any output, so a streaming request gets ordinary JSON errors.")
            .json::<ExecRequest>()
            .answer(200, NDJSON_EXEC, vec![Content::Json(schema_of::<ExecResult>), Content::Ndjson(schema_of::<ExecEvent>)])
            .ok::<ProcessStarted>(202, "`background: true`: the process runs; see `/processes/{pid}`.")
            .errors(&sandbox),
        op("post", "/v1/sandboxes/{id}/stop", "stopSandbox", "lifecycle", "Stop a sandbox: processes end, files stay")
            .ok::<SandboxInfo>(200, "Stopped (files synced).")
            .errors(&sandbox),
        op("post", "/v1/sandboxes/{id}/resume", "resumeSandbox", "lifecycle", "Resume a stopped or paused sandbox")
            .ok::<SandboxInfo>(200, "Running again.")
            .errors(&sandbox),
        op("post", "/v1/sandboxes/{id}/pause", "pauseSandbox", "lifecycle", "Freeze every process in memory")
            .doc("The lifetime keeps running while paused.")
            .ok::<SandboxInfo>(200, "Paused.")
            .errors(&sandbox),
        op("post", "/v1/sandboxes/{id}/timeout", "setSandboxTimeout", "lifecycle", "Set the lifetime, from now")
            .json::<SetTimeout>()
            .ok::<SandboxInfo>(200, "The sandbox with its new `expires_at_ms`.")
            .errors(&[404, 409]),
        op("post", "/v1/sandboxes/{id}/snapshot", "snapshotSandbox", "snapshots", "Snapshot a sandbox's files")
            .doc("A read-only copy-on-write snapshot (running, paused or stopped), charged to the tenant's snapshot quota.")
            .optional_json::<CreateSnapshot>()
            .ok::<SnapshotInfo>(201, "The snapshot.")
            .errors(&sandbox),
        op("post", "/v1/sandboxes/{id}/fork", "forkSandbox", "snapshots", "Fork a sandbox into running copies")
            .json::<ForkRequest>()
            .ok::<ForkResult>(201, "The copies, running, each with a copy-on-write copy of the files.")
            .errors(&sandbox),
        op("patch", "/v1/sandboxes/{id}/network", "setSandboxNetwork", "network", "Replace a sandbox's egress policy")
            .doc("Applies to new connections and lookups at once, and to the next request of an open brokered connection. Header values of `rules` are write-only: answers name the headers only.")
            .json::<NetworkSpec>()
            .ok::<SandboxInfo>(200, "The sandbox with its new policy.")
            .errors(&[404, 409]),
        op("post", "/v1/sandboxes/{id}/ports", "exposePort", "ports", "Expose a port of the sandbox")
            .doc("The answer's preview URL reaches `127.0.0.1:port` in the sandbox on an origin of its own, with the token in it.")
            .json::<ExposePort>()
            .ok::<PortInfo>(201, "The preview URL and its token.")
            .errors(&sandbox),
    ];
    // The path-routed preview: any method (and protocol upgrades) passes; these are the usual ones.
    for (method, id) in [
        ("get", "proxyGet"),
        ("post", "proxyPost"),
        ("put", "proxyPut"),
        ("patch", "proxyPatch"),
        ("delete", "proxyDelete"),
    ] {
        routes.push(
            op(method, "/v1/sandboxes/{id}/ports/{port}/{path}", id, "ports", "Reach a sandbox port through the API's origin")
                .preview()
                .doc("Any method is proxied (HTTP/1.1; WebSocket upgrades pass through) to `127.0.0.1:port` in the sandbox, as `/{path}` with the query; `/v1/sandboxes/{id}/ports/{port}` and `…/{port}/` reach `/`. With the owner's key the answer is the server's own; with a preview token (only when the server has no preview domain) every answer is sandboxed by CSP and its cookies dropped. Without key or token: 404.")
                .answer(200, "What the sandbox's server answered (any status, any body).", Vec::new())
                .errors(&[404, 409, 502]),
        );
    }
    routes.extend([
        op("get", "/v1/images", "listImages", "images", "List the images the tenant may boot")
            .ok::<ImageList>(200, "`host`, the tenant's images and the public ones, by name."),
        op("post", "/v1/images/pull", "pullImage", "images", "Pull an image from an OCI registry")
            .doc("What can be refused before anything is fetched is an error status. Then, with `Accept: application/x-ndjson`, progress as `PullEvent` lines (`done` or `error` last); without it, the image when the pull is over. A client that goes away does not cut the pull short.")
            .json::<PullImage>()
            .answer(200, "The image (JSON), or with `Accept: application/x-ndjson` one `PullEvent` per line.", vec![Content::Json(schema_of::<ImageInfo>), Content::Ndjson(schema_of::<PullEvent>)])
            .errors(&[403, 409, 413, 429, 502]),
        op("post", "/v1/images/import", "importImage", "images", "Import an image archive")
            .doc("The body is a `docker save` tarball, an OCI layout as a tar, or a root filesystem tar; gzip or zstd compressed or not; at most `--max-import-mb`.")
            .query("name", false, string(), "Name to store it under; needed when the archive names no image.")
            .query("public", false, boolean(), "Publish it to every tenant (admin key only).")
            .raw("application/octet-stream", "The archive.")
            .answer(200, "The image, `{\"images\": [...]}` for an archive of several, or with `Accept: application/x-ndjson` one `PullEvent` per line.", vec![Content::Json(schema_of::<ImageOrImages>), Content::Ndjson(schema_of::<PullEvent>)])
            .errors(&[403, 409, 413, 429]),
        op("post", "/v1/images/build", "buildImage", "images", "Build an image from a Dockerfile")
            .doc("The body is the build context as a tar; each `RUN` runs in a build sandbox of the caller's, with no network unless `allow`ed. Steps are cached per tenant.")
            .query("name", true, string(), "Name to store the image under.")
            .query("file", false, string(), "The Dockerfile's path in the context (default `Dockerfile`).")
            .query("no_cache", false, boolean(), "Run every step again.")
            .query("allow", false, string(), "A host name, `*.suffix` or CIDR `RUN` steps may reach; repeat it for more.")
            .query("build_arg", false, string(), "`NAME=value` for an `ARG`; repeat it for more.")
            .query("memory_mb", false, json!({"type": "integer", "minimum": 0}), "Memory of each `RUN`'s build sandbox, MiB.")
            .query("cpu", false, json!({"type": "number"}), "CPU of each `RUN`'s build sandbox, cores.")
            .query("timeout_s", false, json!({"type": "integer", "minimum": 0}), "Wall-clock limit of each `RUN`, seconds.")
            .raw("application/x-tar", "The build context.")
            .ok::<ImageInfo>(201, "The image (without `Accept: application/x-ndjson`).")
            .answer(200, "With `Accept: application/x-ndjson`: one `BuildEvent` per line, `done` or `error` last.", vec![Content::Ndjson(schema_of::<BuildEvent>)])
            .errors(&[403, 404, 409, 413, 429]),
        op("post", "/v1/snapshots/{id}/image", "imageFromSnapshot", "images", "Publish a snapshot as an image")
            .doc("The image the snapshot's sandbox booted, with the snapshot's files as one more layer. A snapshot of a `host` sandbox is refused (400).")
            .json::<SnapshotImage>()
            .ok::<ImageInfo>(201, "The image.")
            .errors(&[404, 409, 413, 429]),
        op("get", "/v1/images/{name}", "getImage", "images", "Inspect an image")
            .ok::<ImageInfo>(200, "The image.")
            .errors(&[404]),
        op("delete", "/v1/images/{name}", "deleteImage", "images", "Delete an image")
            .doc("Sandboxes and snapshots of it keep working.")
            .no_content("Deleted.")
            .errors(&[403, 404]),
        op("get", "/v1/snapshots", "listSnapshots", "snapshots", "List the tenant's snapshots")
            .ok::<SnapshotList>(200, "Newest first."),
        op("delete", "/v1/snapshots/{id}", "deleteSnapshot", "snapshots", "Delete a snapshot")
            .doc("Sandboxes made from it are unaffected.")
            .no_content("Deleted.")
            .errors(&[404]),
        op("get", "/v1/sandboxes/{id}/processes", "listProcesses", "exec", "List the processes started through the API")
            .query("tag", false, string(), "Only the processes started with this tag.")
            .ok::<ProcessList>(200, "Oldest first.")
            .errors(&[404, 409, 413]),
        op("post", "/v1/sandboxes/{id}/processes/{pid}/wait", "waitProcess", "exec", "Wait for a process to end")
            .ok::<ExecResult>(200, "How it ended, at once if it already had.")
            .errors(&[404, 409]),
        op("post", "/v1/sandboxes/{id}/processes/{pid}/kill", "killProcess", "exec", "Signal a process's group")
            .optional_json::<KillRequest>()
            .no_content("Sent; the process ends `signaled`.")
            .errors(&[404, 409]),
        op("post", "/v1/sandboxes/{id}/processes/{pid}/stdin", "writeStdin", "exec", "Write to a process's standard input")
            .json::<StdinRequest>()
            .no_content("Written.")
            .errors(&[404, 409]),
        op("post", "/v1/sandboxes/{id}/processes/{pid}/resize", "resizePty", "exec", "Resize a pty process's terminal")
            .json::<ResizeRequest>()
            .no_content("Resized; the process gets SIGWINCH.")
            .errors(&[404, 409]),
        op("get", "/v1/sandboxes/{id}/processes/{pid}/logs", "processLogs", "exec", "A process's events, replayed then followed")
            .query("follow", false, serde_json::json!({"type": "boolean", "default": true}), "`false`: end with the events so far (`exited` only if it has ended).")
            .answer(200, "One `ExecEvent` per line from the first, then live until `exited` (no `Accept` needed).", vec![Content::Ndjson(schema_of::<ExecEvent>)])
            .errors(&[404, 409]),
        op("get", "/v1/sandboxes/{id}/pty", "openTerminal", "exec", "A terminal over WebSocket")
            .doc("A WebSocket (send `Upgrade: websocket`; the server selects the subprotocol `sandlot.v1`). \
Without `pid`, starts a background process on a new pseudo-terminal (default: the user's login shell; it \
outlives the connection, with a 256 KiB scrollback); with `pid`, attaches to one and replays its scrollback. \
Binary frames carry the terminal's bytes both ways (client frames at most 64 KiB); text frames carry JSON \
control messages: from the client `{\"type\":\"resize\",\"rows\":R,\"cols\":C}`, `PtyServerMessage` from the server \
(`started` first, `exit` last, then a close with code 1000). Authenticate with `Authorization: Bearer`, or \
offer the subprotocols `sandlot.v1` and `sandlot.bearer.<API key>` (browsers). At most 8 connections per \
sandbox.")
            .query("cmd", false, string(), "A command line for `/bin/sh -c` (instead of the login shell).")
            .query("argv", false, string(), "Program and arguments, one per repetition (instead of `cmd`).")
            .query("cwd", false, string(), "Working directory (default: the user's home).")
            .query("env", false, string(), "`NAME=value`; repeat it for more.")
            .query("user", false, user(), "Who runs it: `user` or `root` (default: the image's user, else `user`).")
            .query("rows", false, json!({"type": "integer", "minimum": 1, "maximum": 1000, "default": 24}), "Terminal rows.")
            .query("cols", false, json!({"type": "integer", "minimum": 1, "maximum": 1000, "default": 80}), "Terminal columns.")
            .query("pid", false, json!({"type": "integer", "minimum": 0}), "Attach to this terminal process instead (alone, or with `rows` and `cols` to resize it).")
            .answer(101, "Switched to the WebSocket protocol; the JSON of its text frames from the server.", vec![Content::Json(schema_of::<PtyServerMessage>)])
            .errors(&[400, 404, 409, 429]),
        op("get", "/v1/sandboxes/{id}/files/list", "listFiles", "files", "List a directory")
            .query("path", true, string(), PATH)
            .query("user", false, user(), USER)
            .query("depth", false, json!({"type": "integer", "minimum": 1, "maximum": 16, "default": 1}), "Levels below the directory (1: its children).")
            .ok::<FileList>(200, "Entries below it, sorted by path.")
            .errors(&file),
        op("get", "/v1/sandboxes/{id}/files/stat", "statFile", "files", "Metadata of a path (symlinks not followed)")
            .query("path", true, string(), PATH)
            .query("user", false, user(), USER)
            .ok::<FileStat>(200, "The path's metadata.")
            .errors(&file),
        op("get", "/v1/sandboxes/{id}/files/watch", "watchDirectory", "files", "Stream a directory's changes")
            .doc("Until the client goes away (which stops the watch) or the directory is removed.")
            .query("path", true, string(), PATH)
            .query("user", false, user(), USER)
            .query("recursive", false, boolean(), "Watch the whole tree, directories made later included.")
            .answer(200, "One `WatchEvent` per line as changes happen.", vec![Content::Ndjson(schema_of::<WatchEvent>)])
            .errors(&file),
        op("post", "/v1/sandboxes/{id}/files/mkdir", "makeDirectory", "files", "Create a directory")
            .json::<MkdirRequest>()
            .ok::<FileStat>(201, "The directory (also when it existed, with `parents`).")
            .errors(&file),
        op("post", "/v1/sandboxes/{id}/files/move", "moveFile", "files", "Rename a path (one rename(2): not across file systems)")
            .json::<MoveRequest>()
            .ok::<FileStat>(200, "The destination's metadata.")
            .errors(&file),
        op("get", "/v1/sandboxes/{id}/metrics", "sandboxMetrics", "metrics", "A sandbox's recent samples: CPU, memory, processes, disk, network")
            .doc("The server samples every running sandbox every `interval_ms` and keeps `window_s` of samples; a stopped or paused sandbox keeps its last ones until they age out, a deleted one has none.")
            .query("since", false, json!({"type": "integer", "format": "int64"}), "Only samples taken after this time, Unix milliseconds (all kept samples without it).")
            .ok::<SandboxSamples>(200, "Its limits and samples, oldest first.")
            .errors(&[404]),
        op("get", "/metrics", "prometheus", "metrics", "Server, tenant and sandbox metrics in the Prometheus text format")
            .admin()
            .doc("Authorised by the admin key or the scrape token of `--metrics-token-file` (`Authorization: Bearer …`); a tenant's key is 403. docs/API.md lists every metric.")
            .answer(200, "The Prometheus text exposition format, version 0.0.4.", vec![Content::Bytes("text/plain; version=0.0.4")]),
        op("get", "/v1/sandboxes/{id}/files", "readFile", "files", "Read a file, streamed")
            .doc("A failure after the headers aborts the transfer: the client sees a broken body, not a short file.")
            .query("path", true, string(), PATH)
            .query("user", false, user(), USER)
            .answer(200, "The file's bytes.", vec![Content::Bytes("application/octet-stream")])
            .errors(&file),
        op("put", "/v1/sandboxes/{id}/files", "writeFile", "files", "Write a file, streamed")
            .doc("Missing parents are created; the file is written beside the target and renamed into place. At most `--max-upload-mb`.")
            .query("path", true, string(), PATH)
            .query("user", false, user(), USER)
            .query("mode", false, json!({"type": "string", "pattern": "^(0o)?[0-7]{1,5}$", "default": "0644"}), "Octal permission bits, at most `07777`.")
            .raw("application/octet-stream", "The content (any `Content-Type`).")
            .ok::<WriteResult>(201, "Written.")
            .errors(&file),
        op("delete", "/v1/sandboxes/{id}/files", "removeFile", "files", "Remove a file, symlink or directory")
            .query("path", true, string(), PATH)
            .query("user", false, user(), USER)
            .query("recursive", false, boolean(), "Remove a directory with its contents.")
            .no_content("Removed.")
            .errors(&file),
        op("get", "/v1/sandboxes/{id}/files/tar", "downloadDirectory", "files", "Download a directory as a tar, streamed")
            .query("path", true, string(), PATH)
            .query("user", false, user(), USER)
            .answer(200, "The directory's contents, entry names relative to it.", vec![Content::Bytes("application/x-tar")])
            .errors(&file),
        op("put", "/v1/sandboxes/{id}/files/tar", "uploadDirectory", "files", "Unpack a tar into a directory")
            .doc("The directory is made if missing; absolute and `..` entry names are refused. Not atomic. At most `--max-upload-mb`.")
            .query("path", true, string(), PATH)
            .query("user", false, user(), USER)
            .raw("application/x-tar", "An uncompressed tar.")
            .ok::<WriteResult>(201, "Unpacked.")
            .errors(&file),
    ]);
    routes
}

/// The JSON answer of an import: one image, or several for an archive of several.
#[derive(schemars::JsonSchema)]
#[schemars(untagged)]
#[allow(dead_code)]
enum ImageOrImages {
    One(Box<ImageInfo>),
    Several(ImageList),
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json");

    #[test]
    fn the_committed_document_is_the_generated_one() {
        let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
        assert!(
            committed == document_text(),
            "docs/openapi.json is not what the wire types generate; regenerate it with\n\
             \n    cargo run -p sandlot -- openapi > docs/openapi.json\n"
        );
    }

    #[test]
    fn every_route_has_an_id_of_its_own_and_its_path_parameters() {
        let doc = document();
        let mut ids = std::collections::BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                assert!(ids.insert(op["operationId"].as_str().unwrap().to_string()), "{method} {path}: id used twice");
                let declared: Vec<&str> = op["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["in"] == "path")
                    .map(|p| p["name"].as_str().unwrap())
                    .collect();
                assert_eq!(declared, path_params(path), "{method} {path}");
            }
        }
    }

    #[test]
    fn tagged_events_are_one_of_their_variants_each_with_its_type() {
        let doc = document();
        for (name, types) in [
            ("ExecEvent", &["started", "stdout", "stderr", "truncated", "exited", "error"][..]),
            ("PullEvent", &["resolved", "download", "downloaded", "unpacking", "unpacked", "done", "error"][..]),
            ("BuildEvent", &["step", "output", "unpacking", "unpacked", "done", "error"][..]),
        ] {
            let variants = doc["components"]["schemas"][name]["oneOf"].as_array().unwrap_or_else(|| panic!("{name}"));
            let tags: Vec<&str> =
                variants.iter().map(|v| v["properties"]["type"]["const"].as_str().expect("a const tag")).collect();
            assert_eq!(tags, types, "{name}");
            for v in variants {
                assert!(v["required"].as_array().unwrap().contains(&json!("type")), "{name}: {v}");
            }
        }
    }

    #[test]
    fn every_reference_resolves() {
        let doc = document();
        fn walk(v: &Value, doc: &Value) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        let pointer = r.strip_prefix('#').expect("a local reference");
                        assert!(doc.pointer(pointer).is_some(), "{r} does not resolve");
                    }
                    m.values().for_each(|v| walk(v, doc));
                }
                Value::Array(a) => a.iter().for_each(|v| walk(v, doc)),
                _ => {}
            }
        }
        walk(&doc, &doc);
    }

    #[test]
    fn a_request_field_with_a_default_is_optional_and_an_answer_field_always_sent_is_required() {
        let doc = document();
        let schemas = &doc["components"]["schemas"];
        let required = |name: &str| -> Vec<String> {
            schemas[name]["required"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(required("MkdirRequest"), ["path"]);
        assert!(required("ExecRequest").is_empty());
        assert_eq!(schemas["ExecRequest"]["additionalProperties"], json!(false));
        assert!(required("SandboxInfo").contains(&"persistent".to_string()));
        assert!(!required("SandboxInfo").contains(&"reason".to_string()));
        assert!(required("ErrorDetail").contains(&"retryable".to_string()));
    }
}
