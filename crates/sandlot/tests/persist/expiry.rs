//! Expiry: the idle timeout (from the last API call or process output) and the lifetime, and the three
//! things expiry may do — delete, stop, or pause and then stop after `stop_after_s`.
//!
//! Timing bounds: the idle clock starts at the server's handling of the last call, so an expiry must not
//! come before `idle` seconds after we sent it, and must come within 1.5 s after that (the server checks
//! every 250 ms).

use std::time::{Duration, Instant};

use sandlot_client::api::{CreateSandbox, SandboxState, TimeoutAction};
use sandlot_client::{Client, Sandbox};

use crate::server::Server;
use crate::support::{audit_rows, persistent, sandbox_processes, sh, wait_state};

/// Slack on the early side for polling and clock granularity.
const EARLY: Duration = Duration::from_millis(100);

/// Makes `sb` active now; returns when the call was sent and when it returned.
fn touch(sb: &Sandbox) -> (Instant, Instant) {
    let sent = Instant::now();
    sb.run(&["true"]).expect("exec");
    (sent, Instant::now())
}

/// Waits for `state` and checks it came between `min` after `sent` and `max` after `returned`.
#[track_caller]
fn expect_transition(
    client: &Client,
    id: &str,
    state: SandboxState,
    (sent, returned): (Instant, Instant),
    min: Duration,
    max: Duration,
) -> (sandlot_client::api::SandboxInfo, Instant) {
    let (info, _) = wait_state(client, id, state, max + Duration::from_secs(5));
    let at = Instant::now();
    assert!(at.duration_since(sent) + EARLY >= min, "{} after {:?}, before {min:?}", state.as_str(), at - sent);
    assert!(at.duration_since(returned) <= max, "{} only after {:?} (limit {max:?})", state.as_str(), at - returned);
    (info, at)
}

fn idle(on_timeout: TimeoutAction) -> CreateSandbox {
    CreateSandbox { idle_timeout_s: Some(2), on_timeout: Some(on_timeout), ..persistent(None) }
}

/// idle_timeout_s=2 with on_timeout stop stops the sandbox 2-3.5 s after its last call, reason idle.
#[test]
fn idle_timeout_stops_the_sandbox() {
    let server = Server::start();
    let client = server.client();
    let sb = server.create(&idle(TimeoutAction::Stop));
    sb.write_file("/home/user/note", b"kept").unwrap();
    let active = touch(&sb);
    let (info, _) = expect_transition(
        &client,
        sb.id(),
        SandboxState::Stopped,
        active,
        Duration::from_secs(2),
        Duration::from_millis(3500),
    );
    assert!(info.reason.as_deref().is_some_and(|r| r.contains("idle")), "reason: {:?}", info.reason);
    assert!(sandbox_processes(sb.id()).is_empty(), "{:?}", sandbox_processes(sb.id()));
    let fired = audit_rows(&client, sb.id(), "sandbox.timeout_fired");
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_eq!(fired[0]["action"], "stop", "{fired:?}");
    assert_eq!(sb.read_file("/home/user/note").unwrap(), b"kept");
}

/// idle_timeout_s=2 with on_timeout delete deletes the sandbox 2-3.5 s after its last call, reason idle.
#[test]
fn idle_timeout_deletes_the_sandbox() {
    let server = Server::start();
    let client = server.client();
    let sb = server.create(&idle(TimeoutAction::Delete));
    let layer = server.layer_dir(sb.id());
    assert!(layer.is_dir(), "{}", layer.display());
    let active = touch(&sb);
    let (info, _) = expect_transition(
        &client,
        sb.id(),
        SandboxState::Deleted,
        active,
        Duration::from_secs(2),
        Duration::from_millis(3500),
    );
    assert!(info.reason.as_deref().is_some_and(|r| r.contains("idle")), "reason: {:?}", info.reason);
    assert!(!layer.exists(), "layer {} survived the expiry", layer.display());
    assert!(sandbox_processes(sb.id()).is_empty(), "{:?}", sandbox_processes(sb.id()));
    assert_eq!(audit_rows(&client, sb.id(), "sandbox.expire").len(), 1);
    assert_eq!(audit_rows(&client, sb.id(), "sandbox.timeout_fired")[0]["action"], "delete");
}

/// idle_timeout_s=2 with on_timeout pause and stop_after_s=1 pauses the sandbox, then stops it ~1 s later.
#[test]
fn idle_timeout_pauses_then_stops_the_sandbox() {
    let server = Server::start();
    let client = server.client();
    let sb = server.create(&CreateSandbox { stop_after_s: Some(1), ..idle(TimeoutAction::Pause) });
    sb.write_file("/home/user/note", b"kept").unwrap();
    let active = touch(&sb);
    let (info, paused_at) = expect_transition(
        &client,
        sb.id(),
        SandboxState::Paused,
        active,
        Duration::from_secs(2),
        Duration::from_millis(3500),
    );
    assert!(info.reason.as_deref().is_some_and(|r| r.contains("idle")), "reason: {:?}", info.reason);
    let (info, stopped_at) = expect_transition(
        &client,
        sb.id(),
        SandboxState::Stopped,
        (paused_at, paused_at),
        Duration::from_millis(900),
        Duration::from_millis(2500),
    );
    eprintln!("paused→stopped after {:?}; reason {:?}", stopped_at - paused_at, info.reason);
    let fired: Vec<_> =
        audit_rows(&client, sb.id(), "sandbox.timeout_fired").iter().map(|r| r["action"].clone()).collect();
    assert_eq!(fired, ["pause", "stop"]);
    assert_eq!(sb.read_file("/home/user/note").unwrap(), b"kept");
}

