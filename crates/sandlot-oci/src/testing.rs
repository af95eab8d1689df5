//! A real registry for tests: Debian's `/usr/bin/docker-registry` (the CNCF distribution registry) on
//! 127.0.0.1, optionally with TLS from a test CA, htpasswd basic auth, or docker's token auth served by
//! a loopback token server minting ES256 JWTs; plus [`TestImage`]s pushed through the registry API.
//!
//! Everything lives in one temporary directory (config, storage, certificates, logs) removed on drop,
//! and the registry process is killed by its pid on drop.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SigningKey};

use crate::manifest::{self, Compression, Descriptor};
use crate::{Credentials, Digest, Platform, Registry, RegistryOptions};

/// The registry binary of Debian's `docker-registry` package.
pub const REGISTRY_BINARY: &str = "/usr/bin/docker-registry";
/// The token service name the registry expects in a token's audience.
const TOKEN_SERVICE: &str = "sandlot-test-registry";
/// The token issuer the registry trusts.
const TOKEN_ISSUER: &str = "sandlot-test-token-server";

/// How to start a [`TestRegistry`].
#[derive(Clone, Debug, Default)]
pub struct TestRegistryOptions {
    /// Serve HTTPS with a certificate for 127.0.0.1/localhost from a fresh test CA ([`TestRegistry::ca_pem`]).
    pub tls: bool,
    /// Require this user and password: htpasswd basic auth, or (with `token_auth`) at the token server.
    pub basic_auth: Option<(String, String)>,
    /// Docker's token auth: the registry answers 401 with a Bearer challenge naming a loopback token server.
    pub token_auth: bool,
}

/// A running `docker-registry` on loopback; killed and its directory removed on drop.
pub struct TestRegistry {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The CA certificate (PEM) its TLS certificate chains to, when `tls`.
    pub ca_pem: Option<String>,
    dir: tempfile::TempDir,
    child: Child,
    token_server: Option<TokenServer>,
    client: Registry,
    basic_auth: Option<(String, String)>,
}

/// A blob's bytes with the descriptor that names it.
pub type Blob = (Vec<u8>, Descriptor);

/// An image to push: uncompressed layer tars, how to compress them, and the config's `config` object.
#[derive(Clone, Debug)]
pub struct TestImage {
    /// Each layer as an uncompressed tar, bottom first.
    pub layers: Vec<Vec<u8>>,
    /// How the layer blobs are compressed.
    pub compression: Compression,
    /// The config blob's `config` object (`Env`, `Cmd`, ...).
    pub config: serde_json::Value,
}

impl TestImage {
    /// The layer blobs (compressed) and the config blob for `platform`.
    pub fn blobs(&self, platform: &Platform) -> io::Result<(Vec<Blob>, Blob)> {
        let mut layers = Vec::new();
        let mut diff_ids = Vec::new();
        for tar in &self.layers {
            diff_ids.push(Digest::of(tar));
            let blob = compress(tar, self.compression)?;
            let desc = descriptor(self.compression.oci_media_type(), &blob);
            layers.push((blob, desc));
        }
        let mut config = serde_json::json!({
            "architecture": platform.architecture, "os": platform.os,
            "created": "2024-01-01T00:00:00Z",
            "config": self.config,
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        });
        if let Some(v) = &platform.variant {
            config["variant"] = serde_json::json!(v);
        }
        let config = serde_json::to_vec(&config).map_err(io::Error::other)?;
        let desc = descriptor(manifest::OCI_CONFIG, &config);
        Ok((layers, (config, desc)))
    }
}

/// Compresses `data` as a layer blob.
pub fn compress(data: &[u8], compression: Compression) -> io::Result<Vec<u8>> {
    match compression {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(data)?;
            enc.finish()
        }
        Compression::Zstd => {
            let mut out = Vec::new();
            ruzstd::encoding::compress(data, &mut out, ruzstd::encoding::CompressionLevel::Fastest);
            Ok(out)
        }
    }
}

