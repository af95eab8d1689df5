//! The TLS listener (`--e2b-tls-listen`), for the E2B surface: the SDKs reach
//! `https://{port}-{id}.{domain}` when `E2B_SANDBOX_URL` is unset, so host routing needs a certificate
//! for `*.{domain}`. The admin's (`--e2b-tls-cert`/`--e2b-tls-key`), or one the server issues at every
//! start from its own CA (`<state>/ca`), whose certificate clients then trust (`sandlot e2b env` writes
//! it and names it in `SSL_CERT_FILE` / `NODE_EXTRA_CA_CERTS`). Start-up, not a surface: it is here
//! beside the listeners, so the E2B handlers need nothing below the control layer.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The certificate a TLS listener serves, and the CA PEM clients must trust when the server issued it.
pub struct TlsSetup {
    /// The acceptor (ALPN `h2` and `http/1.1`: the listener serves HTTP/2 when the client offers it).
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// The server's CA, PEM, when it issued the certificate; `None` for the admin's.
    pub issued_by_ca: Option<String>,
}

/// The listener's TLS from the admin's files, or a certificate for `*.{domain}` and `{domain}` issued
/// by the CA in `ca_dir`.
pub fn setup(domain: &str, cert: Option<&Path>, key: Option<&Path>, ca_dir: &Path) -> anyhow::Result<TlsSetup> {
    let (chain, key, issued_by_ca) = match (cert, key) {
        (Some(cert), Some(key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<_, _>>())
                .with_context(|| format!("--e2b-tls-cert {}: expected PEM certificates", cert.display()))?;
            if chain.is_empty() {
                bail!("--e2b-tls-cert {}: no certificate in it", cert.display());
            }
            let key = PrivateKeyDer::from_pem_file(key)
                .with_context(|| format!("--e2b-tls-key {}: expected a PEM private key", key.display()))?;
            (chain, key, None)
        }
        (None, None) => {
            let ca = sandlot_netproxy::broker::Ca::load_or_create(ca_dir)
                .with_context(|| format!("loading the server's CA from {}", ca_dir.display()))?;
            let names = vec![format!("*.{domain}"), domain.to_string()];
            let (chain, key) = ca.issue(&names).context("issuing the E2B listener's certificate")?;
            (chain, key, Some(ca.cert_pem().to_string()))
        }
        _ => bail!("--e2b-tls-cert and --e2b-tls-key go together: give both, or neither to have the server issue one"),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("the E2B TLS certificate and key do not go together")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsSetup { acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)), issued_by_ca })
}

/// Where the server's CA lives in state directory `state_dir`.
pub fn ca_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("ca")
}
