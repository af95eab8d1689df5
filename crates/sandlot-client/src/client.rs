//! [`Client`]: the connection to one sandlot server, and the routes that are not about one sandbox.

use std::fmt;
use std::io::{self, Read};
use std::time::Duration;

use sandlot_api::{
    AuditEntry, AuditList, CreateKey, CreateSandbox, KeyCreated, SandboxInfo, SandboxList, DEFAULT_LISTEN, ENV_API_KEY,
    ENV_URL,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, ErrorKind, Result};
use crate::sandbox::Sandbox;
use crate::url;

/// How long to wait for the TCP connection; there is no overall read timeout since exec can run long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A blocking client for one sandlot server, authenticated with one API key.
///
/// Cloning is cheap and clones share the connection pool.
///
/// ```no_run
/// use sandlot_client::{Client, api::CreateSandbox};
///
/// let client = Client::from_env()?;
/// let sandbox = client.create(&CreateSandbox::default())?;
/// let result = sandbox.run(&["echo", "hello"])?;
/// assert_eq!(result.stdout, "hello\n");
/// sandbox.delete()?;
/// # Ok::<(), sandlot_client::Error>(())
/// ```
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
    base: String,
    auth: String,
}

impl Client {
    /// A client for the server at `url` (e.g. `http://127.0.0.1:7423`) using `api_key`.
    ///
    /// Nothing is sent yet; a URL the client cannot use is reported by the first request, as
    /// [`ErrorKind::Config`].
    pub fn new(url: impl Into<String>, api_key: impl Into<String>) -> Client {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(CONNECT_TIMEOUT)
            .user_agent(concat!("sandlot-client/", env!("CARGO_PKG_VERSION")))
            .build();
        let mut base = url.into().trim().to_string();
        while base.ends_with('/') {
            base.pop();
        }
        Client { agent, base, auth: format!("Bearer {}", api_key.into().trim()) }
    }

