//! Wire types of the sandlot HTTP API (`/v1`).
//!
//! This crate holds only serde types and their syntactic checks: no I/O, no tokio, no engine. The server
//! parses requests into these types (unknown fields are rejected) and the clients build them, so both ends
//! agree on one definition.

#![deny(missing_docs)]

/// Default TCP address of `sandlot serve`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7423";
/// Environment variable naming the server URL for the CLI and the SDKs.
pub const ENV_URL: &str = "SANDLOT_URL";
/// Environment variable holding the API key for the CLI and the SDKs.
pub const ENV_API_KEY: &str = "SANDLOT_API_KEY";
/// Media type that switches exec and logs to a stream of [`ExecEvent`]s, one JSON object per line.
pub const NDJSON: &str = "application/x-ndjson";

mod audit;
mod build;
mod error;
mod exec;
mod files;
mod health;
mod image;
mod keys;
mod network;
mod ports;
mod sandbox;
mod snapshot;
mod usage;
mod user;

pub use audit::*;
pub use build::*;
pub use error::*;
pub use exec::*;
pub use files::*;
pub use health::*;
pub use image::*;
pub use keys::*;
pub use network::*;
pub use ports::*;
pub use sandbox::*;
pub use snapshot::*;
pub use usage::*;
pub use user::*;
