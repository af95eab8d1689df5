//! Tenants and their API keys: keys are stored as SHA-256 digests, never in clear, and a tenant row
//! also holds the always-deny exemptions an admin granted it.

use rusqlite::{params, OptionalExtension};
use sandlot_api::KeyInfo;
use sha2::{Digest, Sha256};

use crate::{now_ms, Result, SqliteStore};

/// Who a valid API key acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Tenant name.
    pub tenant: String,
    /// May create keys and read every tenant's audit.
    pub admin: bool,
}

/// What an API key is worth now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// A valid key.
    Valid(Principal),
    /// No such key.
    Unknown,
    /// The key expired at this time (Unix ms).
    Expired(i64),
    /// The key was revoked at this time (Unix ms).
    Revoked(i64),
}

/// How often a key's `last_used` is written at most: a write per minute per key, not per request.
const LAST_USED_RESOLUTION_MS: i64 = 60_000;

fn digest(key: &str) -> String {
    let d = Sha256::digest(key.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// A key's public id: derived from its digest (a hash of a hash of 238 random bits reveals nothing),
/// so it needs no column and old keys have one too.
/// The columns [`key_info`] reads, in its order.
const KEY_INFO_SELECT: &str =
    "SELECT digest, prefix, tenant, admin, created_ms, expires_ms, last_used_ms, revoked_ms FROM api_keys";

/// A row of [`KEY_INFO_SELECT`] as the API shows a key (its id, never its digest).
fn key_info(r: &rusqlite::Row<'_>) -> rusqlite::Result<KeyInfo> {
    Ok(KeyInfo {
        id: key_id(&r.get::<_, String>(0)?),
        prefix: r.get(1)?,
        tenant: r.get(2)?,
        admin: r.get(3)?,
        created_at_ms: r.get(4)?,
        expires_at_ms: r.get(5)?,
        last_used_at_ms: r.get(6)?,
        revoked_at_ms: r.get(7)?,
    })
}

fn key_id(digest: &str) -> String {
    format!("key_{}", &digest[..16])
}

/// The public id of API key `key` (as `GET /v1/keys` lists it).
pub fn key_id_of(key: &str) -> String {
    key_id(&digest(key))
}

fn random_token(prefix: &str) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut rng = rand::rngs::OsRng;
    let body: String = (0..40).map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char).collect();
    format!("{prefix}{body}")
}

/// Tenants, their API keys (stored as digests) and their network exemptions.
pub trait Keys {
    /// Creates the first admin key if no admin key exists; returns it in clear (shown once).
    fn ensure_admin_key(&self) -> Result<Option<String>>;

    /// Creates an API key for `tenant` (creating the tenant if new) and returns it in clear.
    fn create_key(&self, tenant: &str, admin: bool) -> Result<String>;

    /// Creates an API key for `tenant` that stops working at `expires_ms` (if given); returns the key
    /// in clear and its id.
    fn create_key_expiring(&self, tenant: &str, admin: bool, expires_ms: Option<i64>) -> Result<(String, String)>;

    /// What `key` is worth now; a valid key's last use is recorded (to the minute).
    fn authenticate(&self, key: &str) -> Result<Auth>;

    /// Whether `tenant` holds at least one key that works now (not revoked, not expired): what keeps
    /// the tenant's per-sandbox tokens alive (revoking all its keys ends them too).
    fn tenant_has_live_key(&self, tenant: &str) -> Result<bool>;

    /// API keys, of one tenant or all, oldest first (revoked ones included, marked).
    fn list_keys(&self, tenant: Option<&str>) -> Result<Vec<KeyInfo>>;

    /// The key with id `id`, if there is one: one indexed read (the id is a prefix of the digest, the
    /// table's primary key), cheap enough for long-lived connections to re-check their key often.
    fn key_by_id(&self, id: &str) -> Result<Option<KeyInfo>>;

    /// Revokes the key with id `id` (kept, marked, so its holder is told it was revoked); returns it
    /// as it was, or `None` if there is no such key.
    fn revoke_key(&self, id: &str) -> Result<Option<KeyInfo>>;

