//! A distribution-spec registry client (GET only) over ureq and rustls, with docker's token flow.
//!
//! A pull resolves the reference to a manifest (choosing a platform from an index), reads the config,
//! then copies every layer not already in the [`BlobStore`] through [`BlobStore::put_verified`]. The
//! manifest and config are held in memory (they are size-capped) and written to the store last, so a
//! failed pull leaves only layers that were verified whole (kept for a retry; the daemon's GC removes
//! them if no image ever references them).
//!
//! Authentication: a request that gets 401 reads `WWW-Authenticate`. `Basic` is answered with the
//! credentials, `Bearer realm=..,service=..,scope=..` by fetching a token from the realm (with the
//! credentials when there are any) and retrying; tokens are cached per scope for the pull. Redirects
//! (blob GETs go to storage hosts) are followed by hand, at most 5, and `Authorization` is sent only to
//! the registry's own host. Credentials never appear in errors or events; [`Credentials`]' `Debug` hides
//! them, and every error message is scrubbed of the password as a last defence.
//!
//! A host listed in `insecure` is spoken to over plain HTTP only (no HTTPS attempt first); every other
//! host over HTTPS only. Layers are fetched two at a time. Diff_ids are not checked here: that needs
//! the layer decompressed, which the unpacker does anyway.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};

use crate::digest::truncate;
use crate::manifest::{self, Descriptor, Manifest, ManifestError, Parsed};
use crate::store::StoreError;
use crate::{BlobStore, Digest, Image, Platform, Reference};

/// The system trust store of Debian/Ubuntu (and Fedora's compatible path), as sandlot-netproxy uses.
pub const SYSTEM_ROOTS: &[&str] = &["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"];
/// Redirects followed for one request.
const MAX_REDIRECTS: usize = 5;
/// The largest token response accepted.
const MAX_TOKEN_BYTES: u64 = 1 << 20;
/// The largest `WWW-Authenticate` header parsed.
const MAX_CHALLENGE_BYTES: usize = 4096;
/// The largest error body read for a message.
const MAX_ERROR_BODY: u64 = 16 << 10;
/// Layers fetched at the same time in one pull.
const LAYER_WORKERS: usize = 2;
/// Progress events are sent at most this often (bytes or time, whichever first).
const PROGRESS_BYTES: u64 = 256 << 10;
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// A user name and password (or token) for a registry. `Debug` prints `<redacted>`.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Credentials {
    /// User name.
    pub username: String,
    /// Password or access token.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credentials(<redacted>)")
    }
}

/// How the client connects and authenticates.
#[derive(Clone, Debug, Default)]
pub struct RegistryOptions {
    /// PEM certificates (`--extra-ca`, may be empty) trusted in addition to the system roots.
    pub extra_roots_pem: Vec<u8>,
    /// `HOST:PORT`s allowed over plain HTTP; every other registry is HTTPS only.
    pub insecure: Vec<String>,
    /// Credentials per registry host (as in the reference, e.g. `ghcr.io`, or its API host).
    pub credentials: HashMap<String, Credentials>,
    /// The `User-Agent` header.
    pub user_agent: String,
    /// `HOST:PORT`s the client may reach although they resolve to loopback, private, link-local or
    /// other non-public addresses (hosts in `insecure` may too). Any other such address is refused:
    /// the daemon's client goes where a tenant's reference says, and must not become the tenant's way
    /// into the host's own services, an internal network or a cloud metadata endpoint.
    pub private: Vec<String>,
    /// Longest a whole pull may take (`None`: no limit beyond the per-read timeouts). A registry that
    /// trickles bytes would otherwise hold its pull, and what waits on it, for as long as it likes.
    pub pull_timeout: Option<Duration>,
}

/// Progress of a pull, for the NDJSON stream and the CLI's bars.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PullEvent {
    /// The manifest was found: its digest, platform and the layers (digest, blob size) to fetch.
    Resolved {
        /// The platform manifest's digest.
        manifest: Digest,
        /// The platform of the image.
        platform: Platform,
        /// Every layer with its size, bottom first.
        layers: Vec<(Digest, u64)>,
    },
    /// Bytes of a layer received so far (at most every 256 KiB or 100 ms).
    Layer {
        /// The layer.
        digest: Digest,
        /// Bytes received.
        done: u64,
        /// Bytes in all.
        total: u64,
    },
    /// A layer is in the store: fetched and verified, or there already (`cached`).
    LayerDone {
        /// The layer.
        digest: Digest,
        /// Whether it was already stored.
        cached: bool,
    },
}

/// What went wrong with a pull, and (in `message`) what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullError {
    /// The class of failure.
    pub kind: PullErrorKind,
    /// A sentence for the user; never contains credentials.
    pub message: String,
}

/// Classes of [`PullError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PullErrorKind {
    /// No such repository, tag, digest or blob.
    NotFound,
    /// Credentials are missing or were rejected.
    Unauthorized,
    /// The credentials are valid but may not pull this.
    Denied,
    /// The registry is plain HTTP and not listed in `--insecure-registry`.
    InsecureRefused,
    /// TLS failed (certificate not trusted, handshake error).
    Tls,
    /// The registry could not be reached, or answered with a server error.
    Network,
    /// Content does not match its digest or size, or is malformed.
    Corrupt,
    /// A manifest or layer kind sandlot does not handle.
    Unsupported,
    /// An index without the wanted platform.
    NoMatchingPlatform,
    /// Over a size cap.
    TooLarge,
    /// The image's layers declare more bytes than the pull was allowed to store (`max_bytes`).
    OverBudget,
}