/// A tar of regular files `(path, contents)`, mode 0644, owned by root.
pub fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(1_700_000_000);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder.append_data(&mut header, path, *data).expect("appending to an in-memory tar cannot fail");
    }
    builder.into_inner().expect("finishing an in-memory tar cannot fail")
}

fn descriptor(media_type: &str, blob: &[u8]) -> Descriptor {
    Descriptor {
        media_type: media_type.to_owned(),
        digest: Digest::of(blob),
        size: blob.len() as u64,
        platform: None,
        annotations: Default::default(),
    }
}

impl TestRegistry {
    /// Starts `/usr/bin/docker-registry` on a free loopback port and waits until `/v2/` answers.
    pub fn start(opts: TestRegistryOptions) -> io::Result<TestRegistry> {
        if !Path::new(REGISTRY_BINARY).exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{REGISTRY_BINARY} is missing: apt-get install docker-registry"),
            ));
        }
        let dir = tempfile::Builder::new().prefix("sandlot-test-registry-").tempdir()?;
        let port = free_port()?;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("a loopback address parses");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  \
             delete:\n    enabled: true\nhttp:\n  addr: {addr}\n  secret: sandlot-test-secret\n",
            dir.path().join("data").display()
        );
        let mut ca_pem = None;
        if opts.tls {
            let (ca, cert, key) = tls_files()?;
            std::fs::write(dir.path().join("cert.pem"), cert)?;
            std::fs::write(dir.path().join("key.pem"), key)?;
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                dir.path().join("cert.pem").display(),
                dir.path().join("key.pem").display()
            ));
            ca_pem = Some(ca);
        }
        let mut token_server = None;
        if opts.token_auth {
            let server = TokenServer::start(opts.basic_auth.clone())?;
            std::fs::write(dir.path().join("token-ca.pem"), &server.root_pem)?;
            config.push_str(&format!(
                "auth:\n  token:\n    realm: http://{}/token\n    service: {TOKEN_SERVICE}\n    issuer: {TOKEN_ISSUER}\n    rootcertbundle: {}\n",
                server.addr,
                dir.path().join("token-ca.pem").display()
            ));
            token_server = Some(server);
        } else if let Some((user, password)) = &opts.basic_auth {
            let hash = bcrypt::hash(password, 4).map_err(io::Error::other)?;
            std::fs::write(dir.path().join("htpasswd"), format!("{user}:{hash}\n"))?;
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: sandlot-test\n    path: {}\n",
                dir.path().join("htpasswd").display()
            ));
        }
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config)?;
        let log = std::fs::File::create(dir.path().join("registry.log"))?;
        let child = Command::new(REGISTRY_BINARY)
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let mut insecure = Vec::new();
        if !opts.tls {
            insecure.push(addr.to_string());
        }
        if let Some(t) = &token_server {
            insecure.push(t.addr.to_string());
        }
        let client = Registry::new(RegistryOptions {
            extra_roots_pem: ca_pem.clone().unwrap_or_default().into_bytes(),
            insecure,
            credentials: HashMap::new(),
            user_agent: "sandlot-test".into(),
            private: vec![addr.to_string()],
            pull_timeout: None,
        })
        .map_err(|e| io::Error::other(e.message))?;
        let registry = TestRegistry { addr, ca_pem, dir, child, token_server, client, basic_auth: opts.basic_auth };
        registry.wait_ready()?;
        Ok(registry)
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// `127.0.0.1:PORT` of the token server, when `token_auth` (it is plain HTTP: list it as insecure).
    pub fn token_host(&self) -> Option<String> {
        self.token_server.as_ref().map(|t| t.addr.to_string())
    }

    /// The registry's log so far (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    fn base(&self) -> String {
        format!("{}://{}", if self.ca_pem.is_some() { "https" } else { "http" }, self.addr)
    }

    fn wait_ready(&self) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let url = format!("{}/v2/", self.base());
        loop {
            if let Ok(resp) = self.client.raw_request("GET", &url, &[], None) {
                if resp.status() == 200 || resp.status() == 401 {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("docker-registry did not answer {url} within 20 s; its log:\n{}", self.log()),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The `Authorization` header for pushing to `repo`.
    fn push_auth(&self, repo: &str) -> io::Result<Option<String>> {
        let creds = self.basic_auth.as_ref().map(|(u, p)| Credentials { username: u.clone(), password: p.clone() });
        let basic = creds.as_ref().map(|c| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", c.username, c.password))
            )
        });
        let Some(server) = &self.token_server else { return Ok(basic) };
        let url = format!("http://{}/token?service={TOKEN_SERVICE}&scope=repository:{repo}:pull,push", server.addr);
        let headers: Vec<(&str, &str)> = basic.iter().map(|b| ("Authorization", b.as_str())).collect();
        let resp = self.client.raw_request("GET", &url, &headers, None).map_err(io::Error::other)?;
        let body: serde_json::Value = serde_json::from_reader(resp.into_reader()).map_err(io::Error::other)?;
        let token = body["token"].as_str().ok_or_else(|| io::Error::other("the test token server gave no token"))?;
        Ok(Some(format!("Bearer {token}")))
    }

    fn upload(&self, repo: &str, auth: Option<&str>, blob: &[u8]) -> io::Result<()> {
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", *a)).collect();
        let start = self.client.raw_request(
            "POST",
            &format!("{}/v2/{repo}/blobs/uploads/", self.base()),
            &headers,
            Some(&[]),
        )?;
        if start.status() != 202 {
            return Err(io::Error::other(format!(
                "starting an upload answered HTTP {}: {}",
                start.status(),
                body_of(start)
            )));
        }
        let location = start.header("location").ok_or_else(|| io::Error::other("upload answer without Location"))?;
        let location =
            if location.starts_with("http") { location.to_owned() } else { format!("{}{location}", self.base()) };
        let sep = if location.contains('?') { '&' } else { '?' };
        let url = format!("{location}{sep}digest={}", Digest::of(blob));
        let mut headers = headers.clone();
        headers.push(("Content-Type", "application/octet-stream"));
        let put = self.client.raw_request("PUT", &url, &headers, Some(blob))?;
        if put.status() != 201 {
            return Err(io::Error::other(format!("uploading a blob answered HTTP {}: {}", put.status(), body_of(put))));
        }
        Ok(())
    }

    fn put_manifest(
        &self,
        repo: &str,
        reference: &str,
        auth: Option<&str>,
        media_type: &str,
        bytes: &[u8],
    ) -> io::Result<Digest> {
        let mut headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", *a)).collect();
        headers.push(("Content-Type", media_type));
        let url = format!("{}/v2/{repo}/manifests/{reference}", self.base());
        let resp = self.client.raw_request("PUT", &url, &headers, Some(bytes))?;
        if resp.status() != 201 {
            return Err(io::Error::other(format!(
                "putting a manifest answered HTTP {}: {}",
                resp.status(),
                body_of(resp)
            )));
        }
        Ok(Digest::of(bytes))
    }

    fn push_platform(
        &self,
        repo: &str,
        reference: &str,
        image: &TestImage,
        platform: &Platform,
    ) -> io::Result<(Digest, u64)> {
        let auth = self.push_auth(repo)?;
        let (layers, (config, config_desc)) = image.blobs(platform)?;
        for (blob, _) in &layers {
            self.upload(repo, auth.as_deref(), blob)?;
        }
        self.upload(repo, auth.as_deref(), &config)?;
        let descs: Vec<Descriptor> = layers.into_iter().map(|(_, d)| d).collect();
        let bytes = manifest::write_oci_manifest(&config_desc, &descs);
        let digest = self.put_manifest(repo, reference, auth.as_deref(), manifest::OCI_MANIFEST, &bytes)?;
        Ok((digest, bytes.len() as u64))
    }

    /// Pushes `image` (as linux/amd64) to `repo:tag`; returns the manifest digest.
    pub fn push(&self, repo: &str, tag: &str, image: &TestImage) -> io::Result<Digest> {
        self.push_platform(repo, tag, image, &Platform::parse("linux/amd64").expect("a valid platform")).map(|(d, _)| d)
    }

    /// Pushes one image per platform and an OCI index of them as `repo:tag`; returns the index digest.
    pub fn push_index(&self, repo: &str, tag: &str, images: &[(Platform, TestImage)]) -> io::Result<Digest> {
        let mut entries = Vec::new();
        for (platform, image) in images {
            let (digest, size) =
                self.push_platform(repo, &format!("{tag}-{}", platform.architecture), image, platform)?;
            let mut p = serde_json::json!({"os": platform.os, "architecture": platform.architecture});
            if let Some(v) = &platform.variant {
                p["variant"] = serde_json::json!(v);
            }
            entries.push(
                serde_json::json!({"mediaType": manifest::OCI_MANIFEST, "digest": digest, "size": size, "platform": p}),
            );
        }
        let index = serde_json::json!({"schemaVersion": 2, "mediaType": manifest::OCI_INDEX, "manifests": entries});
        let bytes = serde_json::to_vec(&index).map_err(io::Error::other)?;
        let auth = self.push_auth(repo)?;
        self.put_manifest(repo, tag, auth.as_deref(), manifest::OCI_INDEX, &bytes)
    }

    /// Flips the bytes of the registry's stored copy of blob `d` (same length, wrong content).
    pub fn corrupt_blob(&self, d: &Digest) -> io::Result<()> {
        let path = self.blob_path(d);
        let mut bytes = std::fs::read(&path)?;
        for b in bytes.iter_mut() {
            *b ^= 0xff;
        }
        std::fs::write(&path, bytes)
    }

    fn blob_path(&self, d: &Digest) -> PathBuf {
        let hex = d.hex();
        self.dir.path().join("data/docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data")
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        // Child::kill signals exactly this pid; wait reaps it so no zombie remains.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn body_of(resp: ureq::Response) -> String {
    let mut s = String::new();
    let _ = resp.into_reader().take(4096).read_to_string(&mut s);
    s
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A fresh CA and a leaf certificate for 127.0.0.1 and localhost: (CA PEM, leaf PEM, leaf key PEM).
fn tls_files() -> io::Result<(String, String, String)> {
    let ca_key = KeyPair::generate().map_err(io::Error::other)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(io::Error::other)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).map_err(io::Error::other)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().map_err(io::Error::other)?;
    let params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).map_err(io::Error::other)?;
    let cert = params.signed_by(&key, &issuer).map_err(io::Error::other)?;
    Ok((ca_cert.pem(), cert.pem(), key.serialize_pem()))
}

