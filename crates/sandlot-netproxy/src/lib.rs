//! The sandbox network, seen from the host: what a sandbox may reach and how its traffic is parsed.
//!
//! Everything here handles bytes that sandbox code controls (DNS queries, TLS ClientHellos, HTTP request
//! heads), so every parser is bounded and returns `None` rather than guessing. This crate never touches
//! the store or the driver's privileges.

#![deny(missing_docs)]

pub mod broker;
pub mod cidr;
pub mod dial;
pub mod dns;
pub mod egress;
pub mod policy;
pub mod sniff;
pub mod splice;
