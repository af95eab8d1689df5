//! The state machine, tenancy, quotas, expiry, deaths and recovery, over the fake driver and a real
//! SQLite store: no root, no namespaces, the real supervisor protocol.

use std::sync::Arc;
use std::time::Duration;

use sandlot_api::{CreateSandbox, ExecRequest, ExitStatus, SandboxState, TimeoutAction};
use sandlot_engine::fake::{Call, FakeDriver};
use sandlot_engine::{Engine, EngineConfig, LayerSource};
use sandlot_store::prelude::*;
use sandlot_store::{now_ms, SqliteStore};

use crate::capacity::Host;
use crate::config::test_config;
use crate::{Caller, Config, Control, Kind, Started};

mod events;

struct Harness {
    control: Arc<Control>,
    driver: FakeDriver,
    alice: Caller,
    bob: Caller,
    _dir: tempfile::TempDir,
}

const HOST: Host = Host { memory_mb: 16_384, pid_max: 1 << 22, disk_mb: Some(100_000) };

fn harness_with(cfg: Config, host: Host) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("sandlot.db")).unwrap();
    store.create_key("alice", false).unwrap();
    store.create_key("bob", false).unwrap();
    let driver = FakeDriver::new();
    let engine = Engine::new(
        Arc::new(driver.clone()),
        EngineConfig { net: sandlot_engine::network::offline(), start_timeout: Duration::from_secs(5) },
        256 << 20,
    );
    let registry = sandlot_oci::Registry::new(sandlot_oci::RegistryOptions::default()).unwrap();
    let images = crate::images::Images::new(registry, dir.path().join("blobs"), 1 << 30, Default::default()).unwrap();
    let control = Control::new(engine, Box::new(store), cfg, host, Some(images));
    let caller = |t: &str| Caller { tenant: t.into(), admin: false };
    Harness { control, driver, alice: caller("alice"), bob: caller("bob"), _dir: dir }
}

fn harness() -> Harness {
    harness_with(test_config(), HOST)
}

impl Harness {
    async fn create(&self, req: CreateSandbox) -> String {
        self.control.create(&self.alice, req).await.unwrap().info.id
    }

    async fn sandbox(&self) -> String {
        self.create(CreateSandbox::default()).await
    }

    async fn persistent(&self) -> String {
        self.create(CreateSandbox { persistent: Some(true), ..CreateSandbox::default() }).await
    }

    fn state(&self, id: &str) -> SandboxState {
        self.control.get(&self.alice, id).unwrap().state
    }

    fn launches(&self, id: &str) -> Vec<LayerSource> {
        self.driver
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Launch(i, source) if i == id => Some(source),
                _ => None,
            })
            .collect()
    }

    fn audit_actions(&self, id: &str) -> Vec<String> {
        let log = self.control.audit_log(&self.alice, Some(id), Some(1000)).unwrap();
        let mut actions: Vec<String> = log.entries.into_iter().map(|e| e.action).collect();
        actions.reverse();
        actions
    }

    /// Waits until sandbox `id` is in `state` (a service acts on it), at most two seconds.
    async fn until(&self, id: &str, state: SandboxState) {
        for _ in 0..200 {
            if self.state(id) == state {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("sandbox {id} is {:?}, not {state:?}", self.state(id));
    }
}

fn run(argv: &[&str]) -> ExecRequest {
    ExecRequest { argv: Some(argv.iter().map(|s| s.to_string()).collect()), ..ExecRequest::default() }
}

// ---- create and read ----

#[tokio::test]
async fn create_boots_a_fresh_layer_and_records_the_sandbox_running() {
    let h = harness();
    let id = h.sandbox().await;
    assert_eq!(h.state(&id), SandboxState::Running);
    assert_eq!(h.launches(&id), [LayerSource::Fresh]);
    assert_eq!(h.audit_actions(&id), ["sandbox.create"]);
    assert_eq!(h.control.list(&h.alice).unwrap().sandboxes.len(), 1);
}

#[tokio::test]
async fn another_tenants_sandbox_is_not_found_for_every_operation() {
    let h = harness();
    let id = h.sandbox().await;
    let c = &h.control;
    assert_eq!(c.get(&h.bob, &id).unwrap_err().kind, Kind::NotFound);
    assert_eq!(c.stop_sandbox(&h.bob, &id).await.unwrap_err().kind, Kind::NotFound);
    assert_eq!(c.pause_sandbox(&h.bob, &id).await.unwrap_err().kind, Kind::NotFound);
    assert_eq!(c.delete(&h.bob, &id).await.unwrap_err().kind, Kind::NotFound);
    assert_eq!(c.exec(&h.bob, &id, run(&["true"]), false).await.err().unwrap().kind, Kind::NotFound);
    assert_eq!(c.snapshot(&h.bob, &id, None).await.unwrap_err().kind, Kind::NotFound);
    assert_eq!(c.set_timeout(&h.bob, &id, 60).unwrap_err().kind, Kind::NotFound);
    assert_eq!(c.resume_sandbox(&h.bob, &id).await.unwrap_err().kind, Kind::NotFound);
    assert_eq!(c.fork(&h.bob, &id, 1).await.unwrap_err().kind, Kind::NotFound);
    let spec = sandlot_api::NetworkSpec::default();
    assert_eq!(c.set_network(&h.bob, &id, spec).await.unwrap_err().kind, Kind::NotFound);
    assert_eq!(c.expose(&h.bob, &id, 8000).await.unwrap_err().kind, Kind::NotFound);
    assert_eq!(c.ports(&h.bob, &id).await.err().unwrap().kind, Kind::NotFound);
    assert_eq!(c.processes(&h.bob, &id, false).await.unwrap_err().kind, Kind::NotFound);
    assert_eq!(c.process(&h.bob, &id, 1).await.err().unwrap().kind, Kind::NotFound);
    assert_eq!(c.kill(&h.bob, &id, 1, None).await.unwrap_err().kind, Kind::NotFound);
    let user = sandlot_api::User::default();
    assert_eq!(c.stat(&h.bob, &id, "/etc", user).await.unwrap_err().kind, Kind::NotFound);
    assert_eq!(c.read_file(&h.bob, &id, "/etc/hostname", user).await.err().unwrap().kind, Kind::NotFound);
    assert!(c.list(&h.bob).unwrap().sandboxes.is_empty());
    assert_eq!(h.state(&id), SandboxState::Running, "bob's calls changed nothing");
    assert_eq!(c.entries.len(), 1, "bob's calls made no per-sandbox state");
    // Ids that exist nowhere make none either.
    let _ = c.stop_sandbox(&h.bob, "sb_doesnotexist").await;
    let _ = c.exec(&h.bob, "sb_doesnotexist", run(&["true"]), false).await;
    assert_eq!(c.entries.len(), 1);
}

#[tokio::test]
async fn limits_out_of_range_are_refused_before_anything_boots() {
    let h = harness();
    let bad = [
        CreateSandbox { memory_mb: Some(8), ..Default::default() },
        CreateSandbox { cpu: Some(0.0), ..Default::default() },
        CreateSandbox { pids: Some(2), ..Default::default() },
        CreateSandbox { timeout_s: Some(86_401), ..Default::default() },
        CreateSandbox { memory_mb: Some(16_385), ..Default::default() },
        CreateSandbox { image: Some("nope".into()), ..Default::default() },
        CreateSandbox { get_or_create: true, ..Default::default() },
        CreateSandbox { name: Some("no spaces".into()), ..Default::default() },
        // Few variables, but 4 MiB of them.
        CreateSandbox { env: [("BIG".to_string(), "x".repeat(4 << 20))].into(), ..Default::default() },
    ];
    for req in bad {
        let e = h.control.create(&h.alice, req.clone()).await.unwrap_err();
        assert_eq!(e.kind, Kind::Invalid, "{req:?}: {}", e.message);
    }
    assert!(h.driver.calls().is_empty(), "nothing was launched");
}

#[tokio::test]
async fn a_failed_launch_ends_failed_with_its_reason_and_frees_its_place() {
    let cfg = Config { max_sandboxes: 1, ..test_config() };
    let h = harness_with(cfg, HOST);
    h.driver.fail_next_launch("clone: EPERM");
    let e = h.control.create(&h.alice, CreateSandbox::default()).await.unwrap_err();
    assert!(e.message.contains("clone: EPERM"), "{}", e.message);
    let failed = &h.control.store.list_sandboxes("alice").unwrap()[0].info;
    assert_eq!(failed.state, SandboxState::Failed);
    assert!(failed.reason.as_deref().unwrap().contains("clone: EPERM"));
    // Its place in the ledger was given back; its entry stays until it is deleted.
    h.sandbox().await;
    assert_eq!(h.control.entries.len(), 2);
    h.control.delete(&h.alice, &failed.id).await.unwrap();
    assert_eq!(h.control.entries.len(), 1);
}

#[tokio::test]
async fn the_sandbox_count_limit_is_retryable() {
    let h = harness_with(Config { max_sandboxes: 1, ..test_config() }, HOST);
    let first = h.sandbox().await;
    let e = h.control.create(&h.alice, CreateSandbox::default()).await.unwrap_err();
    assert_eq!(e.kind, Kind::LimitReached);
    assert!(e.retryable() && e.message.contains("at most 1 sandboxes"), "{}", e.message);
    h.control.delete(&h.alice, &first).await.unwrap();
    h.sandbox().await;
}

#[tokio::test]
async fn the_hosts_memory_times_overcommit_bounds_running_sandboxes() {
    let host = Host { memory_mb: 1000, ..HOST };
    let h = harness_with(test_config(), host);
    let req = CreateSandbox { memory_mb: Some(800), ..Default::default() };
    h.create(req.clone()).await;
    let e = h.control.create(&h.alice, req.clone()).await.unwrap_err();
    assert_eq!(e.kind, Kind::ServerFull);
    assert!(e.message.contains("1600 MiB of memory together"), "{}", e.message);
}

#[tokio::test]
async fn a_stopped_sandbox_holds_no_capacity() {
    let h = harness_with(test_config(), Host { memory_mb: 1000, ..HOST });
    let req = CreateSandbox { memory_mb: Some(800), persistent: Some(true), ..Default::default() };
    let a = h.create(req.clone()).await;
    h.control.stop_sandbox(&h.alice, &a).await.unwrap();
    let b = h.create(req.clone()).await;
    // Resuming the first would now overrun: refused, and it stays stopped with its layer.
    let e = h.control.resume_sandbox(&h.alice, &a).await.unwrap_err();
    assert_eq!(e.kind, Kind::ServerFull);
    assert_eq!(h.state(&a), SandboxState::Stopped);
    assert!(h.driver.layers().contains(&a));
    h.control.delete(&h.alice, &b).await.unwrap();
    h.control.resume_sandbox(&h.alice, &a).await.unwrap();
}

// ---- names and get_or_create ----

#[tokio::test]
async fn a_name_is_taken_until_get_or_create_reuses_it() {
    let h = harness();
    let named = CreateSandbox { name: Some("agent-1".into()), ..Default::default() };
    let id = h.create(named.clone()).await;
    let e = h.control.create(&h.alice, named.clone()).await.unwrap_err();
    assert_eq!(e.kind, Kind::AlreadyExists);
    let again = h.control.create(&h.alice, CreateSandbox { get_or_create: true, ..named.clone() }).await.unwrap();
    assert_eq!((again.info.id.as_str(), again.existed), (id.as_str(), true));
    // Another tenant's namespace is its own.
    let theirs = h.control.create(&h.bob, named).await.unwrap();
    assert_ne!(theirs.info.id, id);
}

#[tokio::test]
async fn get_or_create_resumes_a_stopped_sandbox() {
    let h = harness();
    let req = CreateSandbox { name: Some("keep".into()), persistent: Some(true), ..Default::default() };
    let id = h.create(req.clone()).await;
    h.control.stop_sandbox(&h.alice, &id).await.unwrap();
    let got = h.control.create(&h.alice, CreateSandbox { get_or_create: true, ..req }).await.unwrap();
    assert_eq!((got.info.state, got.existed), (SandboxState::Running, true));
    assert_eq!(h.launches(&id), [LayerSource::Fresh, LayerSource::Existing]);
}

#[tokio::test]
async fn concurrent_get_or_create_of_one_name_makes_one_sandbox() {
    let h = harness();
    let req = CreateSandbox { name: Some("once".into()), get_or_create: true, ..Default::default() };
    let calls = (0..8).map(|_| {
        let (c, who, req) = (Arc::clone(&h.control), h.alice.clone(), req.clone());
        tokio::spawn(async move { c.create(&who, req).await.unwrap().info.id })
    });
    let ids: Vec<String> = futures_join(calls).await;
    assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    let launches = h.driver.calls().iter().filter(|c| matches!(c, Call::Launch(..))).count();
    assert_eq!(launches, 1);
}

async fn futures_join<T: Send + 'static>(tasks: impl Iterator<Item = tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for t in tasks.collect::<Vec<_>>() {
        out.push(t.await.unwrap());
    }
    out
}

