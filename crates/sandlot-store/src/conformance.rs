//! What every [`Store`] must do, written against the trait alone: an implementation's tests call
//! [`check_all`] with a maker of empty stores (the SQLite one runs it below, in memory and on disk; a
//! PostgreSQL one would give a fresh schema each time). Each check takes a store of its own.
//!
//! These are the promises the control layer builds on: tenancy (another tenant's rows are never
//! answered), names unique among live sandboxes, keys stored so that only the key itself
//! authenticates, a shared blob charged once, cursors that never go back.

use std::collections::{BTreeMap, HashSet};

use sandlot_api::{EventKind, Limits, SandboxInfo, SandboxState, SnapshotInfo, TimeoutAction};

use crate::{Auth, EventFilter, ImageRow, Principal, SandboxRecord, Store};

/// A maker of empty stores, each with the schema and nothing else.
pub type Maker<'a> = &'a dyn Fn() -> Box<dyn Store>;

/// One promise, checked on an empty store.
type Check = fn(&dyn Store);

/// Runs every check, each on a store of its own; panics (with the check's name) on the first failure.
pub fn check_all(make: Maker<'_>) {
    let checks: &[(&str, Check)] = &[
        ("keys authenticate, expire and revoke", keys_authenticate_expire_and_revoke),
        ("sandboxes are per tenant", sandboxes_are_per_tenant),
        ("a live name is unique", a_live_name_is_unique_per_tenant),
        ("sandbox fields are kept", sandbox_fields_are_kept),
        ("snapshots are per tenant", snapshots_are_per_tenant),
        ("a shared blob is charged once", a_shared_blob_is_charged_once),
        ("audit is filtered", audit_is_filtered_by_tenant_and_sandbox),
        ("events are read by cursor", events_are_read_by_cursor),
        ("secrets are kept", secrets_are_made_once_per_name),
    ];
    for (name, check) in checks {
        let store = make();
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(store.as_ref())));
        if let Err(e) = run {
            let why = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
            panic!("store conformance: {name}: {}", why.unwrap_or_default());
        }
    }
}

/// A running sandbox record of `tenant`, named `name`.
pub fn record(id: &str, tenant: &str, name: Option<&str>) -> SandboxRecord {
    SandboxRecord {
        info: SandboxInfo {
            id: id.into(),
            state: SandboxState::Running,
            reason: None,
            image: "host".into(),
            limits: Limits { cpu: 1.0, memory_mb: 512, pids: 256, disk_mb: Some(1024), timeout_s: 300 },
            metadata: BTreeMap::from([("k".into(), "v".into())]),
            created_at_ms: 1,
            expires_at_ms: 2,
            name: name.map(str::to_string),
            persistent: true,
            auto_resume: true,
            idle_timeout_s: Some(5),
            on_timeout: TimeoutAction::Pause,
            stop_after_s: 600,
            last_active_at_ms: 1,
            snapshot: None,
            network: Default::default(),
        },
        tenant: tenant.into(),
        env: BTreeMap::from([("A".into(), "1".into())]),
        slot: 3,
        network: Default::default(),
        image_key: Some("sha256:k".into()),
    }
}

fn keys_authenticate_expire_and_revoke(s: &dyn Store) {
    let key = s.create_key("acme", false).unwrap();
    assert_eq!(s.authenticate(&key).unwrap(), Auth::Valid(Principal { tenant: "acme".into(), admin: false }));
    assert_eq!(s.authenticate("sk_not_a_key").unwrap(), Auth::Unknown);
    assert!(s.tenant_has_live_key("acme").unwrap());
    let listed = s.list_keys(Some("acme")).unwrap();
    assert_eq!(listed.len(), 1);
    let shown = serde_json::to_string(&listed).unwrap();
    assert!(!shown.contains(&key), "a listing holds no key");
    let (expired, _) = s.create_key_expiring("acme", false, Some(1)).unwrap();
    assert!(matches!(s.authenticate(&expired).unwrap(), Auth::Expired(1)));
    assert!(s.revoke_key(&listed[0].id).unwrap().is_some());
    assert!(matches!(s.authenticate(&key).unwrap(), Auth::Revoked(_)));
    assert!(!s.tenant_has_live_key("acme").unwrap());
    assert!(s.ensure_admin_key().unwrap().is_some(), "the first admin key is made once");
    assert!(s.ensure_admin_key().unwrap().is_none());
    let cidrs = vec!["10.1.0.0/16".to_string()];
    assert!(s.set_tenant_exemptions("acme", &cidrs).unwrap());
    assert_eq!(s.tenant_exemptions("acme").unwrap(), Some(cidrs));
}