    /// The always-denied ranges an admin opted `tenant` into; `None` if there is no such tenant.
    fn tenant_exemptions(&self, tenant: &str) -> Result<Option<Vec<String>>>;

    /// Replaces `tenant`'s exemptions; false if there is no such tenant.
    fn set_tenant_exemptions(&self, tenant: &str, cidrs: &[String]) -> Result<bool>;
}

impl Keys for SqliteStore {
    fn ensure_admin_key(&self) -> Result<Option<String>> {
        let has: bool =
            self.conn().query_row("SELECT EXISTS(SELECT 1 FROM api_keys WHERE admin = 1)", [], |r| r.get(0))?;
        if has {
            return Ok(None);
        }
        self.create_key("admin", true).map(Some)
    }

    fn create_key(&self, tenant: &str, admin: bool) -> Result<String> {
        Ok(self.create_key_expiring(tenant, admin, None)?.0)
    }

    fn create_key_expiring(&self, tenant: &str, admin: bool, expires_ms: Option<i64>) -> Result<(String, String)> {
        let key = random_token("sl_");
        let d = digest(&key);
        let now = now_ms();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute("INSERT OR IGNORE INTO tenants(name, created_ms) VALUES (?1, ?2)", params![tenant, now])?;
        tx.execute(
            "INSERT INTO api_keys(digest, prefix, tenant, admin, created_ms, expires_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![d, &key[..8], tenant, admin, now, expires_ms],
        )?;
        tx.commit()?;
        Ok((key, key_id(&d)))
    }