// ---- transitions ----

#[tokio::test]
async fn stop_keeps_the_layer_and_resume_boots_it_again() {
    let h = harness();
    let id = h.persistent().await;
    let info = h.control.stop_sandbox(&h.alice, &id).await.unwrap();
    assert_eq!(info.state, SandboxState::Stopped);
    let calls = h.driver.calls();
    assert!(calls.contains(&Call::Teardown(id.clone(), false)), "{calls:?}");
    assert!(calls.contains(&Call::Sync(id.clone())), "the layer is synced before stop returns");
    assert!(h.driver.layers().contains(&id));
    h.control.resume_sandbox(&h.alice, &id).await.unwrap();
    assert_eq!(h.launches(&id), [LayerSource::Fresh, LayerSource::Existing]);
    assert_eq!(h.audit_actions(&id), ["sandbox.create", "sandbox.stop", "sandbox.resume"]);
}

#[tokio::test]
async fn a_transition_to_where_the_sandbox_is_changes_nothing() {
    let h = harness();
    let id = h.persistent().await;
    h.control.resume_sandbox(&h.alice, &id).await.unwrap();
    h.control.stop_sandbox(&h.alice, &id).await.unwrap();
    h.control.stop_sandbox(&h.alice, &id).await.unwrap();
    assert_eq!(h.launches(&id).len(), 1, "resume of a running sandbox launched nothing");
    assert_eq!(h.audit_actions(&id), ["sandbox.create", "sandbox.stop"]);
}

#[tokio::test]
async fn pause_freezes_and_resume_thaws_without_a_new_launch() {
    let h = harness();
    let id = h.sandbox().await;
    assert_eq!(h.control.pause_sandbox(&h.alice, &id).await.unwrap().state, SandboxState::Paused);
    h.control.pause_sandbox(&h.alice, &id).await.unwrap();
    assert_eq!(h.control.resume_sandbox(&h.alice, &id).await.unwrap().state, SandboxState::Running);
    let freezes: Vec<Call> = h.driver.calls().into_iter().filter(|c| matches!(c, Call::Freeze(..))).collect();
    assert_eq!(freezes, [Call::Freeze(id.clone(), true), Call::Freeze(id.clone(), false)]);
    assert_eq!(h.launches(&id).len(), 1);
}

