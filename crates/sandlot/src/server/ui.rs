//! `GET /ui/`: the web dashboard, static files embedded in the binary (`crates/sandlot/ui/`).
//!
//! The files need no key: they hold no data. Every page fetches what it shows from the `/v1` API with
//! the key the user signs in with (kept in the tab's `sessionStorage`, sent as `Authorization`).
//! Each answer carries a strict Content-Security-Policy: scripts, styles, fonts and images from this
//! origin only, connections to this origin only, no inline script, no `eval`, no framing. The
//! terminal's own document (`terminal.html`) alone also allows inline styles, because xterm.js writes
//! its cell-size and theme rules into `<style>` elements it creates; scripts stay `'self'` there too.
//! Files are revalidated by their ETag (a hash of their bytes), so a new binary's files are seen at once.

use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use sha2::{Digest, Sha256};

use super::AppState;

/// The policy of every dashboard answer (`docs/SECURITY.md`, "The dashboard").
pub const CSP: &str = "default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self' data:; \
style-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The terminal document's policy: [`CSP`] plus inline styles, which xterm.js's renderer needs (it
/// creates `<style>` elements for its cell geometry and colours). Nothing untrusted is parsed as HTML
/// there: the terminal draws sandbox output as text.
pub const CSP_TERMINAL: &str = "default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self' data:; \
style-src 'self' 'unsafe-inline'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One embedded file: its path under `/ui/`, content type and bytes.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $ty:expr) => {
        Asset { path: $path, content_type: $ty, bytes: include_bytes!(concat!("../../ui/", $path)) }
    };
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

static ASSETS: &[Asset] = &[
    asset!("index.html", HTML),
    asset!("terminal.html", HTML),
    asset!("style.css", CSS),
    asset!("terminal.css", CSS),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("js/app.js", JS),
    asset!("js/api.js", JS),
    asset!("js/dom.js", JS),
    asset!("js/chart.js", JS),
    asset!("js/format.js", JS),
    asset!("js/signin.js", JS),
    asset!("js/list.js", JS),
    asset!("js/sandbox.js", JS),
    asset!("js/files.js", JS),
    asset!("js/audit.js", JS),
    asset!("js/images.js", JS),
    asset!("js/terminal.js", JS),
    asset!("vendor/xterm/xterm.mjs", JS),
    asset!("vendor/xterm/xterm.css", CSS),
    asset!("vendor/xterm/LICENSE", TEXT),
    asset!("vendor/addon-fit/addon-fit.mjs", JS),
    asset!("vendor/addon-fit/LICENSE", TEXT),
];

/// `"<first 16 bytes of the SHA-256, hex>"` of each asset, in [`ASSETS`] order, computed once.
fn etags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                let d = Sha256::digest(a.bytes);
                let hex: String = d[..16].iter().map(|b| format!("{b:02x}")).collect();
                format!("\"{hex}\"")
            })
            .collect()
    })
}

/// The dashboard's routes: `/ui` redirects to `/ui/`, `/ui/` is `index.html`, `/ui/{file}` a file.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|headers: HeaderMap| async move { serve("index.html", &headers) }))
        .route("/ui/{*path}", get(|Path(path): Path<String>, headers: HeaderMap| async move { serve(&path, &headers) }))
}

/// The security headers of every `/ui/` answer, found or not.
fn secure(resp: &mut Response, path: &str) {
    let h = resp.headers_mut();
    let csp = if path == "terminal.html" { CSP_TERMINAL } else { CSP };
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(csp));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    h.insert("cross-origin-resource-policy", HeaderValue::from_static("same-origin"));
}

fn serve(path: &str, headers: &HeaderMap) -> Response {
    let Some(i) = ASSETS.iter().position(|a| a.path == path) else {
        let mut resp = (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, TEXT)],
            "no such dashboard file: the dashboard starts at /ui/\n",
        )
            .into_response();
        secure(&mut resp, path);
        return resp;
    };
    let asset = &ASSETS[i];
    let etag = &etags()[i];
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.content_type)], asset.bytes).into_response()
    };
    let h = resp.headers_mut();
    h.insert(header::ETAG, HeaderValue::from_str(etag).expect("hex is a valid header value"));
    // Revalidate every time: the names carry no version, and a 304 costs one round trip.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    secure(&mut resp, path);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_named_once_and_typed_by_its_extension() {
        for (i, a) in ASSETS.iter().enumerate() {
            assert!(ASSETS[..i].iter().all(|b| b.path != a.path), "{} twice", a.path);
            let want = match a.path.rsplit_once('.').map(|(_, e)| e) {
                Some("html") => HTML,
                Some("js" | "mjs") => JS,
                Some("css") => CSS,
                Some("svg") => "image/svg+xml",
                _ => TEXT,
            };
            assert_eq!(a.content_type, want, "{}", a.path);
        }
    }

    #[test]
    fn no_html_file_has_inline_script_or_handlers() {
        for a in ASSETS.iter().filter(|a| a.content_type == HTML) {
            let text = std::str::from_utf8(a.bytes).unwrap().to_ascii_lowercase();
            for (i, _) in text.match_indices("<script") {
                let tag = &text[i..i + text[i..].find('>').unwrap()];
                assert!(tag.contains(" src="), "{}: inline <script> at byte {i}", a.path);
            }
            assert!(!text.contains(" style="), "{}: inline style attribute", a.path);
            for word in text.split(|c: char| c.is_whitespace() || c == '<') {
                assert!(!(word.starts_with("on") && word.contains('=')), "{}: inline handler {word}", a.path);
            }
        }
    }

    #[test]
    fn an_unchanged_file_answers_not_modified_and_every_answer_has_the_policy() {
        let first = serve("index.html", &HeaderMap::new());
        assert_eq!(first.status(), StatusCode::OK);
        let etag = first.headers()[header::ETAG].clone();
        assert_eq!(first.headers()[header::CONTENT_SECURITY_POLICY], CSP);
        let mut h = HeaderMap::new();
        h.insert(header::IF_NONE_MATCH, etag);
        let again = serve("index.html", &h);
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        let missing = serve("nope.js", &HeaderMap::new());
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        assert_eq!(missing.headers()[header::CONTENT_SECURITY_POLICY], CSP);
        assert_eq!(serve("terminal.html", &HeaderMap::new()).headers()[header::CONTENT_SECURITY_POLICY], CSP_TERMINAL);
    }
}
