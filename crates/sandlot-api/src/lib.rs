//! Wire types of the sandlot HTTP API (`/v1`).
//!
//! This crate holds only serde types and their syntactic checks: no I/O, no tokio, no engine. The server
//! parses requests into these types (unknown fields are rejected) and the clients build them, so both ends
//! agree on one definition.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

/// Default TCP address of `sandlot serve`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7423";
/// Environment variable naming the server URL for the CLI and the SDKs.
pub const ENV_URL: &str = "SANDLOT_URL";
/// Environment variable holding the API key for the CLI and the SDKs.
pub const ENV_API_KEY: &str = "SANDLOT_API_KEY";
/// Days since 1970-01-01 as a proleptic Gregorian `(year, month, day)` (Howard Hinnant's
/// `civil_from_days`): the one date conversion every surface's UTC timestamps use.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The inverse of [`civil_from_days`]: days since 1970-01-01 of a proleptic Gregorian date.
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Media type that switches exec and logs to a stream of [`ExecEvent`]s, one JSON object per line.
pub const NDJSON: &str = "application/x-ndjson";

mod audit;
mod build;
pub mod e2b;
mod error;
mod events;
mod exec;
mod files;
mod health;
mod image;
mod keys;
mod metrics;
mod network;
#[cfg(feature = "openapi")]
pub mod openapi;
mod ports;
mod pty;
mod sandbox;
mod snapshot;
mod usage;
mod user;

pub use audit::*;
pub use build::*;
pub use error::*;
pub use events::*;
pub use exec::*;
pub use files::*;
pub use health::*;
pub use image::*;
pub use keys::*;
pub use metrics::*;
pub use network::*;
pub use ports::*;
pub use pty::*;
pub use sandbox::*;
pub use snapshot::*;
pub use usage::*;
pub use user::*;
