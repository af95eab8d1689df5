//! Egress: deny by default, allowlists enforced on the host, DNS answered by the daemon, SNI/Host
//! binding, always-denied ranges, runtime policy changes, credential brokering, and the audit trail.
//!
//! All traffic stays on this machine: "the internet" is a server on 127.0.0.1 reached through
//! `--resolve NAME=127.0.0.1`, and every server runs with `--test-loopback-only`, so the proxy refuses
//! (and logs as a bug) any attempt to dial a non-loopback address.
//!
//! By subject:
//! - [`policy`]: deny by default, allowlists by name and CIDR, DNS, Host/SNI binding, runtime changes,
//!   the CLI and the config file.
//! - [`ranges`]: always-denied ranges (metadata, private, the host's gateway) and tenant exemptions.
//! - [`broker`]: credential brokering and TLS, kept upstream connections.
//! - [`previews`]: inbound exposed ports and their origins.
//! - [`bounds`]: connection, audit and socket-buffer bounds per sandbox.

mod bounds;
mod broker;
mod policy;
mod previews;
mod ranges;

pub(crate) use broker::tls_upstream;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use sandlot_client::api::{CreateSandbox, NetworkSpec};
use sandlot_client::{Client, Sandbox};

use crate::harness::Server;

/// The credential the brokering tests inject (and look for where it must never be).
pub(crate) const SECRET: &str = "sk-test-4f1b9c2e7d3a";

/// A plain HTTP server on 127.0.0.1 answering every request with `body`.
fn http_server(body: &'static str) -> u16 {
    http_server_on("127.0.0.1:0", body)
}

/// A plain HTTP server on `addr` answering every request with `body`; returns its port.
fn http_server_on(addr: &str, body: &'static str) -> u16 {
    let l = TcpListener::bind(addr).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) && line != "\r\n" {
                line.clear();
            }
            let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        }
    });
    port
}

/// A server that dials loopback only, with `--resolve` mappings `resolve` and `serve` arguments `extra`.
fn server(resolve: &[&str], extra: &[&str]) -> Server {
    resolve.iter().fold(Server::builder().loopback_only(), |b, r| b.resolve(r)).args(extra).start()
}

fn net(json: &str) -> NetworkSpec {
    serde_json::from_str(json).unwrap()
}

fn with_net(client: &Client, spec: NetworkSpec) -> Sandbox {
    client.create(&CreateSandbox { network: Some(spec), ..Default::default() }).unwrap()
}

/// The sandbox's audit rows, newest first, once they have settled: network decisions are written by a
/// thread of their own just after the fact, so the rows are read until two reads 50 ms apart agree.
fn audit_actions(client: &Client, id: &str) -> Vec<(String, serde_json::Value)> {
    let read = || -> Vec<(String, serde_json::Value)> {
        client.audit(Some(id), Some(5000)).unwrap().into_iter().map(|e| (e.action, e.detail)).collect()
    };
    let mut rows = read();
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(50));
        let again = read();
        if again.len() == rows.len() {
            return again;
        }
        rows = again;
    }
    rows
}

fn assert_no_dial_bug(srv: &Server) {
    assert!(
        !srv.log_text().contains("BUG: the proxy tried to dial"),
        "a non-loopback address was dialled:\n{}",
        srv.log_text()
    );
}

/// A pure-Python wheel, as a package index serves it.
pub(crate) struct Wheel {
    /// The distribution's name as pip is asked for it (`sandlot-probe`).
    project: String,
    /// `<project with _>-1.0-py3-none-any.whl`.
    file_name: String,
    /// The zip.
    bytes: Vec<u8>,
}

/// A wheel of distribution `project`, version 1.0, holding one module `module` whose `__init__.py` is
/// `init_py`, with the METADATA, WHEEL and RECORD files pip checks; zipped by the host's python3.
pub(crate) fn wheel(project: &str, module: &str, init_py: &str) -> Wheel {
    let script = r#"
import io, sys, zipfile
project, module, init_py = sys.argv[1:4]
dist = project.replace("-", "_") + "-1.0.dist-info"
b = io.BytesIO()
with zipfile.ZipFile(b, "w") as z:
    files = {
        module + "/__init__.py": init_py,
        dist + "/METADATA": "Metadata-Version: 2.1\nName: " + project + "\nVersion: 1.0\n",
        dist + "/WHEEL": "Wheel-Version: 1.0\nGenerator: sandlot-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    for name, body in files.items():
        z.writestr(name, body)
    z.writestr(dist + "/RECORD", "".join(f"{n},,\n" for n in files) + dist + "/RECORD,,\n")
sys.stdout.buffer.write(b.getvalue())
"#;
    let out = Command::new("python3").args(["-c", script, project, module, init_py]).output().unwrap();
    assert!(out.status.success(), "building the {project} wheel: {out:?}");
    let file_name = format!("{}-1.0-py3-none-any.whl", project.replace('-', "_"));
    Wheel { project: project.to_string(), file_name, bytes: out.stdout }
}

/// A package index (PEP 503 "simple") on 127.0.0.1 serving `wheel` alone; returns its port.
pub(crate) fn package_index(wheel: Wheel) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut first = String::new();
            let _ = r.read_line(&mut first);
            let mut line = String::new();
            while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) && line != "\r\n" {
                line.clear();
            }
            let path = first.split_whitespace().nth(1).unwrap_or("/").to_string();
            let name = &wheel.file_name;
            let (status, ctype, body): (&str, &str, Vec<u8>) = if path.ends_with(".whl") {
                ("200 OK", "application/octet-stream", wheel.bytes.clone())
            } else if path.starts_with(&format!("/simple/{}", wheel.project)) {
                let html = format!("<!DOCTYPE html><html><body><a href=\"/files/{name}\">{name}</a></body></html>");
                ("200 OK", "text/html", html.into_bytes())
            } else {
                ("404 Not Found", "text/plain", b"not found".to_vec())
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(&body);
        }
    });
    port
}