#[tokio::test]
async fn pause_unless_paused_pauses_or_stops_once_even_when_asked_twice_at_once() {
    let h = harness();
    let id = h.persistent().await;
    let (c, a) = (&h.control, &h.alice);
    let (first, second) = tokio::join!(c.pause_unless_paused(a, &id, true), c.pause_unless_paused(a, &id, true));
    let outcomes = [first.unwrap().map(|i| i.state), second.unwrap().map(|i| i.state)];
    assert!(outcomes.contains(&Some(SandboxState::Paused)) && outcomes.contains(&None), "{outcomes:?}");
    // A paused sandbox is paused already for a pause without memory too: nothing changes.
    assert_eq!(c.pause_unless_paused(a, &id, false).await.unwrap(), None);
    assert_eq!(h.state(&id), SandboxState::Paused);
    c.resume_sandbox(a, &id).await.unwrap();
    assert_eq!(c.pause_unless_paused(a, &id, false).await.unwrap().map(|i| i.state), Some(SandboxState::Stopped));
    assert_eq!(c.pause_unless_paused(a, &id, true).await.unwrap(), None);
    let freezes = h.driver.calls().into_iter().filter(|c| matches!(c, Call::Freeze(_, true))).count();
    assert_eq!(freezes, 1);
    assert_eq!(c.pause_unless_paused(&h.bob, &id, true).await.unwrap_err().kind, Kind::NotFound);
}

#[tokio::test]
async fn connect_resumes_once_and_sets_or_only_extends_the_lifetime() {
    let h = harness();
    let id = h.persistent().await;
    let (c, a) = (&h.control, &h.alice);
    // A running sandbox: left as it is, and a shorter timeout does not cut its lifetime.
    let before = h.control.get(a, &id).unwrap().expires_at_ms;
    let (info, resumed) = c.connect(a, &id, false, Some(1)).await.unwrap();
    assert!(!resumed);
    assert_eq!(info.expires_at_ms, before);
    let (info, _) = c.connect(a, &id, false, Some(7200)).await.unwrap();
    assert!(info.expires_at_ms >= now_ms() + 7_190_000, "a longer timeout extends it");
    // Paused: two connects at once thaw it once; a resumed sandbox's timeout counts from now.
    c.pause_sandbox(a, &id).await.unwrap();
    let (first, second) = tokio::join!(c.connect(a, &id, false, Some(30)), c.connect(a, &id, false, Some(30)));
    let resumed = [first.unwrap(), second.unwrap()];
    assert_eq!(resumed.iter().filter(|(_, r)| *r).count(), 1, "{resumed:?}");
    assert!(resumed.iter().all(|(i, _)| i.state == SandboxState::Running));
    let thaws = h.driver.calls().into_iter().filter(|c| matches!(c, Call::Freeze(_, false))).count();
    assert_eq!(thaws, 1);
    let expires = h.control.get(a, &id).unwrap().expires_at_ms;
    assert!(expires <= now_ms() + 30_000, "the resumed sandbox's lifetime is the connect's 30 s");
    // Paused, cold: stopped and booted again from its files.
    c.pause_sandbox(a, &id).await.unwrap();
    let (info, resumed) = c.connect(a, &id, true, None).await.unwrap();
    assert!(resumed && info.state == SandboxState::Running);
    assert_eq!(h.launches(&id), [LayerSource::Fresh, LayerSource::Existing]);
    assert_eq!(c.connect(a, &id, false, Some(u64::MAX)).await.unwrap_err().kind, Kind::Invalid);
}

#[tokio::test]
async fn extend_timeout_never_shortens_a_lifetime() {
    let h = harness();
    let id = h.sandbox().await;
    let (c, a) = (&h.control, &h.alice);
    c.set_timeout(a, &id, 600).unwrap();
    let set = h.control.get(a, &id).unwrap().expires_at_ms;
    assert_eq!(c.extend_timeout(a, &id, 10).await.unwrap().expires_at_ms, set);
    assert_eq!(h.control.get(a, &id).unwrap().expires_at_ms, set);
    let longer = c.extend_timeout(a, &id, 1200).await.unwrap().expires_at_ms;
    assert!(longer > set && longer >= now_ms() + 1_190_000);
    assert_eq!(h.control.get(a, &id).unwrap().expires_at_ms, longer);
    assert_eq!(c.extend_timeout(&h.bob, &id, 1200).await.unwrap_err().kind, Kind::NotFound);
}

#[tokio::test]
async fn illegal_transitions_are_conflicts_that_name_the_state() {
    let h = harness();
    let id = h.persistent().await;
    h.control.stop_sandbox(&h.alice, &id).await.unwrap();
    let e = h.control.pause_sandbox(&h.alice, &id).await.unwrap_err();
    assert_eq!((e.kind, e.message.clone()), (Kind::Conflict, format!("cannot pause sandbox {id}: it is stopped")));
    h.driver.fail_next_launch("no");
    let failed = h.control.create(&h.alice, CreateSandbox::default()).await.unwrap_err();
    assert!(failed.message.contains("no"));
    let failed_id = h
        .control
        .store
        .list_sandboxes("alice")
        .unwrap()
        .into_iter()
        .find(|r| r.info.state == SandboxState::Failed)
        .unwrap()
        .info
        .id;
    for e in [
        h.control.resume_sandbox(&h.alice, &failed_id).await.unwrap_err(),
        h.control.stop_sandbox(&h.alice, &failed_id).await.unwrap_err(),
        h.control.snapshot(&h.alice, &failed_id, None).await.unwrap_err(),
    ] {
        assert_eq!(e.kind, Kind::Conflict, "{}", e.message);
        assert!(e.message.ends_with("it is failed"), "{}", e.message);
    }
}

#[tokio::test]
async fn delete_removes_the_layer_the_entry_and_keeps_a_readable_record() {
    let h = harness();
    let id = h.sandbox().await;
    h.control.expose(&h.alice, &id, 8000).await.unwrap();
    h.control.delete(&h.alice, &id).await.unwrap();
    assert!(h.driver.calls().contains(&Call::Teardown(id.clone(), true)));
    assert!(!h.driver.layers().contains(&id));
    assert_eq!(h.control.entries.len(), 0, "a deleted sandbox's lock, activity and tokens are gone");
    assert_eq!(h.state(&id), SandboxState::Deleted);
    assert_eq!(h.control.delete(&h.alice, &id).await.unwrap_err().kind, Kind::NotFound);
    assert!(h.control.list(&h.alice).unwrap().sandboxes.is_empty());
}

#[tokio::test]
async fn delete_of_a_sandbox_being_created_is_refused() {
    let h = harness();
    let rec = crate::plan::new_record("alice", "host", test_limits(), &Default::default());
    h.control.store.insert_sandbox(&rec).unwrap();
    let e = h.control.delete(&h.alice, &rec.info.id).await.unwrap_err();
    assert_eq!(e.kind, Kind::Conflict);
    assert!(e.message.contains("still being created"), "{}", e.message);
}

fn test_limits() -> sandlot_api::Limits {
    sandlot_api::Limits { cpu: 1.0, memory_mb: 512, pids: 256, disk_mb: Some(1024), timeout_s: 300 }
}

// ---- ensure_running, auto-resume ----

#[tokio::test]
async fn a_persistent_sandbox_auto_resumes_once_for_concurrent_callers() {
    let h = harness();
    let id = h.persistent().await;
    h.control.stop_sandbox(&h.alice, &id).await.unwrap();
    let calls = (0..8).map(|_| {
        let (c, who, id) = (Arc::clone(&h.control), h.alice.clone(), id.clone());
        tokio::spawn(async move { c.ensure_running(&who, &id).await.map(|_| ()).unwrap() })
    });
    futures_join(calls).await;
    assert_eq!(h.launches(&id), [LayerSource::Fresh, LayerSource::Existing], "resumed exactly once");
    assert_eq!(h.state(&id), SandboxState::Running);
}

