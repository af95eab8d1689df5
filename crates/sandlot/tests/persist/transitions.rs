//! Transitions by API. Stop and delete work from any live state, paused included. Using a sandbox
//! wakes it: with `auto_resume` (the default for persistent sandboxes) a command or file operation
//! resumes a stopped or paused sandbox first; without it the call is a 409 that says the state.
//! Transitions the state does not allow are 409s naming the state, and change nothing.

use std::time::Duration;

use sandlot_client::api::{CreateSandbox, SandboxState};

use crate::server::Server;
use crate::support::{audit_rows, expect_error, persistent, sandbox_processes, sh, sh_ok, within, Gen};

/// How long a stop or delete may take.
const PROMPTLY: Duration = Duration::from_secs(10);

/// Stopping a paused sandbox answers promptly, ends its frozen processes and keeps its files.
#[test]
fn stop_of_a_paused_sandbox_completes() {
    let server = Server::start();
    let client = server.client();
    let sb = server.create(&persistent(None));
    sb.write_file("/home/user/note", b"kept").unwrap();
    sb.spawn(&sh("sleep 300")).unwrap();
    sb.pause().unwrap();
    let stopper = sb.clone();
    let answer = within(PROMPTLY, move || stopper.stop())
        .unwrap_or_else(|| panic!("POST /stop of a paused sandbox did not answer within {PROMPTLY:?}"));
    assert_eq!(answer.unwrap().state, SandboxState::Stopped);
    assert_eq!(client.get(sb.id()).unwrap().state, SandboxState::Stopped);
    assert!(sandbox_processes(sb.id()).is_empty(), "{:?}", sandbox_processes(sb.id()));
    assert_eq!(sb.read_file("/home/user/note").unwrap(), b"kept");
}

/// Deleting a paused sandbox answers promptly and removes its processes and layer.
#[test]
fn delete_of_a_paused_sandbox_completes() {
    let server = Server::start();
    let client = server.client();
    let sb = server.create(&persistent(None));
    sb.spawn(&sh("sleep 300")).unwrap();
    let layer = server.layer_dir(sb.id());
    sb.pause().unwrap();
    let deleter = sb.clone();
    within(PROMPTLY, move || deleter.delete())
        .unwrap_or_else(|| panic!("DELETE of a paused sandbox did not answer within {PROMPTLY:?}"))
        .unwrap();
    assert_eq!(client.get(sb.id()).unwrap().state, SandboxState::Deleted);
    assert!(sandbox_processes(sb.id()).is_empty(), "{:?}", sandbox_processes(sb.id()));
    assert!(!layer.exists(), "layer {} survived", layer.display());
}

/// An exec on a stopped sandbox resumes it first (audited as auto_resume).
#[test]
fn exec_resumes_a_stopped_sandbox() {
    let server = Server::start();
    let client = server.client();
    let sb = server.create(&persistent(None));
    assert!(sb.created().unwrap().auto_resume, "auto_resume must default to on for persistent sandboxes");
    sb.write_file("/home/user/note", b"kept").unwrap();
    sb.stop().unwrap();
    assert_eq!(sh_ok(&sb, "cat /home/user/note"), "kept");
    assert_eq!(client.get(sb.id()).unwrap().state, SandboxState::Running);
    let resumes = audit_rows(&client, sb.id(), "sandbox.resume");
    assert_eq!(resumes.len(), 1, "{resumes:?}");
    assert_eq!((resumes[0]["from"].as_str(), resumes[0]["why"].as_str()), (Some("stopped"), Some("auto_resume")));
}

/// File reads, writes and listings on a stopped sandbox resume it first.
#[test]
fn file_operations_resume_a_stopped_sandbox() {
    let server = Server::start();
    let client = server.client();
    let sb = server.create(&persistent(None));
    sb.write_file("/home/user/note", b"kept").unwrap();
    sb.stop().unwrap();
    assert_eq!(sb.read_file("/home/user/note").unwrap(), b"kept");
    assert_eq!(client.get(sb.id()).unwrap().state, SandboxState::Running);
    sb.stop().unwrap();
    sb.write_file("/home/user/second", b"new").unwrap();
    assert_eq!(client.get(sb.id()).unwrap().state, SandboxState::Running);
    sb.stop().unwrap();
    let names: Vec<String> = sb.list("/home/user", 1).unwrap().into_iter().map(|e| e.name).collect();
    assert!(names.contains(&"note".to_string()) && names.contains(&"second".to_string()), "{names:?}");
    assert_eq!(client.get(sb.id()).unwrap().state, SandboxState::Running);
}

