//! The `images` group's registry: Debian's `docker-registry` (the CNCF distribution registry) on
//! 127.0.0.1, plain HTTP, storage in a temporary directory; killed by its pid and removed on drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// The registry binary of Debian's `docker-registry` package.
const REGISTRY_BINARY: &str = "/usr/bin/docker-registry";

/// A running `docker-registry` on loopback.
pub(super) struct BenchRegistry {
    addr: SocketAddr,
    child: Child,
    dir: tempfile::TempDir,
}

impl BenchRegistry {
    /// Starts the registry on a free loopback port and waits until `GET /v2/` answers 200.
    pub(super) fn start() -> anyhow::Result<BenchRegistry> {
        if !Path::new(REGISTRY_BINARY).exists() {
            bail!("{REGISTRY_BINARY} is missing: the image figures need it (apt-get install docker-registry)");
        }
        let dir = tempfile::Builder::new().prefix("sandlot-bench-registry-").tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        // Access logging off: a line per request would be the registry's main work on a 2-core host.
        let config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    \
             rootdirectory: {}\nhttp:\n  addr: {addr}\n  secret: sandlot-bench\n",
            dir.path().join("data").display()
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config)?;
        let log = std::fs::File::create(dir.path().join("registry.log"))?;
        let child = Command::new(REGISTRY_BINARY)
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {REGISTRY_BINARY}"))?;
        let registry = BenchRegistry { addr, child, dir };
        registry.wait_ready()?;
        Ok(registry)
    }

    /// `127.0.0.1:PORT`.
    pub(super) fn host(&self) -> String {
        self.addr.to_string()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    fn wait_ready(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.answers_v2() {
            if Instant::now() > deadline {
                bail!("{REGISTRY_BINARY} did not answer on {} within 20 s; its log:\n{}", self.addr, self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Whether `GET /v2/` answers 200 (the API's version check; no auth is configured).
    fn answers_v2(&self) -> bool {
        let Ok(mut s) = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1)) else { return false };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if write!(s, "GET /v2/ HTTP/1.0\r\nHost: {}\r\n\r\n", self.addr).is_err() {
            return false;
        }
        let mut head = [0u8; 12];
        s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[8..12] == b" 200"
    }
}

impl Drop for BenchRegistry {
    fn drop(&mut self) {
        // Child::kill signals exactly this pid; wait reaps it; the TempDir then removes the storage.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