fn sandboxes_are_per_tenant(s: &dyn Store) {
    s.create_key("acme", false).unwrap();
    s.create_key("other", false).unwrap();
    s.insert_sandbox(&record("sb_1", "acme", None)).unwrap();
    assert!(s.get_sandbox("acme", "sb_1").unwrap().is_some());
    assert!(s.get_sandbox("other", "sb_1").unwrap().is_none(), "another tenant's sandbox is not answered");
    assert!(s.list_sandboxes("other").unwrap().is_empty());
    assert_eq!(s.tenant_of("sb_1").unwrap().as_deref(), Some("acme"));
    s.set_state("sb_1", SandboxState::Deleted, Some("gone")).unwrap();
    assert!(s.get_sandbox("acme", "sb_1").unwrap().is_none(), "a deleted sandbox is not live");
    let any = s.get_sandbox_any("acme", "sb_1").unwrap().unwrap();
    assert_eq!((any.info.state, any.info.reason.as_deref()), (SandboxState::Deleted, Some("gone")));
    assert!(s.live_sandboxes().unwrap().is_empty());
}

fn a_live_name_is_unique_per_tenant(s: &dyn Store) {
    s.create_key("acme", false).unwrap();
    s.create_key("other", false).unwrap();
    s.insert_sandbox(&record("sb_1", "acme", Some("dev"))).unwrap();
    assert!(s.insert_sandbox(&record("sb_2", "acme", Some("dev"))).is_err(), "a second live sandbox of one name");
    s.insert_sandbox(&record("sb_3", "other", Some("dev"))).unwrap();
    assert_eq!(s.get_by_name("acme", "dev").unwrap().unwrap().info.id, "sb_1");
    s.set_state("sb_1", SandboxState::Deleted, None).unwrap();
    s.insert_sandbox(&record("sb_4", "acme", Some("dev"))).unwrap();
    assert_eq!(s.get_by_name("acme", "dev").unwrap().unwrap().info.id, "sb_4");
}

fn sandbox_fields_are_kept(s: &dyn Store) {
    s.create_key("acme", false).unwrap();
    let rec = record("sb_1", "acme", Some("n"));
    s.insert_sandbox(&rec).unwrap();
    assert_eq!(s.get_sandbox("acme", "sb_1").unwrap(), Some(rec));
    s.set_expiry("sb_1", 99).unwrap();
    s.touch("sb_1", 77).unwrap();
    s.set_slot("sb_1", 9).unwrap();
    let got = s.get_sandbox("acme", "sb_1").unwrap().unwrap();
    assert_eq!((got.info.expires_at_ms, got.info.last_active_at_ms, got.slot), (99, 77, 9));
}

fn snapshots_are_per_tenant(s: &dyn Store) {
    s.create_key("acme", false).unwrap();
    s.create_key("other", false).unwrap();
    let snap = SnapshotInfo {
        id: "snap_1".into(),
        name: Some("base".into()),
        sandbox_id: "sb_1".into(),
        image: "host".into(),
        created_at_ms: 5,
        bytes: 4096,
    };
    s.insert_snapshot("acme", &snap, 7, Some("sha256:k")).unwrap();
    assert_eq!(s.get_snapshot("acme", "snap_1").unwrap(), Some((snap.clone(), 7)));
    assert_eq!(s.get_snapshot("other", "snap_1").unwrap(), None);
    assert_eq!(s.list_snapshots("acme").unwrap(), vec![snap]);
    assert_eq!(s.snapshot_usage("acme").unwrap(), (1, 4096));
    assert_eq!(s.snapshot_image_key("snap_1").unwrap().as_deref(), Some("sha256:k"));
    assert_eq!(s.live_snapshot_ids().unwrap(), vec!["snap_1".to_string()]);
    s.delete_snapshot("snap_1").unwrap();
    assert!(s.list_snapshots("acme").unwrap().is_empty());
}

fn image(tenant: &str, name: &str, blobs: &[(&str, u64)]) -> ImageRow {
    ImageRow {
        tenant: tenant.into(),
        name: name.into(),
        reference: None,
        digest: format!("sha256:{}", "d".repeat(64)),
        image_key: format!("sha256:{name}"),
        image: "{}".into(),
        bytes: blobs.iter().map(|(_, b)| b).sum(),
        created_ms: 1,
        blobs: blobs.iter().map(|(d, b)| (d.to_string(), *b)).collect(),
    }
}