impl PullError {
    fn new(kind: PullErrorKind, message: impl Into<String>) -> PullError {
        PullError { kind, message: message.into() }
    }
}

impl fmt::Display for PullError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PullError {}

impl From<ManifestError> for PullError {
    fn from(e: ManifestError) -> PullError {
        let kind = match &e {
            ManifestError::Unsupported(_) => PullErrorKind::Unsupported,
            ManifestError::Invalid(_) => PullErrorKind::Corrupt,
            ManifestError::NoMatchingPlatform(_) => PullErrorKind::NoMatchingPlatform,
            ManifestError::TooLarge(_) => PullErrorKind::TooLarge,
        };
        PullError::new(kind, e.to_string())
    }
}

/// A registry client; one serves every pull of the daemon.
pub struct Registry {
    agent: ureq::Agent,
    opts: RegistryOptions,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry").field("insecure", &self.opts.insecure).finish_non_exhaustive()
    }
}

impl Registry {
    /// A client trusting the system roots plus `opts.extra_roots_pem`.
    pub fn new(opts: RegistryOptions) -> Result<Registry, PullError> {
        let tls_err = |what: String| PullError::new(PullErrorKind::Tls, what);
        let mut roots = rustls::RootCertStore::empty();
        if let Some(path) = SYSTEM_ROOTS.iter().find(|p| std::path::Path::new(p).exists()) {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| tls_err(format!("reading the system roots {path}: {e}")))?;
            for cert in certs.flatten() {
                // Odd certificates in a system bundle are skipped, as every TLS library does.
                let _ = roots.add(cert);
            }
        }
        let mut extra = 0;
        for cert in CertificateDer::pem_slice_iter(&opts.extra_roots_pem) {
            let cert =
                cert.map_err(|e| tls_err(format!("the extra CA certificates (--extra-ca) are not valid PEM: {e}")))?;
            roots.add(cert).map_err(|e| tls_err(format!("an extra CA certificate (--extra-ca) is not usable: {e}")))?;
            extra += 1;
        }
        if !opts.extra_roots_pem.is_empty() && extra == 0 {
            return Err(tls_err("the extra CA file (--extra-ca) holds no PEM certificate".into()));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_err(format!("TLS setup: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut allowed: Vec<String> =
            opts.private.iter().chain(&opts.insecure).map(|h| h.to_ascii_lowercase()).collect();
        allowed.sort();
        allowed.dedup();
        let agent = ureq::AgentBuilder::new()
            .tls_connector(Arc::new(RustlsConnector(Arc::new(config))))
            // Addresses are checked where they are resolved, for the connection that uses them: no
            // window between a check and the connect for DNS to answer differently.
            .resolver(PublicOnly { allowed })
            // Redirects are followed by hand so Authorization never leaves the registry's host.
            .redirects(0)
            .timeout_connect(Duration::from_secs(30))
            .timeout_read(Duration::from_secs(120))
            .timeout_write(Duration::from_secs(60))
            .user_agent(if opts.user_agent.is_empty() { "sandlot" } else { &opts.user_agent })
            .build();
        Ok(Registry { agent, opts })
    }

    /// Resolves `reference` (tag or digest; an index / manifest list picks `platform`), fetches config
    /// and every layer blob not already in `store` (each verified against its digest, two at a time), and returns the
    /// Image. `auth` (given per pull) overrides the configured credentials. The image's
    /// `manifest_digest` is the platform manifest's, also when the reference named an index.
    ///
    /// A layer already in `store` is used as it is only when `reuse` says so: a blob someone else
    /// fetched proves nothing about what this registry holds (a hostile registry may name another
    /// tenant's private layer by its digest), so any other is fetched and verified again. An image
    /// whose layers declare more than `max_bytes` together is refused before any is fetched (and no
    /// layer is ever stored past its declared size).
    #[allow(clippy::too_many_arguments)]
    pub fn pull(
        &self,
        reference: &Reference,
        platform: &Platform,
        auth: Option<&Credentials>,
        store: &BlobStore,
        reuse: &(dyn Fn(&Digest) -> bool + Sync),
        max_bytes: u64,
        events: &mut (dyn FnMut(PullEvent) + Send),
    ) -> Result<Image, PullError> {
        let creds = auth
            .or_else(|| self.opts.credentials.get(&reference.registry))
            .or_else(|| self.opts.credentials.get(reference.api_host()))
            .cloned();
        let password = creds.as_ref().map(|c| c.password.clone());
        // The `user:password` form a Basic header carries, in case a server echoes the header.
        let basic = creds.as_ref().map(|c| basic_header(c).trim_start_matches("Basic ").to_string());
        let mut session = Session::new(self, reference, creds);
        session.pull(platform, store, reuse, max_bytes, events).map_err(|mut e| {
            // A last defence: no message may carry the password, whatever a server echoed.
            if let Some(p) = password.filter(|p| p.len() >= 3) {
                e.message = e.message.replace(&p, "<redacted>");
            }
            if let Some(basic) = &basic {
                e.message = e.message.replace(basic, "<redacted>");
            }
            e
        })
    }
}

/// One pull: the registry, repository, credentials and the tokens obtained so far.
#[derive(Clone)]
struct Session<'a> {
    registry: &'a Registry,
    reference: &'a Reference,
    /// `host[:port]` of the registry API.
    host: String,
    /// `https://host` or `http://host`.
    base: String,
    creds: Option<Credentials>,
    /// The `Authorization` value that last worked for the registry host.
    authorization: Option<String>,
    tokens: HashMap<String, String>,
    /// When the pull must be over.
    deadline: Option<Instant>,
}

impl<'a> Session<'a> {
    fn new(registry: &'a Registry, reference: &'a Reference, creds: Option<Credentials>) -> Session<'a> {
        let host = reference.api_host().to_owned();
        let scheme = if registry.is_insecure(&host) { "http" } else { "https" };
        Session {
            registry,
            reference,
            base: format!("{scheme}://{host}"),
            host,
            creds,
            authorization: None,
            tokens: HashMap::new(),
            deadline: registry.opts.pull_timeout.map(|t| Instant::now() + t),
        }
    }