#[tokio::test]
async fn a_stopped_sandbox_without_auto_resume_tells_how_to_resume_it() {
    let h = harness();
    let id = h.create(CreateSandbox { persistent: Some(true), auto_resume: Some(false), ..Default::default() }).await;
    h.control.stop_sandbox(&h.alice, &id).await.unwrap();
    let e = h.control.ensure_running(&h.alice, &id).await.err().unwrap();
    assert_eq!(e.kind, Kind::Conflict);
    assert!(e.message.contains("is stopped") && e.message.contains("POST …/resume"), "{}", e.message);
}

// ---- exec ----

#[tokio::test]
async fn exec_runs_through_the_supervisor_protocol_and_is_audited() {
    let h = harness();
    let id = h.sandbox().await;
    let Started::Finished(r) = h.control.exec(&h.alice, &id, run(&["echo", "hello", "world"]), false).await.unwrap()
    else {
        panic!("a foreground exec is waited for");
    };
    assert_eq!((r.exit_code, r.stdout.as_str(), r.status), (0, "hello world\n", ExitStatus::Exited));
    let Started::Finished(r) = h.control.exec(&h.alice, &id, run(&["exit", "3"]), false).await.unwrap() else {
        panic!()
    };
    assert_eq!(r.exit_code, 3);
    assert_eq!(h.audit_actions(&id), ["sandbox.create", "exec", "exec"]);
}

#[tokio::test]
async fn exec_requests_are_validated_before_anything_runs() {
    let h = harness();
    let id = h.sandbox().await;
    let bad = [
        ExecRequest { shell: Some("true".into()), ..run(&["true"]) },
        ExecRequest::default(),
        ExecRequest { cwd: Some("relative".into()), ..run(&["true"]) },
        ExecRequest { timeout_s: Some(-1.0), ..run(&["true"]) },
        ExecRequest { max_output_bytes: Some(10), ..run(&["true"]) },
        run(&["true", "a\0b"]),
        ExecRequest { tag: Some("t".repeat(257)), ..run(&["true"]) },
        ExecRequest { tag: Some("a\0b".into()), ..run(&["true"]) },
        ExecRequest { pty: Some(sandlot_api::PtySize { rows: 0, cols: 80 }), ..run(&["true"]) },
        ExecRequest { pty: Some(sandlot_api::PtySize { rows: 24, cols: 1001 }), ..run(&["true"]) },
    ];
    for req in bad {
        let e = h.control.exec(&h.alice, &id, req.clone(), false).await.err().unwrap();
        assert_eq!(e.kind, Kind::Invalid, "{req:?}");
    }
    assert_eq!(h.audit_actions(&id), ["sandbox.create"]);
}

/// `process_by_tag` finds the newest running process with the tag, for its tenant only; an ended one
/// is not found. A resize of a process without a pty is refused, and a watch refused by the
/// supervisor is answered with its reason and audited.
#[tokio::test]
async fn a_tag_finds_the_newest_running_process_and_a_resize_needs_a_pty() {
    let h = harness();
    let id = h.sandbox().await;
    let spawn = |tag: &str| ExecRequest { tag: Some(tag.into()), background: true, ..run(&["sleep"]) };
    let pid = |s: Started| match s {
        Started::Background { pid, .. } => pid,
        _ => panic!("a background exec answers with its pid"),
    };
    let older = pid(h.control.exec(&h.alice, &id, spawn("web"), false).await.unwrap());
    let newer = pid(h.control.exec(&h.alice, &id, spawn("web"), false).await.unwrap());
    let other = pid(h.control.exec(&h.alice, &id, spawn("db"), false).await.unwrap());
    assert_eq!(h.control.process_by_tag(&h.alice, &id, "web").await.unwrap().handle, newer);
    assert_eq!(h.control.process_by_tag(&h.alice, &id, "db").await.unwrap().handle, other);
    assert_eq!(h.control.process_by_tag(&h.bob, &id, "web").await.err().unwrap().kind, Kind::NotFound);
    h.control.kill(&h.alice, &id, newer, None).await.unwrap();
    h.control.process(&h.alice, &id, newer).await.unwrap().wait().await;
    assert_eq!(h.control.process_by_tag(&h.alice, &id, "web").await.unwrap().handle, older, "the ended one is skipped");
    assert_eq!(h.control.process_by_tag(&h.alice, &id, "none").await.err().unwrap().kind, Kind::NotFound);
    let e = h.control.resize(&h.alice, &id, older, 24, 80).await.unwrap_err();
    assert_eq!(e.kind, Kind::Invalid, "{e:?}");
    assert!(e.message.contains("only a process started with `pty`"), "{e:?}");
    let e = h.control.watch(&h.alice, &id, "/tmp", true, sandlot_api::User::User).await.err().unwrap();
    assert_eq!(e.kind, Kind::Invalid, "{e:?}");
    assert!(h.audit_actions(&id).contains(&"file.watch".to_string()), "{:?}", h.audit_actions(&id));
}

#[tokio::test]
async fn a_background_process_runs_until_killed_and_then_reports_the_signal() {
    let h = harness();
    let id = h.sandbox().await;
    let req = ExecRequest { background: true, ..run(&["sleep"]) };
    let Started::Background { pid, .. } = h.control.exec(&h.alice, &id, req, false).await.unwrap() else { panic!() };
    let list = h.control.processes(&h.alice, &id, false).await.unwrap();
    assert!(list.processes.iter().any(|p| p.pid == pid && p.running));
    h.control.kill(&h.alice, &id, pid, Some(15)).await.unwrap();
    let r = h.control.process(&h.alice, &id, pid).await.unwrap().wait().await;
    assert_eq!((r.status, r.signal), (ExitStatus::Signaled, Some(15)));
    let e = h.control.kill(&h.alice, &id, pid, None).await.unwrap_err();
    assert!(e.message.contains("already exited"), "{}", e.message);
    assert_eq!(h.control.kill(&h.alice, &id, 999, None).await.unwrap_err().kind, Kind::NotFound);
}

/// A surface holding a process for a client that never reads lets it go when the sandbox is deleted
/// (it waits on `sandbox_ended`, as the NDJSON and envd streams do): the output reservation returns
/// to the daemon-wide pool, though the holder never took an event.
#[tokio::test]
async fn a_deleted_sandbox_ends_its_process_holders_and_its_output_reservation() {
    let h = harness();
    let id = h.sandbox().await;
    let req = ExecRequest { background: true, ..run(&["sleep"]) };
    let Started::Background { pid, .. } = h.control.exec(&h.alice, &id, req, false).await.unwrap() else { panic!() };
    let proc = h.control.process(&h.alice, &id, pid).await.unwrap();
    assert!(h.control.engine.output_used() > 0, "the running process reserves its output");
    let holder = tokio::spawn(async move {
        let _follower = proc.follow();
        proc.sandbox_ended().await;
    });
    h.control.delete(&h.alice, &id).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), holder).await.expect("the holder ends with the sandbox").unwrap();
    // The engine's own references (the sandbox's read loop winding down) go shortly after the
    // delete answers: the reservation must be back within a bounded time, not at once.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while h.control.engine.output_used() != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} bytes of the deleted sandbox stay reserved",
            h.control.engine.output_used()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `running_only` lists the running processes only, and a listing over `MAX_LIST_BYTES` is refused
