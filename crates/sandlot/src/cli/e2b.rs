//! `sandlot e2b env`: the environment that points the official E2B SDKs at this sandlot server.

use super::output::shell_quote;
use super::Conn;

/// `sandlot e2b ...`.
#[derive(clap::Subcommand, Debug)]
pub enum E2bCmd {
    /// Print `export` lines that point the E2B SDKs at this server, with your key in E2B's format.
    #[command(long_about = ENV_LONG)]
    Env(EnvArgs),
}

impl E2bCmd {
    pub(super) fn conn(&self) -> &Conn {
        match self {
            E2bCmd::Env(a) => &a.conn,
        }
    }
}

const ENV_LONG: &str = "\
Print the `export` lines that point the official E2B SDKs (Python `e2b`, `e2b-code-interpreter`, \
npm `e2b`) at this sandlot server, so E2B code runs unchanged:

  E2B_API_URL      the control plane, SANDLOT_URL + /e2b
  E2B_SANDBOX_URL  where the SDKs send envd and port requests (the same listener; the sandbox is \
named by the E2b-Sandbox-Id header)
  E2B_API_KEY      your sandlot key (SANDLOT_API_KEY, else the admin key file) in E2B's format: \
e2b_ + its bytes in hex. It is the same key: same tenant, revoked with it.

When the server routes sandbox host names over TLS (`sandlot serve --e2b-domain D --e2b-tls-listen \
ADDR`), E2B_DOMAIN replaces E2B_API_URL and E2B_SANDBOX_URL, as against E2B's cloud: the SDKs then \
reach the API at https://api.D[:PORT]/ and sandboxes at https://PORT-ID.D[:PORT]/ (point *.D at the \
server), and `Sandbox.get_host(port)` URLs work in browsers too. If the server issued \
its own certificate, its CA is written to --ca-dir and named in SSL_CERT_FILE (a bundle of the \
system's roots and it: the Python SDKs' TLS reads it) and NODE_EXTRA_CA_CERTS (the CA alone: \
Node adds it to its roots). --no-domain keeps the header routing.

The server is asked (without the key) how it is reached; the key is not checked here.

Example:
  eval \"$(sandlot e2b env)\"
  python3 -c 'from e2b import Sandbox; s = Sandbox.create(); print(s.sandbox_id); s.kill()'";

/// Options of `sandlot e2b env`.
#[derive(clap::Args, Debug)]
pub struct EnvArgs {
    #[command(flatten)]
    pub conn: Conn,
    /// Route by header (E2B_SANDBOX_URL) even when the server has an E2B domain.
    #[arg(long)]
    pub no_domain: bool,
    /// Where to write the server's CA and the bundle of it and the system's roots
    /// [default: $XDG_CONFIG_HOME/sandlot, else ~/.config/sandlot].
    #[arg(long, value_name = "DIR")]
    pub ca_dir: Option<std::path::PathBuf>,
}

/// The system's trust bundle, which SSL_CERT_FILE replaces: the bundle keeps it.
const SYSTEM_BUNDLES: &[&str] =
    &["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"];

/// What the SDKs need to trust the server's CA: the files written.
struct CaFiles {
    /// The CA alone (NODE_EXTRA_CA_CERTS).
    ca: std::path::PathBuf,
    /// The system's roots and the CA (SSL_CERT_FILE).
    bundle: std::path::PathBuf,
}

fn default_ca_dir() -> anyhow::Result<std::path::PathBuf> {
    if let Some(d) = std::env::var_os("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
        return Ok(std::path::PathBuf::from(d).join("sandlot"));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty());
    home.map(|h| std::path::PathBuf::from(h).join(".config/sandlot"))
        .ok_or_else(|| anyhow::anyhow!("neither XDG_CONFIG_HOME nor HOME is set: pass --ca-dir DIR"))
}