/// An exec on a paused sandbox thaws it; its background process is the same one, still running.
#[test]
fn exec_resumes_a_paused_sandbox_with_its_processes() {
    let server = Server::start();
    let client = server.client();
    let sb = server.create(&persistent(None));
    let pid = sb.spawn(&sh("sleep 300")).unwrap();
    sb.pause().unwrap();
    assert_eq!(sh_ok(&sb, "echo awake"), "awake\n");
    assert_eq!(client.get(sb.id()).unwrap().state, SandboxState::Running);
    let procs = sb.processes().unwrap();
    assert!(procs.iter().any(|p| p.pid == pid && p.running), "{procs:?}");
    let resumes = audit_rows(&client, sb.id(), "sandbox.resume");
    assert_eq!(resumes.last().unwrap()["from"], "paused", "{resumes:?}");
}

/// With auto_resume false, exec and reads on a stopped or paused sandbox are 409s naming the state.
#[test]
fn without_auto_resume_use_of_a_stopped_or_paused_sandbox_is_a_conflict() {
    let server = Server::start();
    let client = server.client();
    let sb = server.create(&CreateSandbox { auto_resume: Some(false), ..persistent(None) });
    assert!(!sb.created().unwrap().auto_resume);
    sb.write_file("/home/user/note", b"kept").unwrap();

    sb.stop().unwrap();
    let err = expect_error(sb.run(&["true"]), 409, "conflict");
    assert!(err.to_string().contains("stopped"), "{err}");
    let err = expect_error(sb.read_file("/home/user/note"), 409, "conflict");
    assert!(err.to_string().contains("stopped"), "{err}");
    assert_eq!(client.get(sb.id()).unwrap().state, SandboxState::Stopped);
    sb.resume().unwrap();
    assert_eq!(sh_ok(&sb, "cat /home/user/note"), "kept");

    sb.pause().unwrap();
    let err = expect_error(sb.run(&["true"]), 409, "conflict");
    assert!(err.to_string().contains("paused"), "{err}");
    expect_error(sb.read_file("/home/user/note"), 409, "conflict");
    assert_eq!(client.get(sb.id()).unwrap().state, SandboxState::Paused);
    sb.resume().unwrap();
    assert_eq!(sh_ok(&sb, "cat /home/user/note"), "kept");
    assert!(audit_rows(&client, sb.id(), "sandbox.resume").iter().all(|r| r["why"] == "api"));
}

/// Pausing a stopped sandbox is a 409 naming the state; repeating a transition already made is accepted.
#[test]
fn illegal_transitions_are_conflicts_naming_the_state() {
    let server = Server::start();
    let client = server.client();
    let sb = server.create(&persistent(None));
    sb.stop().unwrap();
    let err = expect_error(sb.pause(), 409, "conflict");
    assert!(err.to_string().contains("stopped"), "{err}");
    assert_eq!(client.get(sb.id()).unwrap().state, SandboxState::Stopped);
    assert_eq!(sb.stop().unwrap().state, SandboxState::Stopped);
    assert_eq!(sb.resume().unwrap().state, SandboxState::Running);
    assert_eq!(sb.resume().unwrap().state, SandboxState::Running);
    assert_eq!(sb.pause().unwrap().state, SandboxState::Paused);
    assert_eq!(sb.pause().unwrap().state, SandboxState::Paused);
    assert_eq!(sb.resume().unwrap().state, SandboxState::Running);
}

/// An upload refused because the sandbox is stopped gets its 409, not a broken connection.
#[test]
fn a_refused_upload_gets_its_conflict_answer() {
    let server = Server::start();
    let sb = server.create(&CreateSandbox { auto_resume: Some(false), ..persistent(None) });
    sb.stop().unwrap();
    let mut wrong = Vec::new();
    for size in [1u64, 64 * 1024, 1 << 20, 16 << 20] {
        for attempt in 0..3 {
            let err = sb.write_file_from("/home/user/f", Gen::new(1, size), None).unwrap_err();
            if (err.status(), err.code()) != (Some(409), Some("conflict")) {
                wrong.push(format!("{size} bytes, attempt {attempt}: {err}"));
            }
        }
    }
    assert!(wrong.is_empty(), "refused uploads that did not get their 409: {wrong:#?}");
}