/// before it is copied, with what to do instead.
#[tokio::test]
async fn a_process_listing_is_filtered_before_it_is_copied_and_bounded() {
    let h = harness();
    let id = h.sandbox().await;
    let background = |argv: &[&str]| ExecRequest { background: true, ..run(argv) };
    let Started::Background { pid: done, .. } =
        h.control.exec(&h.alice, &id, background(&["true"]), false).await.unwrap()
    else {
        panic!()
    };
    h.control.process(&h.alice, &id, done).await.unwrap().wait().await;
    let big = "x".repeat(1_000_000);
    let mut sleepers = Vec::new();
    for _ in 0..17 {
        let Started::Background { pid, .. } =
            h.control.exec(&h.alice, &id, background(&["sleep", &big]), false).await.unwrap()
        else {
            panic!()
        };
        sleepers.push(pid);
    }
    let e = h.control.processes(&h.alice, &id, true).await.unwrap_err();
    assert_eq!(e.kind, Kind::TooLarge, "{e:?}");
    assert!(e.message.contains("look processes up by pid or tag"), "{}", e.message);
    for pid in sleepers.drain(..2) {
        h.control.kill(&h.alice, &id, pid, None).await.unwrap();
        h.control.process(&h.alice, &id, pid).await.unwrap().wait().await;
    }
    let running = h.control.processes(&h.alice, &id, true).await.unwrap().processes;
    assert_eq!(running.iter().map(|p| p.pid).collect::<Vec<_>>(), sleepers, "the running ones only");
    assert_eq!(h.control.processes(&h.alice, &id, false).await.unwrap_err().kind, Kind::TooLarge);
}

// ---- expiry ----

#[tokio::test]
async fn an_ephemeral_sandbox_is_deleted_when_its_lifetime_ends() {
    let h = harness();
    let id = h.create(CreateSandbox { timeout_s: Some(60), ..Default::default() }).await;
    h.control.expire_due(now_ms() + 30_000).await;
    assert_eq!(h.state(&id), SandboxState::Running, "not due yet");
    h.control.expire_due(now_ms() + 61_000).await;
    assert_eq!(h.state(&id), SandboxState::Deleted);
    let info = h.control.get(&h.alice, &id).unwrap();
    assert_eq!(info.reason.as_deref(), Some("lifetime of 60 s ended"));
    assert_eq!(h.audit_actions(&id), ["sandbox.create", "sandbox.expire", "sandbox.timeout_fired"]);
}

#[tokio::test]
async fn on_timeout_stop_keeps_the_files_of_an_expired_sandbox() {
    let h = harness();
    let req = CreateSandbox {
        timeout_s: Some(60),
        persistent: Some(true),
        on_timeout: Some(TimeoutAction::Stop),
        ..Default::default()
    };
    let id = h.create(req).await;
    h.control.expire_due(now_ms() + 61_000).await;
    assert_eq!(h.state(&id), SandboxState::Stopped);
    assert!(h.driver.layers().contains(&id));
    // A stopped persistent sandbox then waits for its owner: later passes leave it alone.
    h.control.expire_due(now_ms() + 3_600_000).await;
    assert_eq!(h.state(&id), SandboxState::Stopped);
}

#[tokio::test]
async fn on_timeout_pause_stops_the_sandbox_after_stop_after_s() {
    let h = harness();
    let req =
        CreateSandbox { timeout_s: Some(60), persistent: Some(true), stop_after_s: Some(120), ..Default::default() };
    let id = h.create(req).await;
    let t = now_ms() + 61_000;
    h.control.expire_due(t).await;
    assert_eq!(h.state(&id), SandboxState::Paused, "a persistent sandbox pauses by default");
    // `stop_after_s` counts from the pause (the store's clock, not the one this test passes).
    h.control.expire_due(t + 30_000).await;
    assert_eq!(h.state(&id), SandboxState::Paused);
    h.control.expire_due(now_ms() + 125_000).await;
    assert_eq!(h.state(&id), SandboxState::Stopped);
    assert!(h.control.get(&h.alice, &id).unwrap().reason.unwrap().contains("paused by expiry for 120 s"));
}

#[tokio::test]
async fn an_idle_sandbox_expires_and_api_activity_keeps_it_alive() {
    let h = harness();
    let id = h.create(CreateSandbox { idle_timeout_s: Some(10), ..Default::default() }).await;
    let t = now_ms();
    h.control.expire_due(t + 5_000).await;
    assert_eq!(h.state(&id), SandboxState::Running);
    // Activity at t + 8 s (as an API call then would record it) moves the deadline to t + 18 s.
    h.control.entries.touch(&id, t + 8_000);
    h.control.expire_due(t + 11_000).await;
    assert_eq!(h.state(&id), SandboxState::Running, "activity keeps it alive");
    h.control.expire_due(t + 19_000).await;
    assert_eq!(h.state(&id), SandboxState::Deleted);
    assert_eq!(h.control.get(&h.alice, &id).unwrap().reason.as_deref(), Some("idle for 10 s"));
}

#[tokio::test]
async fn a_lifetime_is_wall_clock_across_pause_and_resume() {
    let h = harness();
    let id = h.create(CreateSandbox { timeout_s: Some(60), persistent: Some(true), ..Default::default() }).await;
    let before = h.control.get(&h.alice, &id).unwrap().expires_at_ms;
    h.control.pause_sandbox(&h.alice, &id).await.unwrap();
    h.control.resume_sandbox(&h.alice, &id).await.unwrap();
    assert_eq!(h.control.get(&h.alice, &id).unwrap().expires_at_ms, before, "pause/resume cannot extend it");
    let e = h.control.set_timeout(&h.alice, &id, 0).unwrap_err();
    assert_eq!(e.kind, Kind::Invalid);
    let later = h.control.set_timeout(&h.alice, &id, 3_600).unwrap().expires_at_ms;
    assert!(later > before + 3_000_000);
}

// ---- deaths and recovery ----

#[tokio::test]
async fn a_persistent_sandbox_whose_supervisor_dies_is_stopped_with_its_files() {
    let h = harness();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let _services = h.control.start_services(rx);
    let id = h.persistent().await;
    assert!(h.driver.crash(&id));
    h.until(&id, SandboxState::Stopped).await;
    assert!(h.driver.layers().contains(&id), "a death never deletes a persistent sandbox's files");
    assert!(h.control.get(&h.alice, &id).unwrap().reason.unwrap().contains("files kept"));
    // Its owner resumes it on the same layer.
    h.control.resume_sandbox(&h.alice, &id).await.unwrap();
    assert_eq!(h.launches(&id), [LayerSource::Fresh, LayerSource::Existing]);
}

#[tokio::test]
async fn an_ephemeral_sandbox_whose_supervisor_dies_fails_and_is_freed() {
    let h = harness_with(Config { max_sandboxes: 1, ..test_config() }, HOST);
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let _services = h.control.start_services(rx);
    let id = h.sandbox().await;
    assert!(h.driver.crash(&id));
    h.until(&id, SandboxState::Failed).await;
    let reason = h.control.get(&h.alice, &id).unwrap().reason.unwrap();
    assert!(reason.starts_with("supervisor ended"), "{reason}");
    assert!(!h.driver.layers().contains(&id));
    h.sandbox().await; // its place was given back
}

#[tokio::test]
async fn services_end_on_shutdown_and_deaths_are_handled_until_they_finish() {
    let h = harness();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let services = h.control.start_services(rx);
    assert_eq!(
        services.len(),
        8,
        "expiry, host networks, retention, events, webhooks, metrics sampler, network audit, deaths"
    );
    let id = h.persistent().await;
    tx.send(true).unwrap();
    // Sandboxes stop during shutdown: a supervisor that dies then still has its death handled.
    assert!(h.driver.crash(&id));
    h.until(&id, SandboxState::Stopped).await;
    assert!(h.control.get(&h.alice, &id).unwrap().reason.unwrap().contains("files kept"));
    tokio::time::timeout(Duration::from_secs(2), services.finish()).await.expect("a service ignored the signals");
}

