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

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::Duration;

use sandlot_client::api::{CreateSandbox, NetworkSpec};
use sandlot_client::{Client, Sandbox};

use crate::harness::Server;

const SECRET: &str = "sk-test-4f1b9c2e7d3a";

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