/// An expiry-paused sandbox being stopped does not delay another sandbox's lifetime expiry.
#[test]
fn expiry_of_one_sandbox_does_not_delay_another() {
    let server = Server::start();
    let client = server.client();
    let pausing = server.create(&CreateSandbox {
        idle_timeout_s: Some(1),
        on_timeout: Some(TimeoutAction::Pause),
        stop_after_s: Some(1),
        ..persistent(None)
    });
    let short = server.create(&CreateSandbox { timeout_s: Some(4), ..CreateSandbox::default() });
    let created = Instant::now();
    wait_state(&client, pausing.id(), SandboxState::Paused, Duration::from_secs(4));
    let (_, _) = wait_state(&client, short.id(), SandboxState::Deleted, Duration::from_secs(8));
    assert!(created.elapsed() <= Duration::from_millis(5500), "deleted only {:?} after create", created.elapsed());
}

/// Process output counts as activity: the idle timeout runs from the last line printed.
#[test]
fn process_output_keeps_a_sandbox_awake() {
    let server = Server::start();
    let client = server.client();
    let sb = server.create(&idle(TimeoutAction::Stop));
    let t0 = Instant::now();
    sb.spawn(&sh("for i in 1 2 3 4 5 6 7 8; do echo tick $i; sleep 0.5; done")).unwrap();
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(client.get(sb.id()).unwrap().state, SandboxState::Running, "stopped while its process was printing");
    wait_state(&client, sb.id(), SandboxState::Stopped, Duration::from_secs(8));
    let at = t0.elapsed();
    // The last line is printed about 3.5 s after the spawn: the stop must come 2-3.5 s after that.
    assert!(at >= Duration::from_millis(5400) && at <= Duration::from_millis(7500), "stopped {at:?} after the spawn");
}

/// set_timeout extends the lifetime; an ephemeral sandbox whose lifetime ends is deleted (GET says why).
#[test]
fn set_timeout_extends_and_lifetime_expiry_deletes_an_ephemeral_sandbox() {
    let server = Server::start();
    let client = server.client();
    let spec = CreateSandbox { timeout_s: Some(2), ..CreateSandbox::default() };
    let short = server.create(&spec);
    let created = Instant::now();
    let extended = server.create(&spec);
    let set_at = Instant::now();
    let before_ms = extended.info().unwrap().expires_at_ms;
    let info = extended.set_timeout(6).unwrap();
    assert!(info.expires_at_ms >= before_ms + 3500, "expiry moved from {before_ms} to {}", info.expires_at_ms);
    assert_eq!(extended.info().unwrap().expires_at_ms, info.expires_at_ms);

    let (info, _) = wait_state(&client, short.id(), SandboxState::Deleted, Duration::from_secs(6));
    assert!(created.elapsed() <= Duration::from_millis(3700), "deleted only {:?} after create", created.elapsed());
    assert!(info.reason.as_deref().is_some_and(|r| r.contains("lifetime")), "reason: {:?}", info.reason);
    assert_eq!(audit_rows(&client, short.id(), "sandbox.expire").len(), 1);
    assert_eq!(audit_rows(&client, short.id(), "sandbox.timeout_fired")[0]["action"], "delete");

    // Well past its original 2 s, the extended one still runs.
    assert_eq!(client.get(extended.id()).unwrap().state, SandboxState::Running);
    assert_eq!(extended.run(&["echo", "alive"]).unwrap().stdout, "alive\n");
    wait_state(&client, extended.id(), SandboxState::Deleted, Duration::from_secs(10));
    let at = set_at.elapsed();
    assert!(
        at + EARLY >= Duration::from_secs(6) && at <= Duration::from_millis(7500),
        "deleted {at:?} after set_timeout(6)"
    );
}

/// A persistent sandbox whose lifetime ends is paused by default, its processes kept.
#[test]
fn lifetime_expiry_pauses_a_persistent_sandbox_by_default() {
    let server = Server::start();
    let client = server.client();
    let sb = server.create(&CreateSandbox { timeout_s: Some(2), ..persistent(None) });
    assert_eq!(sb.created().unwrap().on_timeout, TimeoutAction::Pause);
    let pid = sb.spawn(&sh("sleep 300")).unwrap();
    let (info, _) = wait_state(&client, sb.id(), SandboxState::Paused, Duration::from_secs(6));
    assert!(info.reason.as_deref().is_some_and(|r| r.contains("lifetime")), "reason: {:?}", info.reason);
    let info = sb.resume().unwrap();
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    assert!(info.expires_at_ms >= now_ms + 1500, "a resume gives a fresh lifetime: {info:?}");
    assert!(sb.processes().unwrap().iter().any(|p| p.pid == pid && p.running));
    sb.set_timeout(300).unwrap();
}