#[tokio::test]
async fn recovery_after_a_crash_keeps_persistent_files_and_sweeps_the_rest() {
    let h = harness();
    let store = &h.control.store;
    let mut records = Vec::new();
    for (state, persistent) in
        [(SandboxState::Running, true), (SandboxState::Paused, false), (SandboxState::Creating, false)]
    {
        let mut rec = crate::plan::new_record("alice", "host", test_limits(), &Default::default());
        rec.info.persistent = persistent;
        store.insert_sandbox(&rec).unwrap();
        store.set_state(&rec.info.id, state, None).unwrap();
        h.driver.leave_layer(&rec.info.id);
        records.push(rec.info.id);
    }
    h.driver.leave_layer("sb_nobodyknows");
    let done = h.control.recover().await.unwrap();
    let states: Vec<SandboxState> = records.iter().map(|id| h.state(id)).collect();
    assert_eq!(states, [SandboxState::Stopped, SandboxState::Deleted, SandboxState::Failed]);
    assert_eq!(done.changed.len(), 3);
    let layers = h.driver.layers();
    assert!(layers.contains(&records[0]), "the persistent sandbox keeps its layer");
    assert!(!layers.contains(&records[1]) && !layers.contains("sb_nobodyknows"));
    assert!(done.swept.contains(&"sb_nobodyknows".to_string()));
}

#[tokio::test]
async fn shutdown_stops_persistent_sandboxes_and_deletes_ephemeral_ones() {
    let h = harness();
    let keep = h.persistent().await;
    let gone = h.sandbox().await;
    h.control.shutdown().await;
    assert_eq!(h.state(&keep), SandboxState::Stopped);
    assert_eq!(h.state(&gone), SandboxState::Deleted);
    assert!(h.driver.layers().contains(&keep) && !h.driver.layers().contains(&gone));
}

// ---- snapshots and forks ----

#[tokio::test]
async fn a_sandbox_made_from_a_snapshot_copies_its_layer_with_the_drivers_owner() {
    let h = harness();
    let id = h.sandbox().await;
    let snap = h.control.snapshot(&h.alice, &id, Some("base".into())).await.unwrap();
    assert_eq!(snap.bytes, 1 << 20);
    let copy = h.create(CreateSandbox { snapshot: Some("base".into()), ..Default::default() }).await;
    let slot = h.control.store.get_sandbox("alice", &id).unwrap().unwrap().slot;
    assert_eq!(h.launches(&copy), [LayerSource::Snapshot { id: snap.id.clone(), owner: slot }]);
    assert_eq!(h.control.get(&h.alice, &copy).unwrap().snapshot, Some(snap.id.clone()));
    // Another tenant cannot use it.
    let e = h.control.create(&h.bob, CreateSandbox { snapshot: Some(snap.id), ..Default::default() }).await;
    assert_eq!(e.unwrap_err().kind, Kind::NotFound);
}

#[tokio::test]
async fn snapshots_are_counted_per_tenant() {
    let h = harness_with(Config { max_snapshots_per_tenant: 2, ..test_config() }, HOST);
    let id = h.sandbox().await;
    h.control.snapshot(&h.alice, &id, None).await.unwrap();
    h.control.snapshot(&h.alice, &id, None).await.unwrap();
    let e = h.control.snapshot(&h.alice, &id, None).await.unwrap_err();
    assert_eq!(e.kind, Kind::LimitReached);
    assert!(e.message.contains("keeps 2 snapshots"), "{}", e.message);
    assert_eq!(h.driver.snapshots().len(), 2, "the refused one was never taken");
}

#[tokio::test]
async fn a_snapshot_over_the_byte_quota_is_deleted_and_refused() {
    let h = harness_with(Config { snapshot_quota_bytes: 3 << 19, ..test_config() }, HOST);
    let id = h.sandbox().await;
    h.control.snapshot(&h.alice, &id, None).await.unwrap();
    let e = h.control.snapshot(&h.alice, &id, None).await.unwrap_err();
    assert_eq!(e.kind, Kind::LimitReached);
    assert!(e.message.contains("--snapshot-quota-mb"), "{}", e.message);
    assert_eq!(h.driver.snapshots().len(), 1, "the snapshot over the quota is gone from the host");
    assert_eq!(h.control.list_snapshots(&h.alice).unwrap().snapshots.len(), 1);
}

#[tokio::test]
async fn a_fork_makes_copies_and_leaves_no_snapshot_behind() {
    let h = harness_with(Config { max_snapshots_per_tenant: 0, ..test_config() }, HOST);
    let id = h.sandbox().await;
    let copies = h.control.fork(&h.alice, &id, 3).await.unwrap();
    assert_eq!(copies.len(), 3);
    for c in &copies {
        assert_eq!(c.state, SandboxState::Running);
        assert_eq!(c.metadata.get("forked_from"), Some(&id));
    }
    assert!(h.driver.snapshots().is_empty(), "the fork's own snapshot is deleted");
    assert!(h.control.list_snapshots(&h.alice).unwrap().snapshots.is_empty(), "and never charged");
    assert_eq!(h.control.fork(&h.alice, &id, 0).await.unwrap_err().kind, Kind::Invalid);
}

// ---- keys, tokens, config ----

#[tokio::test]
async fn only_the_admin_manages_keys_and_an_unknown_key_is_unauthenticated() {
    let h = harness();
    let req = sandlot_api::CreateKey { tenant: "carol".into(), ..Default::default() };
    assert_eq!(h.control.create_key(&h.alice, &req).unwrap_err().kind, Kind::Forbidden);
    let admin = Caller { tenant: "admin".into(), admin: true };
    let made = h.control.create_key(&admin, &req).unwrap();
    assert_eq!(h.control.authenticate(&made.key).unwrap(), Caller { tenant: "carol".into(), admin: false });
    h.control.revoke_key(&admin, &made.id).unwrap();
    let e = h.control.authenticate(&made.key).unwrap_err();
    assert!(e.kind == Kind::Unauthenticated && e.message.contains("revoked"), "{}", e.message);
    assert_eq!(h.control.authenticate("sk_nope").unwrap_err().kind, Kind::Unauthenticated);
}

#[tokio::test]
async fn a_preview_token_admits_its_own_port_only_and_dies_with_the_sandbox() {
    let h = harness();
    let id = h.sandbox().await;
    let p = h.control.expose(&h.alice, &id, 8000).await.unwrap();
    assert_eq!(h.control.expose(&h.alice, &id, 8000).await.unwrap().token, p.token, "one token per port");
    assert_eq!(h.control.preview_caller(&id, 8000, &p.token).unwrap(), h.alice);
    assert_eq!(h.control.preview_caller(&id, 8001, &p.token).unwrap_err().kind, Kind::NotFound);
    assert_eq!(h.control.preview_caller(&id, 8000, "pt_guess").unwrap_err().kind, Kind::NotFound);
    let e = h.control.ports(&h.alice, &id).await.unwrap().connect(8000).await.unwrap_err();
    assert_eq!(e.kind, Kind::PortUnreachable, "{}", e.message);
    h.control.delete(&h.alice, &id).await.unwrap();
    assert_eq!(h.control.preview_caller(&id, 8000, &p.token).unwrap_err().kind, Kind::NotFound);
}

#[test]
fn a_default_no_request_could_ask_for_is_refused_at_start() {
    let mut cfg = test_config();
    cfg.defaults.timeout_s = cfg.max_timeout_s + 1;
    let e = cfg.validate().unwrap_err();
    assert_eq!(e.option, "--default-timeout-s");
    let mut cfg = test_config();
    cfg.defaults.memory_mb = 4;
    assert_eq!(cfg.validate().unwrap_err().option, "--default-memory-mb");
    test_config().validate().unwrap();
}

#[tokio::test]
async fn health_lists_the_host_features_found_degraded_at_start() {
    let h = harness();
    assert_eq!(h.control.health(), sandlot_api::Health { status: "ok".into(), degraded: vec![] });
    let cfg = Config { degraded: vec!["landlock".into(), "pid-max".into()], ..test_config() };
    let h = harness_with(cfg, HOST);
    assert_eq!(h.control.health().degraded, ["landlock", "pid-max"]);
}