    fn pull(
        &mut self,
        platform: &Platform,
        store: &BlobStore,
        reuse: &(dyn Fn(&Digest) -> bool + Sync),
        max_bytes: u64,
        events: &mut (dyn FnMut(PullEvent) + Send),
    ) -> Result<Image, PullError> {
        let wanted = self.reference.api_reference();
        let (bytes, content_type) = self.manifest(&wanted)?;
        let top = Digest::of(&bytes);
        if let Some(pinned) = &self.reference.digest {
            if &top != pinned {
                return Err(PullError::new(
                    PullErrorKind::Corrupt,
                    format!("registry {} answered {} with a manifest of digest {top}; the registry is broken or tampered with", self.reference.registry, self.reference),
                ));
            }
        }
        let (manifest_digest, manifest_bytes, manifest) = match manifest::parse(&bytes, content_type.as_deref())? {
            Parsed::Manifest(m) => (top, bytes, m),
            Parsed::Index(entries) => {
                let entry = manifest::choose(&entries, platform).map_err(|e| {
                    PullError::new(PullErrorKind::NoMatchingPlatform, format!("{}: {e}", self.reference.familiar()))
                })?;
                let (bytes, content_type) = self.manifest(entry.digest.as_str())?;
                if Digest::of(&bytes) != entry.digest {
                    return Err(self.corrupt("manifest", &entry.digest, &Digest::of(&bytes)));
                }
                match manifest::parse(&bytes, content_type.as_deref())? {
                    Parsed::Manifest(m) => (entry.digest.clone(), bytes, m),
                    Parsed::Index(_) => {
                        return Err(PullError::new(
                            PullErrorKind::Unsupported,
                            "an index that points to another index is not supported",
                        ))
                    }
                }
            }
        };
        let declared = manifest.layers.iter().fold(0u64, |sum, l| sum.saturating_add(l.size));
        if declared > max_bytes {
            return Err(PullError::new(
                PullErrorKind::OverBudget,
                format!(
                    "{} declares {} MiB of layers, more than the {} MiB this pull may store",
                    self.reference.familiar(),
                    declared.div_ceil(1 << 20),
                    max_bytes >> 20
                ),
            ));
        }
        let config_bytes = self.config(&manifest.config)?;
        let image = manifest::image(manifest_digest.clone(), &manifest, manifest::parse_config(&config_bytes)?)?;
        events(PullEvent::Resolved {
            manifest: manifest_digest.clone(),
            platform: image.platform.clone(),
            layers: manifest.layers.iter().map(|l| (l.digest.clone(), l.size)).collect(),
        });
        self.layers(&manifest, store, reuse, events)?;
        for (bytes, digest) in [(&manifest_bytes, &manifest_digest), (&config_bytes, &manifest.config.digest)] {
            store
                .put_verified(&bytes[..], digest, bytes.len() as u64, &mut |_| {})
                .map_err(|e| self.store_error(e, digest))?;
        }
        Ok(image)
    }

    fn manifest(&mut self, reference: &str) -> Result<(Vec<u8>, Option<String>), PullError> {
        let path = format!("/v2/{}/manifests/{reference}", self.reference.repository);
        let resp = self.get(&path, Some(manifest::ACCEPT), What::Manifest)?;
        let content_type = resp.header("content-type").map(str::to_owned);
        let bytes = read_capped(resp, manifest::MAX_MANIFEST_BYTES, "manifest")?;
        Ok((bytes, content_type))
    }

    fn config(&mut self, desc: &Descriptor) -> Result<Vec<u8>, PullError> {
        let path = format!("/v2/{}/blobs/{}", self.reference.repository, desc.digest);
        let resp = self.get(&path, None, What::Blob(&desc.digest))?;
        let bytes = read_capped(resp, desc.size.min(manifest::MAX_CONFIG_BYTES), "config blob")?;
        let actual = Digest::of(&bytes);
        if actual != desc.digest || bytes.len() as u64 != desc.size {
            return Err(self.corrupt("config blob", &desc.digest, &actual));
        }
        Ok(bytes)
    }

