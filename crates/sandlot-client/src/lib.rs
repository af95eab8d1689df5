//! Rust SDK for the sandlot HTTP API: create sandboxes, run commands in them, move files in and out.
//!
//! Blocking, on a small HTTP client (ureq, plain http). A [`Client`] holds the server URL and API key; a
//! [`Sandbox`] is a handle to one sandbox. Request and answer types are the wire types of
//! [`sandlot_api`], re-exported as [`api`].
//!
//! ```no_run
//! use sandlot_client::{api::{CreateSandbox, ExecEvent, ExecRequest}, Client};
//!
//! let client = Client::from_env()?; // SANDLOT_URL, SANDLOT_API_KEY
//! let sandbox = client.create(&CreateSandbox { memory_mb: Some(256), ..Default::default() })?;
//! sandbox.write_file("/home/user/hello.py", b"print('hi')\n")?;
//! let request = ExecRequest {
//!     argv: Some(vec!["python3".into(), "hello.py".into()]),
//!     ..Default::default()
//! };
//! for event in sandbox.exec_stream(&request)? {
//!     match event? {
//!         ExecEvent::Stdout { data } => print!("{data}"),
//!         ExecEvent::Exited { exit_code, .. } => println!("exit {exit_code}"),
//!         _ => {}
//!     }
//! }
//! sandbox.delete()?;
//! # Ok::<(), sandlot_client::Error>(())
//! ```
//!
//! Errors are one opaque [`Error`]: branch on [`Error::kind`], read the server's stable code with
//! [`Error::code`].

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod build;
mod client;
mod error;
mod events;
mod images;
mod sandbox;
mod stream;
mod terminal;
mod url;

pub use sandlot_api as api;

pub use build::BuildStream;
pub use client::Client;
pub use error::{Error, ErrorKind, Result};
pub use events::EventsQuery;
pub use images::PullStream;
pub use sandbox::Sandbox;
pub use stream::{EventStream, WatchEvents};
pub use terminal::{Terminal, TerminalEvent, TerminalExit, TerminalOptions};
