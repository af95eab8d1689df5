//! Opening upstream connections for the sandbox: the one place the proxy (plain or brokered) dials
//! out, replaceable so tests can prove a refused destination is never dialed.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::time::Duration;

use tokio::net::TcpStream;

/// How long an upstream connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens upstream connections. Replaceable, so tests can prove a refused destination is never dialed.
pub trait Dial: Send + Sync {
    /// Connects to `addr` on behalf of the sandbox.
    fn dial(&self, addr: SocketAddr) -> Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send>>;
}

/// The real dialer.
pub struct TcpDialer {
    /// Refuse (and log as a bug) any destination outside loopback: the test-suite guard that a
    /// non-loopback address is never dialled.
    pub loopback_only: bool,
    /// Test suites' stand-in for the internet: a connection the policy allowed to a key's address is
    /// dialled to the value's instead (same port). Only with `loopback_only`, so it can only point at
    /// local servers; empty otherwise.
    pub redirect: HashMap<IpAddr, IpAddr>,
}

impl TcpDialer {
    /// A dialer that reaches any address (`loopback_only` false) or loopback only, redirecting none.
    pub fn new(loopback_only: bool) -> TcpDialer {
        TcpDialer { loopback_only, redirect: HashMap::new() }
    }
}

impl Dial for TcpDialer {
    fn dial(&self, addr: SocketAddr) -> Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send>> {
        let loopback_only = self.loopback_only;
        let addr = match self.redirect.get(&addr.ip()) {
            Some(to) if loopback_only => SocketAddr::new(*to, addr.port()),
            _ => addr,
        };
        Box::pin(async move {
            if loopback_only && !addr.ip().is_loopback() {
                tracing::error!("BUG: the proxy tried to dial {addr} while --test-loopback-only is set");
                return Err(io::Error::other("non-loopback dial refused by --test-loopback-only"));
            }
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "upstream connect timed out"))?
        })
    }
}