/// docker's token server on loopback: `GET /token?service=..&scope=..` answers an ES256 JWT whose `x5c`
/// certificate chains to `root_pem` (the registry's `rootcertbundle`).
struct TokenServer {
    addr: SocketAddr,
    root_pem: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

struct Minter {
    key: KeyPair,
    leaf_der: Vec<u8>,
    basic_auth: Option<(String, String)>,
}

impl TokenServer {
    fn start(basic_auth: Option<(String, String)>) -> io::Result<TokenServer> {
        let ca_key = KeyPair::generate().map_err(io::Error::other)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(io::Error::other)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key).map_err(io::Error::other)?;
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().map_err(io::Error::other)?;
        let leaf = CertificateParams::new(vec!["token-signer".to_owned()])
            .map_err(io::Error::other)?
            .signed_by(&key, &issuer)
            .map_err(io::Error::other)?;
        let minter = Arc::new(Minter { key, leaf_der: leaf.der().to_vec(), basic_auth });
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(conn) = conn {
                        let _ = minter.serve(conn);
                    }
                }
            })
        };
        Ok(TokenServer { addr, root_pem: ca_cert.pem(), stop, thread: Some(thread) })
    }
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // One connection wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Minter {
    fn serve(&self, conn: TcpStream) -> io::Result<()> {
        conn.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut reader = BufReader::new(conn.try_clone()?);
        let mut request_line = String::new();
        reader.read_line(&mut request_line)?;
        let mut authorization = None;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("authorization") {
                    authorization = Some(v.trim().to_owned());
                }
            }
        }
        let target = request_line.split_whitespace().nth(1).unwrap_or("");
        let query = target.split_once('?').map_or("", |(_, q)| q);
        let mut scopes = Vec::new();
        let mut service = String::new();
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "scope" => scopes.push(percent_decode(v)),
                "service" => service = percent_decode(v),
                _ => {}
            }
        }
        let subject = match (&self.basic_auth, authorization) {
            (None, _) => String::new(),
            (Some((user, password)), Some(given)) => {
                let expected = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                if given != format!("Basic {expected}") {
                    return respond(conn, "401 Unauthorized", r#"{"details":"wrong credentials"}"#);
                }
                user.clone()
            }
            (Some(_), None) => return respond(conn, "401 Unauthorized", r#"{"details":"credentials required"}"#),
        };
        let token = self.mint(&subject, &service, &scopes)?;
        respond(conn, "200 OK", &serde_json::json!({"token": token, "expires_in": 600}).to_string())
    }

    fn mint(&self, subject: &str, service: &str, scopes: &[String]) -> io::Result<String> {
        let b64url = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let access: Vec<serde_json::Value> = scopes
            .iter()
            .filter_map(|s| {
                let (kind, rest) = s.split_once(':')?;
                let (name, actions) = rest.rsplit_once(':')?;
                Some(serde_json::json!({"type": kind, "name": name, "actions": actions.split(',').collect::<Vec<_>>()}))
            })
            .collect();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_err(io::Error::other)?.as_secs();
        let header = serde_json::json!({
            "typ": "JWT", "alg": "ES256",
            "x5c": [base64::engine::general_purpose::STANDARD.encode(&self.leaf_der)],
        });
        let claims = serde_json::json!({
            "iss": TOKEN_ISSUER, "sub": subject, "aud": service, "exp": now + 600, "nbf": now - 10, "iat": now - 10,
            "jti": format!("{now}-{}", std::process::id()), "access": access,
        });
        let signing_input =
            format!("{}.{}", b64url(header.to_string().as_bytes()), b64url(claims.to_string().as_bytes()));
        let der = self.key.sign(signing_input.as_bytes()).map_err(io::Error::other)?;
        let raw = ecdsa_der_to_raw(&der).ok_or_else(|| io::Error::other("ECDSA signature is not DER"))?;
        Ok(format!("{signing_input}.{}", b64url(&raw)))
    }
}

fn respond(mut conn: TcpStream, status: &str, body: &str) -> io::Result<()> {
    write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An ASN.1 `SEQUENCE { INTEGER r, INTEGER s }` ECDSA P-256 signature as JWS's fixed 64-byte `r || s`.
fn ecdsa_der_to_raw(der: &[u8]) -> Option<[u8; 64]> {
    let (&tag, rest) = der.split_first()?;
    if tag != 0x30 {
        return None;
    }
    let (&len, mut rest) = rest.split_first()?;
    if len as usize != rest.len() {
        return None;
    }
    let mut out = [0u8; 64];
    for half in 0..2 {
        let (&tag, r) = rest.split_first()?;
        let (&n, r) = r.split_first()?;
        if tag != 0x02 || r.len() < n as usize {
            return None;
        }
        let (int, r) = r.split_at(n as usize);
        let int = if int.len() > 32 { &int[int.len() - 32..] } else { int };
        out[half * 32 + 32 - int.len()..half * 32 + 32].copy_from_slice(int);
        rest = r;
    }
    Some(out)
}