    fn authenticate(&self, key: &str) -> Result<Auth> {
        let d = digest(key);
        let conn = self.conn();
        let row = conn
            .query_row(
                "SELECT tenant, admin, expires_ms, revoked_ms FROM api_keys WHERE digest = ?1",
                params![d],
                |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, Option<i64>>(2)?, r.get::<_, Option<i64>>(3)?)),
            )
            .optional()?;
        let Some((tenant, admin, expires, revoked)) = row else { return Ok(Auth::Unknown) };
        let now = now_ms();
        if let Some(at) = revoked {
            return Ok(Auth::Revoked(at));
        }
        if let Some(at) = expires.filter(|at| *at <= now) {
            return Ok(Auth::Expired(at));
        }
        conn.execute(
            "UPDATE api_keys SET last_used_ms = ?2 WHERE digest = ?1 AND (last_used_ms IS NULL OR last_used_ms <= ?3)",
            params![d, now, now - LAST_USED_RESOLUTION_MS],
        )?;
        Ok(Auth::Valid(Principal { tenant, admin }))
    }

    fn tenant_has_live_key(&self, tenant: &str) -> Result<bool> {
        Ok(self.conn().query_row(
            "SELECT EXISTS(SELECT 1 FROM api_keys WHERE tenant = ?1 AND revoked_ms IS NULL
                 AND (expires_ms IS NULL OR expires_ms > ?2))",
            params![tenant, now_ms()],
            |r| r.get(0),
        )?)
    }

    fn list_keys(&self, tenant: Option<&str>) -> Result<Vec<KeyInfo>> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare(&format!("{KEY_INFO_SELECT} WHERE (?1 IS NULL OR tenant = ?1) ORDER BY created_ms, digest"))?;
        let rows = stmt.query_map(params![tenant], key_info)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    fn key_by_id(&self, id: &str) -> Result<Option<KeyInfo>> {
        let Some(hex) = id.strip_prefix("key_").filter(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        else {
            return Ok(None);
        };
        // Hex digits sort below `g`: every digest that starts with `hex` lies in [hex, hex + "g").
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!("{KEY_INFO_SELECT} WHERE digest >= ?1 AND digest < ?2"))?;
        let mut rows = stmt.query_map(params![hex, format!("{hex}g")], key_info)?;
        Ok(rows.next().transpose()?)
    }

    fn revoke_key(&self, id: &str) -> Result<Option<KeyInfo>> {
        let Some(key) = self.list_keys(None)?.into_iter().find(|k| k.id == id) else { return Ok(None) };
        let Some(hex) = id.strip_prefix("key_") else { return Ok(None) };
        self.conn().execute(
            "UPDATE api_keys SET revoked_ms = ?2 WHERE substr(digest, 1, 16) = ?1 AND revoked_ms IS NULL",
            params![hex, now_ms()],
        )?;
        Ok(Some(key))
    }

    fn tenant_exemptions(&self, tenant: &str) -> Result<Option<Vec<String>>> {
        let text: Option<String> = self
            .conn()
            .query_row("SELECT network_exempt FROM tenants WHERE name = ?1", params![tenant], |r| r.get(0))
            .optional()?;
        Ok(match text {
            Some(t) => Some(serde_json::from_str(&t)?),
            None => None,
        })
    }

    fn set_tenant_exemptions(&self, tenant: &str, cidrs: &[String]) -> Result<bool> {
        let n = self.conn().execute(
            "UPDATE tenants SET network_exempt = ?2 WHERE name = ?1",
            params![tenant, serde_json::to_string(cidrs)?],
        )?;
        Ok(n == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_authenticate_and_are_stored_hashed() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("s.db")).unwrap();
        let admin = store.ensure_admin_key().unwrap().expect("first admin key");
        assert!(store.ensure_admin_key().unwrap().is_none(), "only one bootstrap key");
        let key = store.create_key("acme", false).unwrap();
        assert_eq!(store.authenticate(&key).unwrap(), Auth::Valid(Principal { tenant: "acme".into(), admin: false }));
        assert!(matches!(store.authenticate(&admin).unwrap(), Auth::Valid(p) if p.admin));
        assert_eq!(store.authenticate("sl_wrong").unwrap(), Auth::Unknown);
        let id = key_id_of(&key);
        let info = store.key_by_id(&id).unwrap().expect("found by id");
        assert_eq!((info.id.as_str(), info.tenant.as_str(), info.revoked_at_ms), (id.as_str(), "acme", None));
        store.revoke_key(&id).unwrap();
        assert!(store.key_by_id(&id).unwrap().unwrap().revoked_at_ms.is_some());
        assert!(store.key_by_id("key_0000000000000000").unwrap().is_none());
        assert!(store.key_by_id("key_%").unwrap().is_none());
        drop(store);
        let raw = std::fs::read(dir.path().join("s.db")).unwrap();
        let wal = std::fs::read(dir.path().join("s.db-wal")).unwrap_or_default();
        for bytes in [raw, wal] {
            assert!(!bytes.windows(key.len()).any(|w| w == key.as_bytes()), "key in clear on disk");
        }
    }

    #[test]
    fn keys_are_listed_without_secrets_and_can_be_revoked_or_expire() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("s.db")).unwrap();
        let (key, id) = store.create_key_expiring("acme", false, None).unwrap();
        let (old, _) = store.create_key_expiring("acme", false, Some(now_ms() - 1)).unwrap();
        store.create_key("other", false).unwrap();
        let listed = store.list_keys(Some("acme")).unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().any(|k| (k.id.as_str(), k.prefix.as_str()) == (id.as_str(), &key[..8])));
        assert!(matches!(store.authenticate(&old).unwrap(), Auth::Expired(_)));
        assert!(matches!(store.authenticate(&key).unwrap(), Auth::Valid(_)));
        let mine = |s: &SqliteStore| s.list_keys(Some("acme")).unwrap().into_iter().find(|k| k.id == id).unwrap();
        assert!(mine(&store).last_used_at_ms.is_some());
        assert_eq!(store.revoke_key(&id).unwrap().map(|k| k.tenant), Some("acme".to_string()));
        assert!(matches!(store.authenticate(&key).unwrap(), Auth::Revoked(_)));
        assert!(mine(&store).revoked_at_ms.is_some());
        // acme's keys are revoked or expired; other's is live; nobody's is nobody's.
        assert!(!store.tenant_has_live_key("acme").unwrap());
        assert!(store.tenant_has_live_key("other").unwrap());
        assert!(!store.tenant_has_live_key("nobody").unwrap());
        assert_eq!(store.revoke_key("key_0000000000000000").unwrap(), None);
        assert_eq!(store.list_keys(None).unwrap().len(), 3);
    }
}
