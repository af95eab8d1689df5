//! Lifecycle and persistence tests of sandlot: a real `sandlot serve` per test (as root, on loopback, on
//! its btrfs layers volume), driven through the Rust SDK, crashed and restarted from here.
//!
//! The catalogue, one module per area; each test is named after the promise it holds:
//! - [`cycles`]: many stop/resume and pause/resume cycles keep files, modes, links and processes.
//! - [`transitions`]: stop, pause, resume by API; commands and file operations wake a stopped or
//!   paused sandbox (auto-resume) or are refused; illegal transitions are conflicts.
//! - [`expiry`]: idle and lifetime timeouts and what they do (delete, stop, pause then stop).
//! - [`copies`]: snapshots and forks are independent copy-on-write copies.
//! - [`crash`]: kill -9 of the daemon mid-upload, mid-exec and mid-snapshot; graceful SIGTERM.
//! - [`names`]: a name names one live sandbox per tenant.
//!
//! Latency figures (stop, resume, pause, fork) are printed with `eprintln!`; run with
//! `--no-capture` (nextest) or `-- --nocapture` (cargo test) to see them.

#[path = "../common/mod.rs"]
mod common;
mod server;
mod support;

mod copies;
mod crash;
mod cycles;
mod expiry;
mod names;
mod transitions;
