//! Copies of a sandbox's files: snapshots (named, listed, deleted) and the sandboxes made from them,
//! and forks. Every copy is copy-on-write and independent: what one writes, no other sees.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use sandlot_client::api::{CreateSandbox, SandboxState, User};
use sandlot_client::Sandbox;

use crate::server::Server;
use crate::support::{audit_rows, expect_error, persistent, sh_ok, Gen, Latencies, MIB};

/// Owner, mode and name of the snapshotted entries, as `stat` prints them inside.
const OWNERS: &str = "user 644 a.txt\nuser 600 key\nroot 644 root-owned\nuser sub\nuser sub/deep\na.txt\n";

fn owners(sb: &Sandbox) -> String {
    sh_ok(
        sb,
        "cd /home/user/proj && stat -c '%U %a %n' a.txt key root-owned && stat -c '%U %n' sub sub/deep \
         && readlink link",
    )
}

/// Whether `path` exists in `sb`.
fn exists(sb: &Sandbox, path: &str) -> bool {
    sb.shell(&format!("test -e '{path}'")).unwrap().exit_code == 0
}

/// Sandboxes made from a snapshot (by id or name) see its files with their owners; later writes show nowhere else.
#[test]
fn sandboxes_from_a_snapshot_are_independent_copies() {
    let server = Server::start();
    let client = server.client();
    let src = server.create(&persistent(None));
    src.mkdir("/home/user/proj/sub").unwrap();
    src.write_file("/home/user/proj/a.txt", b"version 1").unwrap();
    src.write_file_from("/home/user/proj/key", &b"secret"[..], Some(0o600)).unwrap();
    src.as_user(User::Root).write_file("/home/user/proj/root-owned", b"r").unwrap();
    sh_ok(&src, "echo deep > /home/user/proj/sub/deep && ln -s a.txt /home/user/proj/link");
    assert_eq!(owners(&src), OWNERS, "the source before the snapshot");

    let snap = src.snapshot(Some("base")).unwrap();
    assert_eq!((snap.sandbox_id.as_str(), snap.name.as_deref()), (src.id(), Some("base")));
    let listed = client.snapshots().unwrap();
    assert!(listed.iter().any(|s| s.id == snap.id && s.name.as_deref() == Some("base")), "{listed:?}");
    assert_eq!(audit_rows(&client, src.id(), "snapshot.create")[0]["snapshot"], snap.id.as_str());
    // Written after the snapshot: no copy may see it.
    src.write_file("/home/user/proj/a.txt", b"version 2").unwrap();
    src.write_file("/home/user/proj/after", b"x").unwrap();

    let by_id = server.create(&CreateSandbox { snapshot: Some(snap.id.clone()), ..persistent(None) });
    let by_name = server.create(&CreateSandbox { snapshot: Some("base".into()), ..persistent(None) });
    for (label, copy) in [("by id", &by_id), ("by name", &by_name)] {
        assert_eq!(copy.created().unwrap().snapshot.as_deref(), Some(snap.id.as_str()), "{label}");
        assert_eq!(owners(copy), OWNERS, "owners and modes in the copy made {label}");
        assert_eq!(copy.read_file("/home/user/proj/a.txt").unwrap(), b"version 1", "{label}");
        assert_eq!(copy.read_file("/home/user/proj/key").unwrap(), b"secret", "{label}");
        assert!(!exists(copy, "/home/user/proj/after"), "{label} sees a file written after the snapshot");
        assert_eq!(sh_ok(copy, "stat -c %U /home/user /home/user/proj"), "user\nuser\n", "{label}");
        // The user owns its copied files in fact, not only in name.
        sh_ok(copy, "echo more >> /home/user/proj/sub/deep && chmod 640 /home/user/proj/key");
    }

    by_id.write_file("/home/user/proj/a.txt", b"by id").unwrap();
    by_id.write_file("/home/user/proj/only-by-id", b"i").unwrap();
    by_name.write_file("/home/user/proj/only-by-name", b"n").unwrap();
    src.write_file("/home/user/proj/only-src", b"s").unwrap();
    assert_eq!(src.read_file("/home/user/proj/a.txt").unwrap(), b"version 2");
    assert_eq!(by_name.read_file("/home/user/proj/a.txt").unwrap(), b"version 1");
    assert_eq!(by_id.read_file("/home/user/proj/a.txt").unwrap(), b"by id");
    for (sb, own, others) in [
        (&src, "only-src", ["only-by-id", "only-by-name"]),
        (&by_id, "only-by-id", ["only-src", "only-by-name"]),
        (&by_name, "only-by-name", ["only-src", "only-by-id"]),
    ] {
        assert!(exists(sb, &format!("/home/user/proj/{own}")), "{} lost {own}", sb.id());
        for other in others {
            assert!(!exists(sb, &format!("/home/user/proj/{other}")), "{} sees {other}", sb.id());
        }
    }

    client.delete_snapshot(&snap.id).unwrap();
    assert!(!client.snapshots().unwrap().iter().any(|s| s.id == snap.id));
    assert!(!server.snapshot_dirs().contains(&snap.id), "subvolume left: {:?}", server.snapshot_dirs());
    expect_error(
        client.create(&CreateSandbox { snapshot: Some(snap.id.clone()), ..CreateSandbox::default() }),
        404,
        "not_found",
    );
    expect_error(
        client.create(&CreateSandbox { snapshot: Some("base".into()), ..CreateSandbox::default() }),
        404,
        "not_found",
    );
    // The copies do not depend on the snapshot, across a stop too.
    by_id.stop().unwrap();
    assert_eq!(by_id.read_file("/home/user/proj/a.txt").unwrap(), b"by id");
    assert_eq!(by_name.read_file("/home/user/proj/sub/deep").unwrap(), b"deep\nmore\n");
}

