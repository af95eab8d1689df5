//! Names: one live sandbox per name and tenant. A taken name is a 409 unless `get_or_create` asks for
//! the existing sandbox (resumed if needed); a deleted sandbox frees its name.

use std::sync::{Arc, Barrier};

use sandlot_client::api::{CreateSandbox, SandboxState};

use crate::server::Server;
use crate::support::{expect_error, persistent};

fn get_or_create(name: &str) -> CreateSandbox {
    CreateSandbox { get_or_create: true, ..persistent(Some(name)) }
}

/// A taken name is a 409 already_exists; get_or_create returns (and resumes) the same sandbox; delete frees it.
#[test]
fn a_name_names_one_live_sandbox() {
    let server = Server::start();
    let client = server.client();
    let first = server.create(&persistent(Some("dup")));
    let err = expect_error(client.create(&persistent(Some("dup"))), 409, "already_exists");
    assert!(err.to_string().contains("dup"), "{err}");
    expect_error(
        client.create(&CreateSandbox { name: Some("dup".into()), ..CreateSandbox::default() }),
        409,
        "already_exists",
    );

    let again = client.create(&get_or_create("dup")).unwrap();
    assert_eq!(again.id(), first.id());
    first.stop().unwrap();
    let again = client.create(&get_or_create("dup")).unwrap();
    assert_eq!(again.id(), first.id());
    assert_eq!(again.created().unwrap().state, SandboxState::Running, "get_or_create must resume a stopped one");
    assert_eq!(client.get(first.id()).unwrap().state, SandboxState::Running);
    first.pause().unwrap();
    let again = client.create(&get_or_create("dup")).unwrap();
    assert_eq!((again.id(), again.created().unwrap().state), (first.id(), SandboxState::Running));
    let named: Vec<_> = client
        .list()
        .unwrap()
        .into_iter()
        .filter(|s| s.name.as_deref() == Some("dup") && s.state != SandboxState::Deleted)
        .collect();
    assert_eq!(named.len(), 1, "{named:?}");

    first.delete().unwrap();
    let second = server.create(&persistent(Some("dup")));
    assert_ne!(second.id(), first.id());
    assert_eq!(client.get(first.id()).unwrap().state, SandboxState::Deleted);
    assert_eq!(client.create(&get_or_create("dup")).unwrap().id(), second.id());
}

/// Two tenants may use the same name; get_or_create never returns another tenant's sandbox.
#[test]
fn names_are_per_tenant() {
    let server = Server::start();
    let (alice, bob) = (server.tenant_client("alice"), server.tenant_client("bob"));
    let a = alice.create(&persistent(Some("shared-name"))).unwrap();
    let b = bob.create(&persistent(Some("shared-name"))).unwrap();
    assert_ne!(a.id(), b.id());
    assert_eq!(bob.create(&get_or_create("shared-name")).unwrap().id(), b.id());
    assert_eq!(alice.create(&get_or_create("shared-name")).unwrap().id(), a.id());
}

/// Eight racing get_or_create calls with a new name all get the one sandbox they make (25 rounds).
#[test]
fn concurrent_get_or_create_makes_one_sandbox() {
    let server = Server::start();
    let client = server.client();
    for round in 0..25 {
        let name = format!("race-{round}");
        let barrier = Arc::new(Barrier::new(8));
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let (client, barrier, name) = (client.clone(), Arc::clone(&barrier), name.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    client.create(&get_or_create(&name)).map(|sb| sb.id().to_string())
                })
            })
            .collect();
        let results: Vec<_> = calls.into_iter().map(|c| c.join().unwrap()).collect();
        let live: Vec<_> = client
            .list()
            .unwrap()
            .into_iter()
            .filter(|s| s.name.as_deref() == Some(name.as_str()) && s.state != SandboxState::Deleted)
            .collect();
        assert_eq!(live.len(), 1, "round {round}: live sandboxes named {name}: {live:?}");
        for r in &results {
            match r {
                Ok(id) => assert_eq!(id, &live[0].id, "round {round}: {results:?}"),
                Err(e) => panic!("round {round}: a concurrent get_or_create failed: {e:?}\nall results: {results:?}"),
            }
        }
        client.sandbox(live[0].id.clone()).delete().unwrap();
    }
}

/// get_or_create of a sandbox still being created returns it running, ready for a command.
#[test]
fn get_or_create_during_creation_returns_a_ready_sandbox() {
    let server = Server::start();
    let client = server.client();
    let creator = client.clone();
    let first = std::thread::spawn(move || creator.create(&persistent(Some("slow"))).map(|sb| sb.id().to_string()));
    let mut creating = false;
    while !first.is_finished() && !creating {
        creating = client
            .list()
            .unwrap()
            .iter()
            .any(|s| s.name.as_deref() == Some("slow") && s.state == SandboxState::Creating);
    }
    assert!(creating, "the first create finished before it was seen in state creating; nothing tested");
    let second = client.create(&get_or_create("slow")).unwrap();
    let id = first.join().unwrap().unwrap();
    assert_eq!(second.id(), id);
    assert_eq!(second.created().unwrap().state, SandboxState::Running, "{:?}", second.created());
    second.run(&["true"]).unwrap_or_else(|e| panic!("exec right after get_or_create: {e:?}"));
}