    /// Fetches every layer not in `store`, [`LAYER_WORKERS`] at a time (each worker a copy of this
    /// session, so each answers its own auth challenges); the first error stops the others.
    fn layers(
        &mut self,
        manifest: &Manifest,
        store: &BlobStore,
        reuse: &(dyn Fn(&Digest) -> bool + Sync),
        events: &mut (dyn FnMut(PullEvent) + Send),
    ) -> Result<(), PullError> {
        let mut todo: Vec<&Descriptor> = Vec::new();
        for layer in &manifest.layers {
            if todo.iter().any(|l| l.digest == layer.digest) {
                continue;
            }
            if store.contains(&layer.digest) && reuse(&layer.digest) {
                events(PullEvent::LayerDone { digest: layer.digest.clone(), cached: true });
            } else {
                todo.push(layer);
            }
        }
        let queue = Mutex::new(todo.into_iter());
        let events = Mutex::new(events);
        let emit = |e: PullEvent| (events.lock().unwrap_or_else(|p| p.into_inner()))(e);
        let failed: Mutex<Option<PullError>> = Mutex::new(None);
        std::thread::scope(|scope| {
            for _ in 0..LAYER_WORKERS {
                let mut worker = self.clone();
                let (queue, failed, emit) = (&queue, &failed, &emit);
                scope.spawn(move || loop {
                    if failed.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
                        return;
                    }
                    let Some(layer) = queue.lock().unwrap_or_else(|p| p.into_inner()).next() else { return };
                    if let Err(e) = worker.layer(layer, store, emit) {
                        failed.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
                        return;
                    }
                });
            }
        });
        match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Fetches one layer into the store, verified, sending throttled progress.
    fn layer(
        &mut self,
        layer: &Descriptor,
        store: &BlobStore,
        emit: &(dyn Fn(PullEvent) + Sync),
    ) -> Result<(), PullError> {
        let path = format!("/v2/{}/blobs/{}", self.reference.repository, layer.digest);
        let resp = self.get(&path, None, What::Blob(&layer.digest))?;
        let (total, digest) = (layer.size, layer.digest.clone());
        let (mut last_bytes, mut last_time) = (0u64, Instant::now());
        let mut progress = |done: u64| {
            if done - last_bytes >= PROGRESS_BYTES || last_time.elapsed() >= PROGRESS_INTERVAL || done == total {
                (last_bytes, last_time) = (done, Instant::now());
                emit(PullEvent::Layer { digest: digest.clone(), done, total });
            }
        };
        let reader = Deadline { inner: resp.into_reader(), at: self.deadline };
        let size = store
            .put_verified(reader, &layer.digest, layer.size, &mut progress)
            .map_err(|e| self.store_error(e, &layer.digest))?;
        if size != layer.size {
            // The bytes match their digest, so the blob stays: it may be another image's, and a wrong
            // size in this manifest must not delete what everyone shares.
            return Err(PullError::new(
                PullErrorKind::Corrupt,
                format!(
                    "layer {} has {size} bytes but the manifest says {}; the image is inconsistent",
                    layer.digest, layer.size
                ),
            ));
        }
        emit(PullEvent::LayerDone { digest: layer.digest.clone(), cached: false });
        Ok(())
    }

    fn corrupt(&self, what: &str, expected: &Digest, actual: &Digest) -> PullError {
        PullError::new(
            PullErrorKind::Corrupt,
            format!(
                "{what} {expected} from registry {} has digest {actual}: the registry's copy is corrupt or was tampered with; nothing was stored",
                self.reference.registry
            ),
        )
    }

    fn store_error(&self, e: StoreError, digest: &Digest) -> PullError {
        match e {
            StoreError::DigestMismatch { expected, actual } => self.corrupt("blob", &expected, &actual),
            StoreError::TooLarge { max } => PullError::new(
                PullErrorKind::Corrupt,
                format!("blob {digest} from registry {} is larger than the {max} bytes its manifest declares; nothing was stored", self.reference.registry),
            ),
            StoreError::Read(e) => PullError::new(PullErrorKind::Network, format!("reading blob {digest} from registry {} failed: {e}; retry the pull", self.reference.registry)),
            StoreError::Write(e) => PullError::new(PullErrorKind::Network, format!("writing blob {digest} to the image store failed: {e}")),
        }
    }