    /// A client configured from `SANDLOT_URL` (default `http://127.0.0.1:7423`) and `SANDLOT_API_KEY`.
    ///
    /// A missing or empty key is an [`ErrorKind::Config`] error that says where keys come from.
    pub fn from_env() -> Result<Client> {
        let url = std::env::var(ENV_URL)
            .ok()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| format!("http://{DEFAULT_LISTEN}"));
        let key = std::env::var(ENV_API_KEY).unwrap_or_default();
        if key.trim().is_empty() {
            return Err(Error::new(ErrorKind::Config, missing_key_message()));
        }
        Ok(Client::new(url, key))
    }

    /// The server URL this client talks to (without a trailing slash).
    pub fn url(&self) -> &str {
        &self.base
    }

    /// The API key this client sends (to hand to another client of the same server, such as the
    /// E2B SDKs through `sandlot e2b env`).
    pub fn api_key(&self) -> &str {
        self.auth.strip_prefix("Bearer ").unwrap_or(&self.auth)
    }

    /// Checks that the server answers `GET /healthz` (no key needed); the answer names the host
    /// features the server runs without (`degraded`).
    pub fn health(&self) -> Result<sandlot_api::Health> {
        let response = self.send(self.agent.get(&format!("{}/healthz", self.base)))?;
        json(response, "the health answer")
    }

    /// How E2B clients reach this server's sandboxes (`GET /e2b/connection`, no key needed).
    pub fn e2b_connection(&self) -> Result<sandlot_api::e2b::E2bConnection> {
        let response = self.send(self.agent.get(&format!("{}/e2b/connection", self.base)))?;
        json(response, "the E2B connection answer")
    }

    /// The CA (PEM) that issued the server's E2B TLS certificate (`GET /e2b/ca.pem`, no key needed).
    pub fn e2b_ca_pem(&self) -> Result<String> {
        let response = self.send(self.agent.get(&format!("{}/e2b/ca.pem", self.base)))?;
        response.into_string().map_err(|e| Error::new(ErrorKind::Protocol, format!("reading the CA certificate: {e}")))
    }

    /// Creates an API key for `tenant` (the tenant is created if new). Needs the admin key.
    pub fn create_key(&self, tenant: &str) -> Result<KeyCreated> {
        self.create_key_with(&CreateKey { tenant: tenant.to_string(), ..CreateKey::default() })
    }

    /// Creates an API key as `request` says (an expiry with `expires_in_s` or `expires_at_ms`).
    /// Needs the admin key.
    pub fn create_key_with(&self, request: &CreateKey) -> Result<KeyCreated> {
        let response = self.send_json(self.request("POST", "/v1/keys"), request)?;
        json(response, "the created key")
    }

    /// Lists API keys (ids, prefixes, tenants, times; never secrets), of `tenant` or of all. Needs the
    /// admin key.
    pub fn list_keys(&self, tenant: Option<&str>) -> Result<Vec<sandlot_api::KeyInfo>> {
        let pairs: Vec<(&str, &str)> = tenant.map(|t| ("tenant", t)).into_iter().collect();
        let response = self.send(self.request("GET", &format!("/v1/keys{}", url::query(&pairs))))?;
        let list: sandlot_api::KeyList = json(response, "the key list")?;
        Ok(list.keys)
    }

    /// Revokes the API key with id `id`: requests with it get 401 from now on. Needs the admin key.
    pub fn revoke_key(&self, id: &str) -> Result<()> {
        drain(self.send(self.request("DELETE", &format!("/v1/keys/{}", url::segment(id))))?);
        Ok(())
    }

    /// The always-denied ranges `tenant`'s sandboxes are opted into (admin key only).
    pub fn tenant_network(&self, tenant: &str) -> Result<sandlot_api::TenantNetwork> {
        let response = self.send(self.request("GET", &format!("/v1/tenants/{}/network", url::segment(tenant))))?;
        json(response, "the tenant's network settings")
    }

    /// Opts `tenant`'s sandboxes into reaching these always-denied ranges (replacing the previous
    /// list; an empty list withdraws every exemption). Admin key only. Running sandboxes follow at once.
    pub fn set_tenant_network(
        &self,
        tenant: &str,
        network: &sandlot_api::TenantNetwork,
    ) -> Result<sandlot_api::TenantNetwork> {
        let http = self.request("PUT", &format!("/v1/tenants/{}/network", url::segment(tenant)));
        let response = self.send_json(http, network)?;
        json(response, "the tenant's network settings")
    }

    /// Creates a sandbox and returns a handle to it; [`Sandbox::created`] holds the server's answer.
    pub fn create(&self, spec: &CreateSandbox) -> Result<Sandbox> {
        let response = self.send_json(self.request("POST", "/v1/sandboxes"), spec)?;
        let info: SandboxInfo = json(response, "the created sandbox")?;
        Ok(Sandbox::with_info(self.clone(), info))
    }

    /// Lists the sandboxes of the key's tenant, newest first.
    pub fn list(&self) -> Result<Vec<SandboxInfo>> {
        let response = self.send(self.request("GET", "/v1/sandboxes"))?;
        let list: SandboxList = json(response, "the sandbox list")?;
        Ok(list.sandboxes)
    }

    /// Fetches one sandbox's current state.
    pub fn get(&self, id: &str) -> Result<SandboxInfo> {
        let path = format!("/v1/sandboxes/{}", url::segment(id));
        let response = self.send(self.request("GET", &path))?;
        json(response, "the sandbox")
    }

    /// Lists the tenant's snapshots, newest first.
    pub fn snapshots(&self) -> Result<Vec<sandlot_api::SnapshotInfo>> {
        let response = self.send(self.request("GET", "/v1/snapshots"))?;
        let list: sandlot_api::SnapshotList = json(response, "the snapshot list")?;
        Ok(list.snapshots)
    }

    /// Deletes a snapshot (by id or name). Sandboxes made from it are unaffected.
    pub fn delete_snapshot(&self, id: &str) -> Result<()> {
        let path = format!("/v1/snapshots/{}", url::segment(id));
        drain(self.send(self.request("DELETE", &path))?);
        Ok(())
    }

    /// A handle to sandbox `id`, without asking the server whether it exists. An id in E2B's form
    /// (sandlot's without `sb_`, as the E2B SDKs and `sandlot e2b` show it) names the same sandbox.
    pub fn sandbox(&self, id: impl Into<String>) -> Sandbox {
        Sandbox::new(self.clone(), native_sandbox_id(id.into()))
    }

    /// Reads the audit log (newest first), optionally of one sandbox, at most `limit` records
    /// (the server's default when `None`).
    pub fn audit(&self, sandbox_id: Option<&str>, limit: Option<u32>) -> Result<Vec<AuditEntry>> {
        let limit = limit.map(|n| n.to_string());
        let mut pairs = Vec::new();
        if let Some(id) = sandbox_id {
            pairs.push(("sandbox_id", id));
        }
        if let Some(limit) = &limit {
            pairs.push(("limit", limit.as_str()));
        }
        let path = format!("/v1/audit{}", url::query(&pairs));
        let response = self.send(self.request("GET", &path))?;
        let list: AuditList = json(response, "the audit log")?;
        Ok(list.entries)
    }

    /// What the key's tenant holds (`GET /v1/usage`): sandboxes, snapshots, images and their bytes.
    pub fn usage(&self) -> Result<sandlot_api::TenantUsage> {
        json(self.send(self.request("GET", "/v1/usage"))?, "the usage")
    }

    /// A request to `path_and_query` (starting with `/`) with the key set.
    pub(crate) fn request(&self, method: &str, path_and_query: &str) -> ureq::Request {
        self.agent.request(method, &format!("{}{}", self.base, path_and_query)).set("Authorization", &self.auth)
    }

    /// Sends a request without a body.
    pub(crate) fn send(&self, request: ureq::Request) -> Result<ureq::Response> {
        self.check_scheme()?;
        request.call().map_err(|e| self.error(e))
    }

    /// Sends a JSON body.
    pub(crate) fn send_json<T: Serialize + ?Sized>(&self, request: ureq::Request, body: &T) -> Result<ureq::Response> {
        self.check_scheme()?;
        request.send_json(body).map_err(|e| self.error(e))
    }

    /// Streams a raw body (chunked) of the given media type.
    pub(crate) fn send_reader(
        &self,
        request: ureq::Request,
        content_type: &str,
        body: impl Read,
    ) -> Result<ureq::Response> {
        self.check_scheme()?;
        request.set("Content-Type", content_type).send(body).map_err(|e| self.error(e))
    }

    /// Refuses URLs other than `http://` up front: this client is built without TLS, and ureq would
    /// otherwise report an `https://` URL as a connection failure.
    fn check_scheme(&self) -> Result<()> {
        let scheme = self.base.split_once("://").map(|(s, _)| s);
        if scheme.is_some_and(|s| s.eq_ignore_ascii_case("http")) {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Config,
            format!(
                "cannot use server URL {:?}: expected http://HOST:PORT (e.g. http://127.0.0.1:7423); \
                 this client speaks plain http only",
                self.base
            ),
        ))
    }

    fn error(&self, err: ureq::Error) -> Error {
        Error::from_ureq(err, &self.base)
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key stays out of logs.
        f.debug_struct("Client").field("url", &self.base).finish_non_exhaustive()
    }
}