/// Writes `pem` and the bundle of the system's roots and it into `dir`, named after `domain`.
fn write_ca(dir: &std::path::Path, domain: &str, pem: &str) -> anyhow::Result<CaFiles> {
    use anyhow::Context;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let stem: String = domain.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' }).collect();
    let ca = dir.join(format!("e2b-{stem}-ca.pem"));
    let bundle = dir.join(format!("e2b-{stem}-bundle.pem"));
    std::fs::write(&ca, pem).with_context(|| format!("writing {}", ca.display()))?;
    let mut all = SYSTEM_BUNDLES.iter().find_map(|p| std::fs::read_to_string(p).ok()).unwrap_or_default();
    if !all.is_empty() && !all.ends_with('\n') {
        all.push('\n');
    }
    all.push_str(pem);
    std::fs::write(&bundle, all).with_context(|| format!("writing {}", bundle.display()))?;
    Ok(CaFiles { ca, bundle })
}

/// The `export` lines for server `url` and sandlot key `key`; with `domain`, host routing instead of
/// E2B_SANDBOX_URL, and the CA files when the server issued its certificate.
fn env_lines(url: &str, key: &str, domain: Option<&str>, ca: Option<&CaFiles>) -> String {
    let base = url.trim_end_matches('/');
    // With a domain the SDKs find everything by name, the API at `https://api.{domain}` as E2B's.
    let mut vars = Vec::new();
    match domain {
        Some(d) => vars.push(("E2B_DOMAIN", d.to_string())),
        None => {
            vars.push(("E2B_API_URL", format!("{base}/e2b")));
            vars.push(("E2B_SANDBOX_URL", base.to_string()));
        }
    }
    vars.push(("E2B_API_KEY", sandlot_api::e2b::e2b_api_key(key)));
    if let Some(ca) = ca {
        vars.push(("SSL_CERT_FILE", ca.bundle.display().to_string()));
        vars.push(("NODE_EXTRA_CA_CERTS", ca.ca.display().to_string()));
    }
    let mut out = String::new();
    if domain.is_some() {
        // The SDKs read E2B_SANDBOX_URL and E2B_API_URL first: ones left over from header routing
        // would win.
        out.push_str("unset E2B_SANDBOX_URL E2B_API_URL\n");
    }
    out.extend(vars.iter().map(|(k, v)| format!("export {k}={}\n", shell_quote(v))));
    out
}

pub fn execute(cmd: E2bCmd) -> anyhow::Result<i32> {
    match cmd {
        E2bCmd::Env(args) => {
            let key = args.conn.key()?;
            let client = sandlot_client::Client::new(&args.conn.url, &key);
            let connection = client.e2b_connection()?;
            let domain = connection.domain.filter(|_| !args.no_domain);
            let ca = match (&domain, connection.ca_issued) {
                (Some(d), true) => {
                    let dir = match args.ca_dir {
                        Some(d) => d,
                        None => default_ca_dir()?,
                    };
                    Some(write_ca(&dir, d, &client.e2b_ca_pem()?)?)
                }
                _ => None,
            };
            print!("{}", env_lines(&args.conn.url, &key, domain.as_deref(), ca.as_ref()));
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_lines_point_at_the_server_with_the_key_in_e2b_format() {
        let out = env_lines("http://127.0.0.1:7423/", "sl_k'y", None, None);
        assert_eq!(
            out,
            "export E2B_API_URL='http://127.0.0.1:7423/e2b'\n\
             export E2B_SANDBOX_URL='http://127.0.0.1:7423'\n\
             export E2B_API_KEY='e2b_736c5f6b2779'\n"
        );
    }

    #[test]
    fn with_a_domain_and_the_servers_ca_host_routing_and_trust_are_exported() {
        let dir = tempfile::tempdir().unwrap();
        let ca = write_ca(dir.path(), "e2b.test:8443", "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n")
            .unwrap();
        let bundle = std::fs::read_to_string(&ca.bundle).unwrap();
        assert!(bundle.ends_with("-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n"), "{bundle}");
        let out = env_lines("http://h:1", "k", Some("e2b.test:8443"), Some(&ca));
        assert!(out.starts_with("unset E2B_SANDBOX_URL E2B_API_URL\n"), "{out}");
        assert!(out.contains("export E2B_DOMAIN='e2b.test:8443'\n") && !out.contains("E2B_SANDBOX_URL="), "{out}");
        assert!(!out.contains("E2B_API_URL="), "{out}");
        assert!(out.contains(&format!("export SSL_CERT_FILE='{}'\n", ca.bundle.display())), "{out}");
        assert!(out.contains(&format!("export NODE_EXTRA_CA_CERTS='{}'\n", ca.ca.display())), "{out}");
    }
}