    /// GETs `path` on the registry, answering auth challenges and following redirects; returns a 200 response.
    fn get(&mut self, path: &str, accept: Option<&str>, what: What<'_>) -> Result<ureq::Response, PullError> {
        let url = format!("{}{path}", self.base);
        let mut resp = self.registry.send(&url, accept, self.authorization.as_deref())?;
        if resp.status() == 401 {
            self.authorization = Some(self.answer_challenge(&resp)?);
            resp = self.registry.send(&url, accept, self.authorization.as_deref())?;
            if resp.status() == 401 {
                return Err(self.unauthorized_after_auth());
            }
        }
        let mut current = url;
        for _ in 0..MAX_REDIRECTS {
            if !(300..400).contains(&resp.status()) {
                break;
            }
            let Some(location) = resp.header("location") else { break };
            let next = join_url(&current, location);
            let next_host = url_host(&next);
            if next.starts_with("http://") && !self.registry.is_insecure(next_host) {
                return Err(PullError::new(
                    PullErrorKind::InsecureRefused,
                    format!("registry {} redirected to plain-HTTP host {next_host}; add --insecure-registry {next_host} if you trust it", self.reference.registry),
                ));
            }
            // Authorization only ever goes to the registry itself, never to a storage host.
            let auth = if next_host == self.host { self.authorization.as_deref() } else { None };
            resp = self.registry.send(&next, accept, auth)?;
            current = next;
        }
        match resp.status() {
            200 => Ok(resp),
            300..=399 => Err(PullError::new(
                PullErrorKind::Network,
                format!("registry {} redirected more than {MAX_REDIRECTS} times", self.reference.registry),
            )),
            401 => Err(self.unauthorized_after_auth()),
            403 => Err(PullError::new(
                PullErrorKind::Denied,
                format!(
                    "registry {} denied access to {}{}",
                    self.reference.registry,
                    self.reference.repository,
                    error_detail(resp)
                ),
            )),
            404 => Err(PullError::new(
                PullErrorKind::NotFound,
                match what {
                    What::Manifest => {
                        format!("no image {} in registry {}", self.reference.familiar(), self.reference.registry)
                    }
                    What::Blob(d) => format!(
                        "registry {} has no blob {d} that image {} names",
                        self.reference.registry,
                        self.reference.familiar()
                    ),
                },
            )),
            429 => Err(PullError::new(
                PullErrorKind::Network,
                format!("registry {} is rate limiting; retry later", self.reference.registry),
            )),
            s => Err(PullError::new(
                PullErrorKind::Network,
                format!("registry {} answered HTTP {s}{}", self.reference.registry, error_detail(resp)),
            )),
        }
    }

    fn unauthorized_after_auth(&self) -> PullError {
        let msg = if self.creds.is_some() {
            format!(
                "registry {} rejected the credentials given; check the user name and password",
                self.reference.registry
            )
        } else {
            self.needs_credentials()
        };
        PullError::new(PullErrorKind::Unauthorized, msg)
    }

    fn needs_credentials(&self) -> String {
        format!("registry {} needs credentials: pass auth or configure them", self.reference.registry)
    }

    /// The `Authorization` value that answers a 401's challenge.
    fn answer_challenge(&mut self, resp: &ureq::Response) -> Result<String, PullError> {
        let challenges: Vec<Challenge> =
            resp.all("www-authenticate").into_iter().filter_map(Challenge::parse).collect();
        let bearer = challenges.iter().find(|c| c.scheme == "bearer");
        let basic = challenges.iter().find(|c| c.scheme == "basic");
        if let Some(bearer) = bearer {
            let scope = bearer
                .param("scope")
                .map(str::to_owned)
                .unwrap_or_else(|| format!("repository:{}:pull", self.reference.repository));
            if let Some(token) = self.tokens.get(&scope) {
                if self.authorization.as_deref() != Some(&format!("Bearer {token}")) {
                    return Ok(format!("Bearer {token}"));
                }
            }
            let token = self.fetch_token(bearer, &scope)?;
            self.tokens.insert(scope, token.clone());
            return Ok(format!("Bearer {token}"));
        }
        if basic.is_some() {
            return match &self.creds {
                Some(c) => Ok(basic_header(c)),
                None => Err(PullError::new(PullErrorKind::Unauthorized, self.needs_credentials())),
            };
        }
        Err(PullError::new(
            PullErrorKind::Unauthorized,
            format!(
                "registry {} answered 401 without a Basic or Bearer challenge it is possible to answer",
                self.reference.registry
            ),
        ))
    }