/// Where keys come from, for errors about a missing one.
pub(crate) fn missing_key_message() -> String {
    format!(
        "no API key: set {ENV_API_KEY}. `sandlot serve` writes the admin key to <state-dir>/admin.key \
         (/var/lib/sandlot/admin.key by default); with it, `sandlot keys create --tenant T` makes a key \
         for a tenant"
    )
}

/// Parses a JSON answer; `what` names it in errors.
pub(crate) fn json<T: DeserializeOwned>(response: ureq::Response, what: &str) -> Result<T> {
    serde_json::from_reader(response.into_reader()).map_err(|e| Error::decode(what, e))
}

/// Reads an answer we do not need to its end, so the connection can be reused.
pub(crate) fn drain(response: ureq::Response) {
    let _ = io::copy(&mut response.into_reader().take(64 * 1024), &mut io::sink());
}

/// `sb_…` as given; an E2B-form id with `sb_` put back (as the E2B surface reads one); anything else
/// as given, for the server to call not found.
fn native_sandbox_id(id: String) -> String {
    if id.starts_with("sb_") {
        return id;
    }
    sandlot_api::e2b::sandlot_sandbox_id(&id).unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_e2b_form_id_names_the_same_sandbox() {
        assert_eq!(native_sandbox_id("sb_3gxdu2zt03s5cc6qdz7v".into()), "sb_3gxdu2zt03s5cc6qdz7v");
        assert_eq!(native_sandbox_id("3gxdu2zt03s5cc6qdz7v".into()), "sb_3gxdu2zt03s5cc6qdz7v");
        assert_eq!(native_sandbox_id("Not-An-Id".into()), "Not-An-Id");
        assert_eq!(native_sandbox_id(String::new()), "");
    }

    #[test]
    fn trailing_slashes_are_dropped() {
        assert_eq!(Client::new("http://h:1//", "k").url(), "http://h:1");
    }

    #[test]
    fn debug_hides_the_key() {
        let client = Client::new("http://h:1", "sk_secret");
        assert!(!format!("{client:?}").contains("sk_secret"));
    }

    #[test]
    fn unusable_url_is_a_config_error() {
        let err = Client::new("not a url", "k").health().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        let err = Client::new("https://127.0.0.1:1", "k").health().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    }

    #[test]
    fn nothing_listening_is_a_connect_error() {
        // Bind then drop to get a port that is very likely closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}");
        let err = Client::new(&url, "k").list().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
        assert!(err.to_string().contains(&url), "{err}");
        assert!(err.to_string().contains("sudo sandlot serve"), "{err}");
        assert!(err.is_retryable());
    }

    #[test]
    fn missing_key_says_where_keys_come_from() {
        let message = missing_key_message();
        assert!(message.contains("admin.key"));
        assert!(message.contains("sandlot keys create --tenant"));
    }
}