#[tokio::test]
async fn an_access_token_admits_its_owner_to_its_sandbox_only_and_dies_with_it() {
    let h = harness();
    let a = h.sandbox().await;
    let b = h.sandbox().await;
    let token = h.control.access_token(&h.alice, &a).unwrap();
    assert!(token.starts_with("sat_"), "{token}");
    assert_eq!(h.control.access_token(&h.alice, &a).unwrap(), token, "stable");
    assert_ne!(h.control.access_token(&h.alice, &b).unwrap(), token, "per sandbox");
    assert_eq!(h.control.access_token(&h.bob, &a).unwrap_err().kind, Kind::NotFound, "another tenant's");
    let caller = h.control.access_caller(&a, &token).unwrap();
    assert_eq!(caller, Caller { tenant: "alice".into(), admin: false });
    assert_eq!(h.control.access_caller(&b, &token).unwrap_err().kind, Kind::NotFound, "wrong sandbox");
    let mut forged = token.clone();
    forged.replace_range(forged.len() - 1.., if token.ends_with('0') { "1" } else { "0" });
    assert_eq!(h.control.access_caller(&a, &forged).unwrap_err().kind, Kind::NotFound);
    assert_eq!(h.control.access_caller(&a, "").unwrap_err().kind, Kind::NotFound);
    h.control.delete(&h.alice, &a).await.unwrap();
    assert_eq!(h.control.access_caller(&a, &token).unwrap_err().kind, Kind::NotFound, "deleted");
}

#[tokio::test]
async fn revoking_a_tenants_keys_ends_its_access_tokens_and_signed_proofs() {
    let h = harness();
    let a = h.sandbox().await;
    let (access, traffic) =
        (h.control.access_token(&h.alice, &a).unwrap(), h.control.traffic_token(&h.alice, &a).unwrap());
    assert!(h.control.access_caller(&a, &access).is_ok());
    let (_, spare) = h.control.store.create_key_expiring("alice", false, None).unwrap();
    let keys: Vec<_> = h.control.store.list_keys(Some("alice")).unwrap().into_iter().map(|k| k.id).collect();
    // With one key left, the tokens still work; with none, none does.
    for id in keys.iter().filter(|id| **id != spare) {
        h.control.store.revoke_key(id).unwrap();
    }
    assert!(h.control.access_caller(&a, &access).is_ok(), "alice still holds a key");
    h.control.store.revoke_key(&spare).unwrap();
    assert_eq!(h.control.access_caller(&a, &access).unwrap_err().kind, Kind::Unauthenticated);
    assert_eq!(h.control.traffic_caller(&a, &traffic).unwrap_err().kind, Kind::Unauthenticated);
    let proof = h.control.caller_proving_token(&a, |t| t == access).unwrap_err();
    assert_eq!(proof.kind, Kind::Unauthenticated);
    assert!(proof.message.contains("revoked"), "{}", proof.message);
    // An expired key keeps no token alive either.
    h.control.store.create_key_expiring("alice", false, Some(1)).unwrap();
    assert_eq!(h.control.access_caller(&a, &access).unwrap_err().kind, Kind::Unauthenticated);
}

#[tokio::test]
async fn user_metadata_cannot_mark_a_sandbox_as_a_build_step() {
    let h = harness();
    for key in ["build", "build_line"] {
        let req = CreateSandbox { metadata: [(key.to_string(), "x".to_string())].into(), ..CreateSandbox::default() };
        let err = h.control.create(&h.alice, req).await.unwrap_err();
        assert_eq!(err.kind, Kind::Invalid, "{key}");
        assert!(err.message.contains(key) && err.message.contains("sandlot's own"), "{}", err.message);
    }
    let req = CreateSandbox { metadata: [("builder".to_string(), "x".to_string())].into(), ..CreateSandbox::default() };
    h.control.create(&h.alice, req).await.unwrap();
}

#[tokio::test]
async fn a_traffic_token_is_its_own_kind_and_never_an_access_token() {
    let h = harness();
    let a = h.sandbox().await;
    let access = h.control.access_token(&h.alice, &a).unwrap();
    let traffic = h.control.traffic_token(&h.alice, &a).unwrap();
    assert!(traffic.starts_with("stt_"), "{traffic}");
    assert_ne!(access[4..], traffic[4..], "another label derives another token");
    assert_eq!(h.control.traffic_caller(&a, &traffic).unwrap().tenant, "alice");
    assert_eq!(h.control.access_caller(&a, &traffic).unwrap_err().kind, Kind::NotFound, "not for envd");
    assert_eq!(h.control.traffic_caller(&a, &access).unwrap_err().kind, Kind::NotFound);
    assert_eq!(h.control.traffic_token(&h.bob, &a).unwrap_err().kind, Kind::NotFound);
    h.control.delete(&h.alice, &a).await.unwrap();
    assert_eq!(h.control.traffic_caller(&a, &traffic).unwrap_err().kind, Kind::NotFound, "deleted");
}

// ---- terminals ----

fn terminal(argv: &[&str]) -> ExecRequest {
    ExecRequest { pty: Some(sandlot_api::PtySize { rows: 24, cols: 80 }), ..run(argv) }
}

/// A sandbox's terminal connections are capped; a dropped slot gives its place back; another tenant
/// finds neither the sandbox nor the terminal, and takes no place; only a pty process can be attached
/// to; a terminal is a background exec audited with `terminal: true`, an attach as `terminal.attach`.
#[tokio::test]
async fn terminal_connections_are_capped_per_sandbox_and_kept_per_tenant() {
    let h = harness();
    let id = h.sandbox().await;
    let c = &h.control;
    let (proc, first) = c.open_terminal(&h.alice, &id, terminal(&["sleep", "60"])).await.unwrap();
    assert!(proc.running() && proc.pty);
    let mut slots = vec![first];
    for _ in 1..crate::MAX_TERMINALS_PER_SANDBOX {
        slots.push(c.attach_terminal(&h.alice, &id, proc.handle).await.unwrap().1);
    }
    assert_eq!(c.attach_terminal(&h.alice, &id, proc.handle).await.err().unwrap().kind, Kind::LimitReached);
    assert_eq!(c.open_terminal(&h.alice, &id, terminal(&["true"])).await.err().unwrap().kind, Kind::LimitReached);
    slots.pop();
    slots.push(c.attach_terminal(&h.alice, &id, proc.handle).await.unwrap().1);
    assert_eq!(c.attach_terminal(&h.bob, &id, proc.handle).await.err().unwrap().kind, Kind::NotFound);
    assert_eq!(c.open_terminal(&h.bob, &id, terminal(&["true"])).await.err().unwrap().kind, Kind::NotFound);
    drop(slots);
    assert_eq!(c.entries.terminals.load(std::sync::atomic::Ordering::SeqCst), 0, "every place given back");
    assert_eq!(c.open_terminal(&h.alice, &id, run(&["true"])).await.err().unwrap().kind, Kind::Invalid, "no size");
    let Started::Background { pid: plain, .. } =
        c.exec(&h.alice, &id, ExecRequest { background: true, ..run(&["sleep", "60"]) }, false).await.unwrap()
    else {
        panic!("a background exec")
    };
    assert_eq!(c.attach_terminal(&h.alice, &id, plain).await.err().unwrap().kind, Kind::Invalid);
    let log = c.audit_log(&h.alice, Some(&id), Some(100)).unwrap().entries;
    let start = log.iter().find(|e| e.action == "exec.start" && e.detail["pid"] == proc.handle).unwrap();
    assert_eq!(start.detail["terminal"], true);
    assert!(log.iter().any(|e| e.action == "terminal.attach" && e.detail["pid"] == proc.handle));
}