    fn fetch_token(&self, challenge: &Challenge, scope: &str) -> Result<String, PullError> {
        let realm = challenge.param("realm").ok_or_else(|| {
            PullError::new(
                PullErrorKind::Unauthorized,
                format!("registry {} sent a Bearer challenge without a realm", self.reference.registry),
            )
        })?;
        let realm_host = url_host(realm).to_owned();
        let plain_allowed = realm.starts_with("http://") && self.registry.is_insecure(&realm_host);
        if !(realm.starts_with("https://") || plain_allowed) {
            return Err(PullError::new(
                PullErrorKind::InsecureRefused,
                format!(
                    "registry {} wants tokens from {:?}, which is not HTTPS; add --insecure-registry {realm_host} if you trust it",
                    self.reference.registry,
                    truncate(realm)
                ),
            ));
        }
        let mut url = realm.to_owned();
        url.push(if realm.contains('?') { '&' } else { '?' });
        if let Some(service) = challenge.param("service") {
            url.push_str(&format!("service={}&", urlencode(service)));
        }
        url.push_str(&format!("scope={}", urlencode(scope)));
        let auth = self.creds.as_ref().map(basic_header);
        let resp = self.registry.send(&url, None, auth.as_deref())?;
        match resp.status() {
            200 => {}
            401 | 403 if self.creds.is_some() => {
                return Err(PullError::new(
                    PullErrorKind::Unauthorized,
                    format!(
                    "the token service of registry {} rejected the credentials given; check the user name and password",
                    self.reference.registry
                ),
                ))
            }
            401 | 403 => return Err(PullError::new(PullErrorKind::Unauthorized, self.needs_credentials())),
            s => {
                return Err(PullError::new(
                    PullErrorKind::Network,
                    format!("the token service of registry {} answered HTTP {s}", self.reference.registry),
                ))
            }
        }
        #[derive(serde::Deserialize)]
        struct TokenResponse {
            token: Option<String>,
            access_token: Option<String>,
        }
        let body = read_capped(resp, MAX_TOKEN_BYTES, "token response")?;
        let parsed: TokenResponse = serde_json::from_slice(&body).map_err(|e| {
            PullError::new(
                PullErrorKind::Unauthorized,
                format!(
                    "the token service of registry {} answered something that is not a token: {e}",
                    self.reference.registry
                ),
            )
        })?;
        let token = parsed.token.or(parsed.access_token).filter(|t| !t.is_empty());
        let token = token.ok_or_else(|| {
            PullError::new(
                PullErrorKind::Unauthorized,
                format!("the token service of registry {} answered without a token", self.reference.registry),
            )
        })?;
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(PullError::new(
                PullErrorKind::Unauthorized,
                "the token service answered a token with characters a header cannot carry",
            ));
        }
        Ok(token)
    }
}

/// What a GET fetches, for the 404 message.
#[derive(Clone, Copy)]
enum What<'a> {
    Manifest,
    Blob(&'a Digest),
}

impl Registry {
    /// A request with any method and body through this client's TLS setup, no redirects followed and
    /// any HTTP status returned as `Ok` (the test registry pushes with it).
    #[cfg(feature = "testing")]
    pub(crate) fn raw_request(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> io::Result<ureq::Response> {
        let mut req = self.agent.request(method, url);
        for (k, v) in headers {
            req = req.set(k, v);
        }
        let result = match body {
            Some(b) => req.send_bytes(b),
            None => req.call(),
        };
        match result {
            Ok(resp) | Err(ureq::Error::Status(_, resp)) => Ok(resp),
            Err(ureq::Error::Transport(t)) => Err(io::Error::other(transport_error(&t, url_host(url)).message)),
        }
    }

    fn is_insecure(&self, host: &str) -> bool {
        self.opts.insecure.iter().any(|h| h == host)
    }

    /// One GET; any HTTP status is an `Ok` response, transport failures become errors saying what to do.
    fn send(&self, url: &str, accept: Option<&str>, authorization: Option<&str>) -> Result<ureq::Response, PullError> {
        let mut req = self.agent.get(url);
        if let Some(a) = accept {
            req = req.set("Accept", a);
        }
        if let Some(a) = authorization {
            req = req.set("Authorization", a);
        }
        match req.call() {
            Ok(resp) | Err(ureq::Error::Status(_, resp)) => Ok(resp),
            Err(ureq::Error::Transport(t)) => Err(transport_error(&t, url_host(url))),
        }
    }
}

/// A body that fails with `TimedOut` once the pull's deadline has passed.
struct Deadline<R> {
    inner: R,
    at: Option<Instant>,
}

impl<R: Read> Read for Deadline<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at.is_some_and(|at| Instant::now() > at) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the pull took longer than the server allows (--pull-timeout-s)",
            ));
        }
        self.inner.read(buf)
    }
}

/// Resolves as the system does, keeping only public addresses unless the `HOST:PORT` is allowed.
struct PublicOnly {
    allowed: Vec<String>,
}

impl ureq::Resolver for PublicOnly {
    fn resolve(&self, netloc: &str) -> io::Result<Vec<std::net::SocketAddr>> {
        use std::net::ToSocketAddrs;
        let addrs: Vec<std::net::SocketAddr> = netloc.to_socket_addrs()?.collect();
        if self.allowed.binary_search(&netloc.to_ascii_lowercase()).is_ok() {
            return Ok(addrs);
        }
        let public: Vec<_> = addrs.iter().copied().filter(|a| is_public(a.ip())).collect();
        if public.is_empty() && !addrs.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                // The address itself stays out of the message: it would let a tenant read internal DNS.
                format!(
                    "{netloc} resolves to no public address; an admin can allow this registry with \
                     --allow-private-registry {netloc}"
                ),
            ));
        }
        Ok(public)
    }
}

/// Whether `ip` is a public unicast address: not loopback, private (RFC 1918, ULA), link-local (cloud
/// metadata lives there), shared (CGNAT), reserved, documentation, benchmarking, multicast or
/// unspecified; IPv4 inside IPv6 (mapped, NAT64) is judged as IPv4.
pub fn is_public(ip: std::net::IpAddr) -> bool {
    use std::net::IpAddr;
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
                || (o[0] == 198 && (o[1] & 0xfe) == 18)
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                let v4 = std::net::Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
                return is_public(IpAddr::V4(v4));
            }
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] & 0xffc0) == 0xfec0
                || (s[0] == 0x2001 && s[1] == 0x0db8)
                // 6to4 and the local-use NAT64 prefix embed IPv4 addresses; the discard prefix routes nowhere.
                || s[0] == 0x2002
                || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1)
                || (s[0] == 0x100 && s[1..4] == [0, 0, 0])
                || s[..6] == [0, 0, 0, 0, 0, 0])
        }
    }
}

