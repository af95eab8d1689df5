//! Per-sandbox access tokens: a bearer credential for one sandbox's data plane (the E2B surface's
//! envd and ports), so a program holding it can run commands and move files in that sandbox and in no
//! other, without the tenant's API key.
//!
//! A token is HMAC-SHA256 of the sandbox id under a server secret kept in the store: nothing per
//! token is stored, it stays valid across restarts for as long as its sandbox exists (a persistent
//! sandbox's client reconnects with the token it holds), and it dies with the sandbox (its record
//! is checked on every use), or when its tenant has no working API key left (revoking a tenant's
//! keys ends its tokens). Knowing an id proves nothing: the token is checked in constant time.

use crate::{Caller, Control, Error, Result};

/// A kind of per-sandbox token: what it starts with, so a leaked one is recognisable (secret
/// scanners, logs), and its label, for domain separation (the secret derives nothing else from the
/// same input, and one kind of token is never another).
struct TokenKind {
    prefix: &'static str,
    label: &'static [u8],
}

/// The data plane's token (the E2B surface's envd and ports).
const ACCESS: TokenKind = TokenKind { prefix: "sat_", label: b"sandlot sandbox access token v1\0" };
/// The ports' token only (E2B's `E2B-Traffic-Access-Token`): it admits requests to the sandbox's
/// servers, not commands or files.
const TRAFFIC: TokenKind = TokenKind { prefix: "stt_", label: b"sandlot sandbox traffic token v1\0" };

/// HMAC-SHA256 (RFC 2104, ring's) of the concatenated `message` parts under `key`; the webhooks'
/// signatures use it too.
pub(crate) fn hmac_sha256(key: &[u8], message: &[&[u8]]) -> [u8; 32] {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let mut ctx = ring::hmac::Context::with_key(&key);
    for part in message {
        ctx.update(part);
    }
    ctx.sign().as_ref().try_into().expect("an HMAC-SHA256 tag is 32 bytes")
}

/// Equality whose time does not depend on where the inputs differ (only on their lengths): for
/// comparing a presented credential with the expected one.
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Control {
    /// The server secret tokens derive from: the store's, read once (a store error is not kept, so
    /// the next use retries). Two racing first uses read the same row, so they agree.
    fn access_secret(&self) -> Result<&[u8; 32]> {
        if let Some(secret) = self.access_secret.get() {
            return Ok(secret);
        }
        let secret = self.store.server_secret("sandbox-access")?;
        Ok(self.access_secret.get_or_init(|| secret))
    }

    fn token_for(&self, kind: &TokenKind, id: &str) -> Result<String> {
        let secret = self.access_secret()?;
        let mac = hmac_sha256(secret, &[kind.label, id.as_bytes()]);
        Ok(format!("{}{}", kind.prefix, mac.iter().map(|b| format!("{b:02x}")).collect::<String>()))
    }

    /// The access token of the caller's sandbox `id` (the same one every time).
    pub fn access_token(&self, caller: &Caller, id: &str) -> Result<String> {
        self.record(caller, id)?;
        self.token_for(&ACCESS, id)
    }

    /// The traffic token of the caller's sandbox `id`: it admits requests to the sandbox's ports only.
    pub fn traffic_token(&self, caller: &Caller, id: &str) -> Result<String> {
        self.record(caller, id)?;
        self.token_for(&TRAFFIC, id)
    }

    /// The owner of sandbox `id`, for a request that proves it knows the sandbox's access token
    /// without sending it (an E2B signed file URL: a hash over the token and what the URL allows).
    /// `proves` is given the token and says whether the request's proof is right; wrong, like an
    /// unknown or deleted sandbox, is `not_found`. The caller is good for `id` only.
    pub fn caller_proving_token(&self, id: &str, proves: impl FnOnce(&str) -> bool) -> Result<Caller> {
        if !proves(&self.token_for(&ACCESS, id)?) {
            return Err(Error::not_found(&format!("sandbox {id}")));
        }
        self.owner_of(id)
    }

    /// The caller an access `token` for sandbox `id` stands for: the sandbox's owner. A wrong token,
    /// like an unknown or deleted sandbox, is `not_found`. The caller is good for `id` only: a surface
    /// uses it for the sandbox the token was checked against, nothing else.
    pub fn access_caller(&self, id: &str, token: &str) -> Result<Caller> {
        self.token_caller(&ACCESS, id, token)
    }

    /// The caller a traffic `token` for sandbox `id` stands for, as [`Control::access_caller`]; a
    /// surface uses it for that sandbox's ports only.
    pub fn traffic_caller(&self, id: &str, token: &str) -> Result<Caller> {
        self.token_caller(&TRAFFIC, id, token)
    }

    /// The caller a request that carries no token nor key acts as on a port of sandbox `id`: its owner,
    /// when the sandbox was made with public ports (`network.public_ports`) and its tenant still has a
    /// key that works; `not_found` otherwise, as for a wrong token. A surface uses it for that
    /// sandbox's ports only, never for envd or the API.
    pub fn public_port_caller(&self, id: &str) -> Result<Caller> {
        let not_found = || Error::not_found(&format!("sandbox {id}"));
        let tenant = self.store.tenant_of(id)?.ok_or_else(not_found)?;
        let caller = Caller { tenant, admin: false };
        // The record (not deleted, public) before the keys: a sandbox that is not public says nothing
        // about its tenant's keys to a caller with no credentials.
        if self.record(&caller, id)?.network.public_ports != Some(true) {
            return Err(not_found());
        }
        self.check_live_key(&caller.tenant)?;
        Ok(caller)
    }

    fn token_caller(&self, kind: &TokenKind, id: &str, token: &str) -> Result<Caller> {
        let expected = self.token_for(kind, id)?;
        if !same_bytes(expected.as_bytes(), token.as_bytes()) {
            return Err(Error::not_found(&format!("sandbox {id}")));
        }
        self.owner_of(id)
    }

    /// The owner of live sandbox `id`, once a token for it was proven. A tenant whose API keys were
    /// all revoked (or expired) holds no token either: its tokens are refused as its keys are.
    fn owner_of(&self, id: &str) -> Result<Caller> {
        let not_found = || Error::not_found(&format!("sandbox {id}"));
        let tenant = self.store.tenant_of(id)?.ok_or_else(not_found)?;
        self.check_live_key(&tenant)?;
        let caller = Caller { tenant, admin: false };
        // A deleted sandbox keeps its row: its token must die with it.
        self.record(&caller, id)?;
        Ok(caller)
    }

    /// Refuses a tenant none of whose API keys works any more (revoked or expired): what its keys
    /// could do, its tokens and public ports cannot either.
    fn check_live_key(&self, tenant: &str) -> Result<()> {
        if !self.store.tenant_has_live_key(tenant)? {
            return Err(Error::new(
                crate::Kind::Unauthenticated,
                "this sandbox's tenant has no API key that works any more (revoked or expired): its access \
                 tokens and signed URLs ended with them; ask the admin for a new key",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let mac = hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    #[test]
    fn same_bytes_compares_lengths_and_contents() {
        assert!(same_bytes(b"abc", b"abc"));
        assert!(!same_bytes(b"abc", b"abd"));
        assert!(!same_bytes(b"abc", b"ab"));
    }
}
