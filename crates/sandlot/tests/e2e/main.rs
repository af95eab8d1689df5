//! End-to-end tests of sandlot: a real `sandlot serve` per test (as root, on loopback), driven from the
//! host through the Rust SDK and, for malformed requests, raw HTTP.
//!
//! The catalogue, one module per area; each test is named after the behaviour or threat it checks:
//! - [`api`]: authentication, tenants, error codes, request validation, audit.
//! - [`build`]: image builds from a Dockerfile, the step cache, and snapshots published as images.
//! - [`code_interpreter`]: the code-interpreter image built offline by its script, its runner started
//!   by the `sandlot.start` label at every boot and answering on port 49999; a failing start command.
//! - [`doctor`]: `sandlot doctor`'s host checks, the same at `serve`'s start, `/healthz`'s degraded list.
//! - [`exec`]: running commands, their output, exit codes, environment and streaming.
//! - [`processes`]: background processes, stdin, signals, logs, zombie reaping.
//! - [`terminal`]: terminals over WebSocket (size, resize, reattach, exit, auth, caps) and `sandbox shell` under tmux.
//! - [`files`]: the file API, tar transfer, and path tricks planted by sandbox code.
//! - [`images`]: importing and pulling images, booting them, their config, tenants, collection.
//! - [`images_debian`]: a real Debian 12 image (mmdebstrap, `SANDLOT_DEBIAN_IMAGE`): its own python,
//!   accounts, trust store and pip, shared by its sandboxes without a copy.
//! - [`isolation`]: what a sandbox cannot see or reach of the host and of other sandboxes.
//! - [`limits`]: memory, CPU, processes, disk, command and sandbox time limits.
//! - [`metrics`]: sampled CPU, memory, processes, OOM kills and egress moving; tenant scoping;
//!   `GET /metrics`'s authorisation and series.
//! - [`network`]: egress policy, DNS, SNI/Host binding, always-denied ranges, credential brokering,
//!   previews, per-sandbox bounds (one module per subject).
//! - [`lifecycle`]: delete, stop/resume, pause, fork, supervisor death, graceful shutdown, crash and
//!   restart; nothing left behind.
//!
//! Every test starts its own server in a fresh state dir and its own cgroup (see [`harness`]); dropping
//! the server stops it with SIGTERM and asserts that no cgroup, layer or mount of a sandbox remains.

#[path = "../common/mod.rs"]
mod common;
mod harness;

mod api;
mod build;
mod code_interpreter;
mod doctor;
mod events;
mod exec;
mod files;
mod images;
mod images_debian;
mod isolation;
mod lifecycle;
mod limits;
mod metrics;
mod network;
mod processes;
mod pty;
mod terminal;
mod watch;