fn a_shared_blob_is_charged_once(s: &dyn Store) {
    s.create_key("acme", false).unwrap();
    s.create_key("other", false).unwrap();
    s.put_image(&image("acme", "a", &[("base", 100), ("a", 10)])).unwrap();
    s.put_image(&image("acme", "b", &[("base", 100), ("b", 20)])).unwrap();
    s.put_image(&image("other", "c", &[("base", 100)])).unwrap();
    assert_eq!(s.image_usage("acme").unwrap(), (2, 130), "the base both name is charged once");
    assert_eq!(s.image_usage_without("acme", Some("a")).unwrap(), (1, 120));
    let blobs = s.image_blobs("acme", None).unwrap();
    assert_eq!(blobs, HashSet::from(["base".to_string(), "a".to_string(), "b".to_string()]));
    assert!(s.get_image("other", "a").unwrap().is_none(), "another tenant's image is not answered");
    assert_eq!(s.list_images("acme").unwrap().len(), 2);
    let mut seen = 0;
    s.each_image(&mut |_| seen += 1).unwrap();
    assert_eq!(seen, 3);
    assert!(s.delete_image("acme", "a").unwrap());
    assert!(!s.delete_image("acme", "a").unwrap());
}

fn audit_is_filtered_by_tenant_and_sandbox(s: &dyn Store) {
    s.create_key("acme", false).unwrap();
    s.create_key("other", false).unwrap();
    s.audit("acme", Some("sb_1"), "exec.start", &serde_json::json!({"argv": ["true"]})).unwrap();
    s.audit("acme", None, "key.create", &serde_json::json!({})).unwrap();
    s.audit("other", Some("sb_2"), "exec.start", &serde_json::json!({})).unwrap();
    assert_eq!(s.list_audit(Some("acme"), None, 10).unwrap().len(), 2);
    let one = s.list_audit(Some("acme"), Some("sb_1"), 10).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].action, "exec.start");
    assert_eq!(s.list_audit(None, None, 10).unwrap().len(), 3, "the admin's view is every tenant's");
    assert_eq!(s.prune_audit(i64::MAX).unwrap(), 3);
    assert!(s.list_audit(None, None, 10).unwrap().is_empty());
}

fn events_are_read_by_cursor(s: &dyn Store) {
    s.create_key("acme", false).unwrap();
    s.create_key("other", false).unwrap();
    let first = s.insert_event("acme", "sb_1", EventKind::Created, &serde_json::json!({})).unwrap();
    let second = s.insert_event("other", "sb_2", EventKind::Created, &serde_json::json!({})).unwrap();
    let third = s.insert_event("acme", "sb_1", EventKind::Stopped, &serde_json::json!({"why": null})).unwrap();
    assert!(first < second && second < third, "ids only grow");
    assert_eq!(s.last_event_id().unwrap(), third);
    let filter = EventFilter { tenant: Some("acme"), ..Default::default() };
    let page = s.list_events(&filter, 0, 10).unwrap();
    let ids: Vec<i64> = page.events.iter().map(|e| e.id).collect();
    assert_eq!(ids, [first, third], "a tenant's own, oldest first");
    let after = s.list_events(&filter, first, 10).unwrap();
    assert_eq!(after.events.iter().map(|e| e.id).collect::<Vec<_>>(), [third]);
}

fn secrets_are_made_once_per_name(s: &dyn Store) {
    let a = s.server_secret("access").unwrap();
    assert_eq!(s.server_secret("access").unwrap(), a);
    assert_ne!(s.server_secret("other").unwrap(), a);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::*;
    use crate::SqliteStore;

    #[test]
    fn the_sqlite_store_conforms_in_memory() {
        check_all(&|| Box::new(SqliteStore::open_in_memory().unwrap()));
    }

    #[test]
    fn the_sqlite_store_conforms_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let n = std::sync::atomic::AtomicUsize::new(0);
        check_all(&|| {
            let i = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Box::new(SqliteStore::open(&dir.path().join(format!("s{i}.db"))).unwrap())
        });
    }

    #[test]
    fn a_failing_check_is_named() {
        // Stores that are not empty (a sandbox sb_1 of another tenant in each) break the tenancy
        // check's first insert: the failure names the check.
        let err = std::panic::catch_unwind(|| {
            check_all(&|| {
                let s = SqliteStore::open_in_memory().unwrap();
                s.create_key("squatter", false).unwrap();
                s.insert_sandbox(&record("sb_1", "squatter", None)).unwrap();
                Box::new(s)
            })
        })
        .unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.starts_with("store conformance: sandboxes are per tenant"), "{msg}");
    }
}