/// Classifies a transport failure: TLS (untrusted certificate, or a plain-HTTP server) or network.
fn transport_error(t: &ureq::Transport, host: &str) -> PullError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(t);
    while let Some(e) = source {
        let tls = e.downcast_ref::<rustls::Error>().or_else(|| {
            e.downcast_ref::<io::Error>().and_then(|io| io.get_ref()).and_then(|i| i.downcast_ref::<rustls::Error>())
        });
        match tls {
            Some(rustls::Error::InvalidMessage(_)) => {
                return PullError::new(
                    PullErrorKind::InsecureRefused,
                    format!("registry {host} does not speak TLS (a plain-HTTP registry?); add --insecure-registry {host} if you trust it"),
                )
            }
            Some(e) => return PullError::new(PullErrorKind::Tls, format!("TLS with registry {host} failed: {e}; if it uses a private CA, is --extra-ca set?")),
            None => source = e.source(),
        }
    }
    // A refused address is the admin's decision to make, not a network failure to retry.
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(t);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<io::Error>().filter(|io| io.kind() == io::ErrorKind::PermissionDenied) {
            return PullError::new(
                PullErrorKind::Denied,
                format!("registry {host} is not reachable from this server: {io}"),
            );
        }
        source = e.source();
    }
    PullError::new(PullErrorKind::Network, format!("cannot reach registry {host}: {t}"))
}

fn basic_header(c: &Credentials) -> String {
    let raw = format!("{}:{}", c.username, c.password);
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(raw))
}

/// Reads at most `cap` bytes of a body; more is [`PullErrorKind::TooLarge`]. The length header is not trusted.
fn read_capped(resp: ureq::Response, cap: u64, what: &str) -> Result<Vec<u8>, PullError> {
    let mut bytes = Vec::new();
    resp.into_reader().take(cap + 1).read_to_end(&mut bytes).map_err(|e| {
        PullError::new(PullErrorKind::Network, format!("reading the {what} failed: {e}; retry the pull"))
    })?;
    if bytes.len() as u64 > cap {
        return Err(PullError::new(
            PullErrorKind::TooLarge,
            format!("the {what} is larger than its limit of {cap} bytes"),
        ));
    }
    Ok(bytes)
}

/// `: <first registry error message>` from a distribution-spec error body, if there is one.
fn error_detail(resp: ureq::Response) -> String {
    let Ok(body) = read_capped(resp, MAX_ERROR_BODY, "error body") else { return String::new() };
    #[derive(serde::Deserialize)]
    struct Errors {
        errors: Vec<ErrorEntry>,
    }
    #[derive(serde::Deserialize)]
    struct ErrorEntry {
        message: Option<String>,
    }
    match serde_json::from_slice::<Errors>(&body) {
        Ok(e) => {
            e.errors.into_iter().find_map(|e| e.message).map(|m| format!(": {}", truncate(&m))).unwrap_or_default()
        }
        Err(_) => String::new(),
    }
}

/// The `host[:port]` of an absolute URL.
fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split(['/', '?', '#']).next().unwrap_or("")
}

/// `location` resolved against `current` (absolute, host-relative or path-relative).
fn join_url(current: &str, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.to_owned();
    }
    let (scheme, rest) = current.split_once("://").unwrap_or(("https", current));
    let host = url_host(current);
    if location.starts_with('/') {
        return format!("{scheme}://{host}{location}");
    }
    let path = &rest[host.len()..];
    let path = path.split(['?', '#']).next().unwrap_or("");
    let dir = path.rfind('/').map_or("/", |i| &path[..=i]);
    format!("{scheme}://{host}{dir}{location}")
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One `WWW-Authenticate` challenge: a lowercase scheme and its parameters.
#[derive(Debug, PartialEq, Eq)]
struct Challenge {
    scheme: String,
    params: Vec<(String, String)>,
}