/// A stopped sandbox can be snapshotted without waking it; a taken snapshot name is a 409.
#[test]
fn snapshot_of_a_stopped_sandbox_and_duplicate_snapshot_names() {
    let server = Server::start();
    let client = server.client();
    let src = server.create(&persistent(None));
    src.write_file("/home/user/f", b"stopped data").unwrap();
    src.stop().unwrap();
    let snap = src.snapshot(Some("cold")).unwrap();
    assert_eq!(client.get(src.id()).unwrap().state, SandboxState::Stopped, "a snapshot must not wake the sandbox");
    expect_error(src.snapshot(Some("cold")), 409, "already_exists");
    let copy = server.create(&CreateSandbox { snapshot: Some(snap.id), ..CreateSandbox::default() });
    assert_eq!(copy.read_file("/home/user/f").unwrap(), b"stopped data");
}

/// fork(10) makes 10 running copies of the files; a write in copy i shows in copy i only, not in the source.
#[test]
fn fork_makes_ten_independent_copies() {
    let server = Server::start();
    let client = server.client();
    let src = server.create(&persistent(None));
    src.mkdir("/home/user/data").unwrap();
    src.write_file("/home/user/data/shared.txt", b"original").unwrap();
    src.write_file_from("/home/user/data/big.bin", Gen::new(7, 8 * MIB), None).unwrap();
    let big_sha = sh_ok(&src, "sha256sum < /home/user/data/big.bin");

    let t0 = Instant::now();
    let copies = src.fork(10).unwrap_or_else(|e| panic!("fork(10): {e:?}\n{}", server.log_text()));
    let fork10 = t0.elapsed();
    assert_eq!(copies.len(), 10);
    let ids: BTreeSet<&str> = copies.iter().map(|c| c.id()).collect();
    assert_eq!(ids.len(), 10, "copy ids are not distinct");
    assert!(!ids.contains(src.id()));
    for c in &copies {
        let info = c.created().unwrap();
        assert_eq!(info.state, SandboxState::Running, "{info:?}");
        assert_eq!(info.metadata.get("forked_from").map(String::as_str), Some(src.id()), "{info:?}");
    }
    for (i, c) in copies.iter().enumerate() {
        c.write_file(&format!("/home/user/data/only-{i}"), i.to_string().as_bytes()).unwrap();
        c.write_file("/home/user/data/shared.txt", format!("copy {i}").as_bytes()).unwrap();
    }
    src.write_file("/home/user/data/only-src", b"src").unwrap();
    for (i, c) in copies.iter().enumerate() {
        assert_eq!(sh_ok(c, "ls /home/user/data"), format!("big.bin\nonly-{i}\nshared.txt\n"), "copy {i}");
        assert_eq!(c.read_file("/home/user/data/shared.txt").unwrap(), format!("copy {i}").as_bytes(), "copy {i}");
        assert_eq!(sh_ok(c, "sha256sum < /home/user/data/big.bin"), big_sha, "copy {i}");
        assert_eq!(sh_ok(c, "stat -c %U /home/user/data/big.bin"), "user\n", "copy {i}");
    }
    assert_eq!(sh_ok(&src, "ls /home/user/data"), "big.bin\nonly-src\nshared.txt\n");
    assert_eq!(src.read_file("/home/user/data/shared.txt").unwrap(), b"original");

    let forks = audit_rows(&client, src.id(), "sandbox.fork");
    assert_eq!(forks.len(), 1, "{forks:?}");
    assert_eq!(forks[0]["count"], 10);
    assert!(client.snapshots().unwrap().is_empty(), "{:?}", client.snapshots());
    assert!(server.snapshot_dirs().is_empty(), "implicit snapshot left: {:?}", server.snapshot_dirs());
    for c in &copies {
        c.delete().unwrap();
    }

    let mut single = Latencies::default();
    for _ in 0..5 {
        let copy = single.time(|| src.fork(1)).unwrap().remove(0);
        copy.delete().unwrap();
    }
    eprintln!(
        "fork(10) took {:.1} ms ({:.1} ms per copy); fork(1): {}",
        fork10.as_secs_f64() * 1000.0,
        fork10.as_secs_f64() * 100.0,
        single.summary()
    );
    assert!(fork10 < Duration::from_secs(30), "fork(10) took {fork10:?}");
}
