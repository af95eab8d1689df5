//! Secrets the server makes once and keeps across restarts (the key that derives per-sandbox access
//! tokens): random on first use, then read back, so a token given out before a restart stays valid
//! for as long as its sandbox lives.

use rusqlite::params;

use crate::{Result, SqliteStore};

/// The server's own secrets (signing keys), made once and kept.
pub trait Secrets {
    /// The 32-byte secret named `name`, made from the OS's random source the first time it is asked
    /// for. Two servers racing on one database agree: the first insert wins and both read it back.
    fn server_secret(&self, name: &str) -> Result<[u8; 32]>;
}

impl Secrets for SqliteStore {
    fn server_secret(&self, name: &str) -> Result<[u8; 32]> {
        use rand::RngCore;
        let mut fresh = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut fresh);
        let conn = self.conn();
        conn.execute("INSERT OR IGNORE INTO server_secrets (name, value) VALUES (?1, ?2)", params![name, &fresh[..]])?;
        let value: Vec<u8> =
            conn.query_row("SELECT value FROM server_secrets WHERE name = ?1", params![name], |r| r.get(0))?;
        value.try_into().map_err(|v: Vec<u8>| {
            crate::StoreError::Integrity(format!("server secret {name:?} is {} bytes, expected 32", v.len()))
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::prelude::*;
    use crate::SqliteStore;

    #[test]
    fn a_secret_is_made_once_and_kept_across_opens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let first = SqliteStore::open(&path).unwrap().server_secret("access").unwrap();
        assert_ne!(first, [0u8; 32]);
        let again = SqliteStore::open(&path).unwrap().server_secret("access").unwrap();
        assert_eq!(first, again);
        assert_ne!(SqliteStore::open(&path).unwrap().server_secret("other").unwrap(), first);
    }
}