impl Challenge {
    /// Parses `Scheme k="v", k2=v2`; quoted values may hold commas (`scope="repository:a:pull,push"`).
    fn parse(header: &str) -> Option<Challenge> {
        if header.len() > MAX_CHALLENGE_BYTES {
            return None;
        }
        let header = header.trim();
        let (scheme, mut rest) = header.split_once(' ').unwrap_or((header, ""));
        let mut params = Vec::new();
        loop {
            rest = rest.trim_start_matches([' ', ',']);
            if rest.is_empty() {
                break;
            }
            let (key, after) = rest.split_once('=')?;
            let key = key.trim().to_ascii_lowercase();
            let (value, after) = if let Some(quoted) = after.strip_prefix('"') {
                let mut value = String::new();
                let mut chars = quoted.char_indices();
                let mut end = None;
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => value.extend(chars.next().map(|(_, c)| c)),
                        '"' => {
                            end = Some(i + 1);
                            break;
                        }
                        c => value.push(c),
                    }
                }
                (value, &quoted[end?..])
            } else {
                let end = after.find(',').unwrap_or(after.len());
                (after[..end].trim().to_owned(), &after[end..])
            };
            params.push((key, value));
            rest = after;
        }
        Some(Challenge { scheme: scheme.to_ascii_lowercase(), params })
    }

    fn param(&self, key: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// rustls as ureq's TLS: the handshake completes inside `connect`, so certificate errors surface there.
struct RustlsConnector(Arc<rustls::ClientConfig>);

impl ureq::TlsConnector for RustlsConnector {
    fn connect(
        &self,
        dns_name: &str,
        mut io: Box<dyn ureq::ReadWrite>,
    ) -> Result<Box<dyn ureq::ReadWrite>, ureq::Error> {
        let name = dns_name.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(name.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{dns_name}: {e}")))?;
        let mut conn = rustls::ClientConnection::new(Arc::clone(&self.0), name).map_err(io::Error::other)?;
        while conn.is_handshaking() {
            conn.complete_io(&mut io)?;
        }
        Ok(Box::new(TlsStream(rustls::StreamOwned::new(conn, io))))
    }
}

struct TlsStream(rustls::StreamOwned<rustls::ClientConnection, Box<dyn ureq::ReadWrite>>);

impl fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsStream")
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl io::Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl ureq::ReadWrite for TlsStream {
    fn socket(&self) -> Option<&std::net::TcpStream> {
        self.0.sock.socket()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_count_as_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "198.18.0.1",
            "192.0.2.1",
            "240.0.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:a9fe:a9fe::1",
            "64:ff9b:1::1",
            "100::1",
            "2001:db8::1",
            "::",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in ["1.1.1.1", "8.8.8.8", "2606:4700::1111", "::ffff:1.1.1.1"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn private_addresses_are_refused_unless_listed() {
        use ureq::Resolver as _;
        let guard = PublicOnly { allowed: vec!["127.0.0.1:5000".into()] };
        let err = guard.resolve("127.0.0.1:5001").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert!(err.to_string().contains("--allow-private-registry 127.0.0.1:5001"), "{err}");
        assert_eq!(guard.resolve("127.0.0.1:5000").unwrap().len(), 1);
        assert!(guard.resolve("localhost:5001").is_err());
    }

    #[test]
    fn credentials_debug_is_redacted_everywhere() {
        let c = Credentials { username: "alice".into(), password: "hunter2-secret".into() };
        assert_eq!(format!("{c:?}"), "Credentials(<redacted>)");
        let opts = RegistryOptions { credentials: HashMap::from([("r.io".to_owned(), c)]), ..Default::default() };
        let debug = format!("{opts:?}");
        assert!(!debug.contains("hunter2") && !debug.contains("alice"), "{debug}");
        let registry = Registry::new(opts).unwrap();
        assert!(!format!("{registry:?}").contains("hunter2"));
    }

    #[test]
    fn challenges_parse_with_quoted_commas() {
        let c = Challenge::parse(r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/python:pull,push""#).unwrap();
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.param("realm"), Some("https://auth.docker.io/token"));
        assert_eq!(c.param("service"), Some("registry.docker.io"));
        assert_eq!(c.param("scope"), Some("repository:library/python:pull,push"));
        let b = Challenge::parse(r#"Basic realm="Registry Realm""#).unwrap();
        assert_eq!((b.scheme.as_str(), b.param("realm")), ("basic", Some("Registry Realm")));
        assert_eq!(Challenge::parse("Basic").unwrap().params, vec![]);
        assert!(Challenge::parse(r#"Bearer realm="unterminated"#).is_none());
        assert!(Challenge::parse(&format!("Bearer realm=\"{}\"", "a".repeat(5000))).is_none());
    }

    #[test]
    fn urls_join_and_hosts() {
        assert_eq!(url_host("https://127.0.0.1:5000/v2/x"), "127.0.0.1:5000");
        assert_eq!(url_host("http://h?x"), "h");
        assert_eq!(join_url("https://r/v2/a/blobs/x", "https://s3/bucket?sig=1"), "https://s3/bucket?sig=1");
        assert_eq!(join_url("https://r:1/v2/a/blobs/x", "/other"), "https://r:1/other");
        assert_eq!(join_url("https://r/v2/a/blobs/x?q", "y"), "https://r/v2/a/blobs/y");
        assert_eq!(urlencode("repository:a/b:pull"), "repository%3Aa%2Fb%3Apull");
    }

    #[test]
    fn bad_extra_ca_is_a_tls_error() {
        let err =
            Registry::new(RegistryOptions { extra_roots_pem: b"not pem".to_vec(), ..Default::default() }).unwrap_err();
        assert_eq!(err.kind, PullErrorKind::Tls, "{err}");
        assert!(err.message.contains("--extra-ca"), "{err}");
    }

    #[test]
    fn manifest_errors_map_to_pull_kinds() {
        assert_eq!(PullError::from(ManifestError::Unsupported("x".into())).kind, PullErrorKind::Unsupported);
        assert_eq!(PullError::from(ManifestError::Invalid("x".into())).kind, PullErrorKind::Corrupt);
        assert_eq!(PullError::from(ManifestError::TooLarge("x".into())).kind, PullErrorKind::TooLarge);
    }
}