/// The sampler keeps a ring per running sandbox, answers its owner only, and lets a deleted sandbox's
/// samples go at the next pass.
#[tokio::test]
async fn sampler_rings_are_per_sandbox_tenant_scoped_and_freed_on_delete() {
    let h = harness();
    let (a, b) = (h.sandbox().await, h.sandbox().await);
    let c = &h.control;
    let first = c.sample_pass(true).await;
    assert_eq!(first.sandboxes, 2);
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    c.sample_pass(false).await;
    let got = c.sandbox_samples(&h.alice, &a, None).unwrap();
    assert_eq!((got.samples.len(), got.state, got.limits.memory_bytes), (2, SandboxState::Running, 512 << 20));
    let since = got.samples[0].at_ms;
    assert_eq!(c.sandbox_samples(&h.alice, &a, Some(since)).unwrap().samples.len(), 1, "since is exclusive");
    assert_eq!(c.sandbox_samples(&h.bob, &a, None).unwrap_err().kind, Kind::NotFound);
    let report = c.metrics_report().unwrap();
    assert_eq!(report.sandboxes.len(), 2);
    assert_eq!(report.tenants["alice"].sandboxes["running"], 2);
    assert!(report.sandboxes_by_state.contains(&("running", 2)));
    c.delete(&h.alice, &b).await.unwrap();
    c.sample_pass(false).await;
    assert_eq!(crate::lock(c.samples_for_tests()).len(), 1, "the deleted sandbox's ring is gone");
    assert_eq!(c.metrics_report().unwrap().sandboxes.len(), 1);
}

/// A tenant's terminal connections are capped across its sandboxes (429 past the cap), another
/// tenant keeps its own places, and every place comes back when dropped.
#[tokio::test]
async fn terminal_connections_are_capped_per_tenant() {
    let h = harness();
    let c = &h.control;
    let per = crate::MAX_TERMINALS_PER_SANDBOX;
    let mut slots = Vec::new();
    for _ in 0..crate::MAX_TERMINALS_PER_TENANT.div_ceil(per) {
        let id = h.sandbox().await;
        let (proc, first) = c.open_terminal(&h.alice, &id, terminal(&["sleep", "60"])).await.unwrap();
        slots.push(first);
        while slots.len() % per != 0 && slots.len() < crate::MAX_TERMINALS_PER_TENANT {
            slots.push(c.attach_terminal(&h.alice, &id, proc.handle).await.unwrap().1);
        }
    }
    assert_eq!(slots.len(), crate::MAX_TERMINALS_PER_TENANT);
    let spare = h.sandbox().await;
    let e = c.open_terminal(&h.alice, &spare, terminal(&["true"])).await.err().unwrap();
    assert_eq!(e.kind, Kind::LimitReached);
    assert!(e.message.contains("tenant alice"), "{}", e.message);
    assert_eq!(c.entries.existing(&spare).unwrap().terminals.load(std::sync::atomic::Ordering::SeqCst), 0);
    let theirs = h.control.create(&h.bob, CreateSandbox::default()).await.unwrap().info.id;
    let (_, bobs) = c.open_terminal(&h.bob, &theirs, terminal(&["true"])).await.unwrap();
    slots.pop();
    slots.push(c.open_terminal(&h.alice, &spare, terminal(&["sleep", "60"])).await.unwrap().1);
    drop((slots, bobs));
    assert!(crate::lock(&c.entries.tenant_terminals).is_empty(), "no tenant keeps a count of zero");
    assert_eq!(c.entries.terminals.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// What a terminal connection types goes to the process it opened with; while the sandbox is paused
/// the write is refused (it does not auto-resume), and after the resume it goes through again.
#[tokio::test]
async fn terminal_input_follows_the_sandbox_paused_and_resumed() {
    let h = harness();
    let id = h.sandbox().await;
    let c = &h.control;
    let (proc, slot) = c.open_terminal(&h.alice, &id, terminal(&["sleep", "60"])).await.unwrap();
    assert!(Arc::ptr_eq(&proc, slot.process()));
    c.terminal_input(&h.alice, &slot, b"hi\n").await.unwrap();
    c.terminal_resize(&h.alice, &slot, 30, 100).await.unwrap();
    assert_eq!(c.terminal_resize(&h.alice, &slot, 0, 100).await.unwrap_err().kind, Kind::Invalid);
    c.pause_sandbox(&h.alice, &id).await.unwrap();
    let e = c.terminal_input(&h.alice, &slot, b"x").await.unwrap_err();
    assert!(e.kind == Kind::Conflict && e.message.contains("paused"), "{}", e.message);
    c.resume_sandbox(&h.alice, &id).await.unwrap();
    c.terminal_input(&h.alice, &slot, b"again\n").await.unwrap();
}

/// A connection's key lease holds while the key works and fails once it is revoked or has expired.
#[tokio::test]
async fn a_key_lease_ends_with_revocation_or_expiry() {
    let h = harness();
    let admin = Caller { tenant: "admin".into(), admin: true };
    let made =
        h.control.create_key(&admin, &sandlot_api::CreateKey { tenant: "carol".into(), ..Default::default() }).unwrap();
    let (caller, mut lease) = h.control.authenticate_lease(&made.key).unwrap();
    assert_eq!((caller.tenant.as_str(), lease.id()), ("carol", made.id.as_str()));
    h.control.recheck_key(&mut lease).unwrap();
    h.control.revoke_key(&admin, &made.id).unwrap();
    let e = h.control.recheck_key(&mut lease).unwrap_err();
    assert!(e.kind == Kind::Unauthenticated && e.message.contains("revoked"), "{}", e.message);
    let (key, _) = h.control.store.create_key_expiring("carol", false, Some(now_ms() + 200)).unwrap();
    let (_, mut lease) = h.control.authenticate_lease(&key).unwrap();
    h.control.recheck_key(&mut lease).unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let e = h.control.recheck_key(&mut lease).unwrap_err();
    assert!(e.kind == Kind::Unauthenticated && e.message.contains("expired"), "{}", e.message);
    assert_eq!(h.control.authenticate_lease("sl_nope").unwrap_err().kind, Kind::Unauthenticated);
}

#[tokio::test]
async fn stopped_persistent_sandboxes_keep_their_disk_charged_until_deleted_and_across_a_restart() {
    let persistent = crate::capacity::PersistentQuota { count: 10, disk_mb: 3000 };
    let h = harness_with(Config { persistent, ..test_config() }, Host { disk_mb: Some(2500), ..HOST });
    let kept = |disk| CreateSandbox { persistent: Some(true), disk_mb: Some(disk), ..CreateSandbox::default() };
    let a = h.create(kept(1000)).await;
    let b = h.create(kept(1000)).await;
    h.control.stop_sandbox(&h.alice, &a).await.unwrap();
    h.control.stop_sandbox(&h.alice, &b).await.unwrap();
    // Two stopped layers hold 2000 MiB of the volume's 2500 × 1.5: bob's 1800 MiB does not fit.
    let e = h.control.create(&h.bob, CreateSandbox { disk_mb: Some(1800), ..Default::default() }).await.unwrap_err();
    assert_eq!(e.kind, Kind::ServerFull, "{}", e.message);
    assert!(e.message.contains("kept by stopped sandboxes"), "{}", e.message);
    // Alice's own quota: 2000 of 3000 MiB kept, so 1001 more is refused, and says what to do.
    let e = h.control.create(&h.alice, kept(1001)).await.unwrap_err();
    assert_eq!(e.kind, Kind::LimitReached, "{}", e.message);
    assert!(e.message.contains("delete stopped sandboxes"), "{}", e.message);
    // After a restart the stopped sandboxes are still charged.
    let restarted = Control::new(
        Arc::clone(&h.control.engine),
        Box::new(SqliteStore::open(&h._dir.path().join("sandlot.db")).unwrap()),
        Config { persistent, ..test_config() },
        Host { disk_mb: Some(2500), ..HOST },
        None,
    );
    restarted.recover().await.unwrap();
    assert_eq!(restarted.create(&h.alice, kept(1001)).await.unwrap_err().kind, Kind::LimitReached);
    // Deleting one gives its place back.
    h.control.delete(&h.alice, &a).await.unwrap();
    h.control.create(&h.bob, CreateSandbox { disk_mb: Some(1800), ..Default::default() }).await.unwrap();
}
