//! The audit log: what each tenant did, appended on every action and pruned after the retention.

use rusqlite::params;
use sandlot_api::AuditEntry;
use sha2::{Digest, Sha256};

use crate::{now_ms, Result, SqliteStore};

/// Bytes of a command line (or of a list of names) an audit row keeps: enough to read what ran, small
/// enough that a tenant running commands with megabyte argvs cannot fill the host's disk through the
/// audit log. What is cut is identified by its full length and SHA-256.
pub const AUDIT_LIST_BYTES: usize = 1024;

/// The first [`AUDIT_LIST_BYTES`] of `items` (each counted with a NUL after it, as `execve` sees an
/// argv; the last kept item cut at a character boundary), and whether anything was cut.
pub fn audit_head(items: &[String]) -> (Vec<String>, bool) {
    let mut used = 0;
    let mut out = Vec::new();
    for item in items {
        if used + item.len() < AUDIT_LIST_BYTES {
            used += item.len() + 1;
            out.push(item.clone());
            continue;
        }
        let mut cut = AUDIT_LIST_BYTES.saturating_sub(used + 1);
        while !item.is_char_boundary(cut) {
            cut -= 1;
        }
        out.push(item[..cut].to_string());
        return (out, true);
    }
    (out, false)
}

/// An audit row's view of a command line: `{"argv": [...]}` when it fits in [`AUDIT_LIST_BYTES`];
/// else its head, with `argv_truncated: true`, `argv_bytes` (the full size, NULs included) and
/// `argv_sha256` (of every argument followed by a NUL).
pub fn audit_argv(argv: &[String]) -> serde_json::Value {
    let (head, cut) = audit_head(argv);
    if !cut {
        return serde_json::json!({ "argv": head });
    }
    let mut h = Sha256::new();
    for a in argv {
        h.update(a.as_bytes());
        h.update([0u8]);
    }
    let sha: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let bytes: usize = argv.iter().map(|a| a.len() + 1).sum();
    serde_json::json!({ "argv": head, "argv_truncated": true, "argv_bytes": bytes, "argv_sha256": sha })
}

/// The audit log: who did what to which sandbox, kept for the retention window.
pub trait AuditLog {
    /// Appends an audit record.
    fn audit(&self, tenant: &str, sandbox_id: Option<&str>, action: &str, detail: &serde_json::Value) -> Result<()>;

    /// Deletes audit records older than `before_ms`, a batch at a time (so the database is never
    /// locked for long); returns how many went.
    fn prune_audit(&self, before_ms: i64) -> Result<usize>;

    /// Audit records, newest first; `tenant = None` reads every tenant's (admin).
    fn list_audit(&self, tenant: Option<&str>, sandbox_id: Option<&str>, limit: u32) -> Result<Vec<AuditEntry>>;
}

impl AuditLog for SqliteStore {
    fn audit(&self, tenant: &str, sandbox_id: Option<&str>, action: &str, detail: &serde_json::Value) -> Result<()> {
        self.conn().execute(
            "INSERT INTO audit(at_ms, tenant, sandbox_id, action, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![now_ms(), tenant, sandbox_id, action, detail.to_string()],
        )?;
        Ok(())
    }

    fn prune_audit(&self, before_ms: i64) -> Result<usize> {
        /// Rows one statement deletes: a few milliseconds of work between other writers' turns.
        const BATCH: i64 = 5_000;
        let mut total = 0;
        loop {
            let n = self.conn().execute(
                "DELETE FROM audit WHERE seq IN (SELECT seq FROM audit WHERE at_ms < ?1 LIMIT ?2)",
                params![before_ms, BATCH],
            )?;
            total += n;
            if (n as i64) < BATCH {
                return Ok(total);
            }
        }
    }

    fn list_audit(&self, tenant: Option<&str>, sandbox_id: Option<&str>, limit: u32) -> Result<Vec<AuditEntry>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT seq, at_ms, tenant, sandbox_id, action, detail FROM audit
             WHERE (?1 IS NULL OR tenant = ?1) AND (?2 IS NULL OR sandbox_id = ?2)
             ORDER BY seq DESC LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![tenant, sandbox_id, limit], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get::<_, String>(5)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, at_ms, tenant, sandbox_id, action, detail) = row?;
            out.push(AuditEntry { seq, at_ms, tenant, sandbox_id, action, detail: serde_json::from_str(&detail)? });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::*;

    #[test]
    fn a_megabyte_argv_is_stored_as_its_first_kib_with_length_and_digest() {
        let argv = vec!["/bin/echo".to_string(), "é".repeat(1 << 19)];
        let v = audit_argv(&argv);
        let stored = v.to_string();
        assert!(stored.len() < AUDIT_LIST_BYTES + 300, "{} bytes stored", stored.len());
        assert_eq!(v["argv_truncated"], true);
        assert_eq!(v["argv_bytes"], 10 + (1 << 20) + 1);
        assert_eq!(v["argv"][0], "/bin/echo");
        assert!(v["argv"][1].as_str().unwrap().starts_with("éé"));
        assert_eq!(v["argv_sha256"].as_str().unwrap().len(), 64);
        assert_eq!(audit_argv(&["true".to_string()]), serde_json::json!({"argv": ["true"]}));
    }

    #[test]
    fn audit_rows_older_than_the_retention_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("s.db")).unwrap();
        store.audit("a", None, "old", &serde_json::json!({})).unwrap();
        store.audit("a", None, "old", &serde_json::json!({})).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let cut = now_ms();
        store.audit("a", None, "new", &serde_json::json!({})).unwrap();
        assert_eq!(store.prune_audit(cut).unwrap(), 2);
        let left = store.list_audit(None, None, 10).unwrap();
        assert_eq!(left.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(), ["new"]);
    }

    #[test]
    fn audit_filters_by_tenant_and_sandbox() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("s.db")).unwrap();
        store.audit("a", Some("sb_1"), "exec", &serde_json::json!({"argv": ["true"]})).unwrap();
        store.audit("b", None, "key.create", &serde_json::json!({})).unwrap();
        assert_eq!(store.list_audit(Some("a"), None, 10).unwrap().len(), 1);
        assert_eq!(store.list_audit(None, None, 10).unwrap().len(), 2);
        let e = &store.list_audit(Some("a"), Some("sb_1"), 10).unwrap()[0];
        assert_eq!(e.action, "exec");
        assert_eq!(e.detail["argv"][0], "true");
        store.integrity_check().unwrap();
    }
}
