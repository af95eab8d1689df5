//! The daemon dies: kill -9 in the middle of an upload, of an exec, of a snapshot; or a graceful
//! SIGTERM. After a restart on the same state: whatever was acknowledged is there byte for byte,
//! nothing half-done shows, persistent sandboxes are `stopped` and resumable, ephemeral ones `deleted`,
//! and nothing of the old sandboxes remains on the host (process, cgroup, mount).

use std::collections::BTreeSet;
use std::fs;
use std::time::{Duration, Instant};

use sandlot_client::api::{CreateSandbox, SandboxState};
use sandlot_client::{Client, Sandbox};

use crate::server::Server;
use crate::support::{alive, audit_rows, eventually, persistent, sandbox_processes, sh, sh_ok, Compare, Gen, MIB};

/// Files written and acknowledged before a crash: `(path, seed, size)`.
fn write_acknowledged(sb: &Sandbox, dir: &str) -> Vec<(String, u64, u64)> {
    sb.mkdir(dir).unwrap();
    let mut files = Vec::new();
    for (i, size) in [0, 1, 4096, 100_003, 3 * MIB, 16 * MIB + 5].into_iter().enumerate() {
        let path = format!("{dir}/acked-{i}");
        let seed = 500 + i as u64;
        let r = sb.write_file_from(&path, Gen::new(seed, size), None).unwrap();
        assert_eq!(r.bytes, size);
        files.push((path, seed, size));
    }
    // Replaced after a first version: the acknowledged version is the second.
    sb.write_file(&format!("{dir}/replaced"), b"first").unwrap();
    sb.write_file_from(&format!("{dir}/replaced"), Gen::new(600, 70_000), None).unwrap();
    files.push((format!("{dir}/replaced"), 600, 70_000));
    files
}

/// Reads each file back and compares it with its generator, byte for byte.
#[track_caller]
fn assert_files(sb: &Sandbox, files: &[(String, u64, u64)], when: &str) {
    for (path, seed, size) in files {
        let mut cmp = Compare::new(Gen::new(*seed, *size));
        sb.read_file_to(path, &mut cmp).unwrap_or_else(|e| panic!("{when}: reading {path}: {e:?}"));
        assert_eq!((cmp.len(), cmp.mismatch), (*size, None), "{when}: {path} differs (length, first bad byte)");
    }
}

/// Persistent sandboxes are `stopped` by the recovery, with an audit row saying so; ephemeral ones
/// `deleted`; none has a cgroup or a process left, and the volume never shows on the host.
#[track_caller]
fn assert_recovered(server: &Server, client: &Client, stopped: &[&Sandbox], deleted: &[&Sandbox]) {
    for sb in stopped {
        let info = client.get(sb.id()).unwrap();
        assert_eq!(info.state, SandboxState::Stopped, "persistent sandbox after the restart: {info:?}");
        let rows = audit_rows(client, sb.id(), "sandbox.recovered");
        assert!(rows.last().is_some_and(|r| r["state"] == "stopped"), "recovery audit rows: {rows:?}");
        assert!(server.layer_dir(sb.id()).is_dir(), "the layer of {} is gone", sb.id());
    }
    for sb in deleted {
        let info = client.get(sb.id()).unwrap();
        assert_eq!(info.state, SandboxState::Deleted, "ephemeral sandbox after the restart: {info:?}");
        assert!(info.reason.as_deref().is_some_and(|r| r.contains("restart")), "{info:?}");
        assert!(!server.layer_dir(sb.id()).exists(), "the layer of deleted {} is left", sb.id());
    }
    for sb in stopped.iter().chain(deleted) {
        let left = sandbox_processes(sb.id());
        assert!(left.is_empty(), "processes of {} survived the old daemon: {left:?}", sb.id());
        for dir in server.cgroup_dirs(sb.id()) {
            assert!(!dir.exists(), "cgroup {} of the old daemon is left", dir.display());
        }
    }
    assert_eq!(server.host_mounts(), Vec::<String>::new(), "host mounts of the state dir");
}

/// kill -9 mid-upload: acknowledged files survive byte for byte; the upload's path is absent or complete.
#[test]
fn kill9_during_an_upload_keeps_acknowledged_files_and_no_partial_one() {
    let mut server = Server::start();
    let client = server.client();
    let keep = server.create(&persistent(Some("uploads")));
    let gone = server.create(&CreateSandbox::default());
    gone.write_file("/home/user/x", b"ephemeral").unwrap();
    let files = write_acknowledged(&keep, "/home/user/acked");
    sh_ok(&keep, "printf 'from exec' > /home/user/acked/by-exec");
    assert_eq!(server.host_mounts(), Vec::<String>::new(), "the layers volume shows on the host");

    // A slow client (40 MiB/s): the kill lands mid-transfer.
    const BIG: u64 = 200 * MIB;
    let gen = Gen::new(99, BIG).paced(40 * MIB);
    let produced = gen.produced();
    let uploader = keep.clone();
    let upload = std::thread::spawn(move || uploader.write_file_from("/home/user/big.bin", gen, None));
    let t0 = Instant::now();
    assert!(eventually(Duration::from_secs(10), || {
        t0.elapsed() >= Duration::from_secs(1) && produced.load(std::sync::atomic::Ordering::Relaxed) >= 16 * MIB
    }));
    assert!(!upload.is_finished(), "the upload ended before the kill: {:?}", upload.join());
    let sent = produced.load(std::sync::atomic::Ordering::Relaxed);
    server.kill9();
    let result = upload.join().unwrap();
    assert!(result.is_err(), "an upload cut by the crash was acknowledged: {result:?}");
    eprintln!("killed the daemon after {:?}, {} MiB of {} MiB sent", t0.elapsed(), sent / MIB, BIG / MIB);
    assert_eq!(server.host_mounts(), Vec::<String>::new(), "host mounts of the state dir after the crash");
    for sb in [&keep, &gone] {
        let left = sandbox_processes(sb.id());
        assert!(eventually(Duration::from_secs(5), || sandbox_processes(sb.id()).is_empty()), "{left:?}");
    }

    server.restart();
    assert_recovered(&server, &client, &[&keep], &[&gone]);
    assert_eq!(keep.resume().unwrap().state, SandboxState::Running);
    assert_files(&keep, &files, "after the crash");
    assert_eq!(keep.read_file("/home/user/acked/by-exec").unwrap(), b"from exec");
    match keep.stat("/home/user/big.bin") {
        Err(e) => assert_eq!(e.code(), Some("file_not_found"), "{e:?}"),
        Ok(st) => {
            assert_eq!(st.size, BIG, "a partial file at the upload's path: {st:?}");
            assert_files(&keep, &[("/home/user/big.bin".into(), 99, BIG)], "the interrupted upload");
        }
    }
    let debris: Vec<String> = keep
        .list("/home/user", 1)
        .unwrap()
        .into_iter()
        .filter(|e| e.name.starts_with(".big.bin."))
        .map(|e| format!("{} ({} bytes)", e.name, e.size))
        .collect();
    if !debris.is_empty() {
        eprintln!("NOTE: the interrupted upload left its temporary file(s) in /home/user: {debris:?}");
    }
}

/// kill -9 mid-upload leaves no hidden partial temporary file in the target directory.
#[test]
fn kill9_during_an_upload_leaves_no_temporary_file() {
    let mut server = Server::start();
    let sb = server.create(&persistent(None));
    sb.mkdir("/home/user/in").unwrap();
    let gen = Gen::new(98, 64 * MIB).paced(16 * MIB);
    let produced = gen.produced();
    let uploader = sb.clone();
    let upload = std::thread::spawn(move || uploader.write_file_from("/home/user/in/big.bin", gen, None));
    assert!(eventually(Duration::from_secs(10), || produced.load(std::sync::atomic::Ordering::Relaxed) >= 8 * MIB));
    assert!(!upload.is_finished());
    server.kill9();
    assert!(upload.join().unwrap().is_err());
    server.restart();
    let left = sh_ok(&sb, "ls -A /home/user/in");
    assert_eq!(left, "", "the interrupted upload left files in /home/user/in");
}

/// kill -9 mid-exec: the call fails, no old process survives, persistent sandboxes come back stopped.
#[test]
fn kill9_during_an_exec_leaves_no_process_and_stops_persistent_sandboxes() {
    let mut server = Server::start();
    let client = server.client();
    let running = server.create(&persistent(Some("running")));
    let paused = server.create(&persistent(Some("paused")));
    let gone = server.create(&CreateSandbox::default());
    running.write_file("/home/user/note", b"running one").unwrap();
    paused.write_file("/home/user/note", b"paused one").unwrap();
    for sb in [&paused, &gone] {
        sb.spawn(&sh("sleep 300")).unwrap();
    }
    paused.pause().unwrap();
    let runner = running.clone();
    let exec = std::thread::spawn(move || {
        let t0 = Instant::now();
        (runner.exec(&sh("echo started; sleep 60")), t0.elapsed())
    });
    assert!(eventually(Duration::from_secs(5), || sandbox_processes(running.id())
        .iter()
        .any(|p| p.1.contains("sleep 60"))));
    let host_pids: Vec<(String, i32)> = [&running, &paused, &gone]
        .iter()
        .flat_map(|sb| sandbox_processes(sb.id()).into_iter().map(|(pid, _)| (sb.id().to_string(), pid)))
        .collect();
    for sb in [&running, &paused, &gone] {
        assert!(host_pids.iter().any(|(id, _)| id == sb.id()), "no host process found for {}", sb.id());
    }

    server.kill9();
    let (result, took) = exec.join().unwrap();
    assert!(result.is_err(), "the exec reported a result from a dead daemon: {result:?}");
    assert!(took < Duration::from_secs(30), "the exec call hung for {took:?}");
    // The paused one too: on cgroup v1 its frozen tasks could not die, until the daemon's thaw watchdog
    // (which outlives it by moments) thaws them.
    for sb in [&running, &gone, &paused] {
        assert!(
            eventually(Duration::from_secs(5), || sandbox_processes(sb.id()).is_empty()),
            "processes of {} outlived the daemon: {:?}",
            sb.id(),
            sandbox_processes(sb.id())
        );
    }

    server.restart();
    assert_recovered(&server, &client, &[&running, &paused], &[&gone]);
    for (id, pid) in &host_pids {
        assert!(!alive(*pid), "host pid {pid} of {id} is still alive after the restart");
    }
    assert_eq!(running.read_file("/home/user/note").unwrap(), b"running one");
    assert_eq!(paused.read_file("/home/user/note").unwrap(), b"paused one");
    assert_eq!(sh_ok(&paused, "echo resumed"), "resumed\n");
    assert_eq!(client.get(paused.id()).unwrap().state, SandboxState::Running);
}

/// The syscall number of syncfs (the daemon flushes a layer with it before snapshotting it).
#[cfg(target_arch = "x86_64")]
const SYS_SYNCFS: &str = "306";
#[cfg(target_arch = "aarch64")]
const SYS_SYNCFS: &str = "267";

/// Whether a thread of process `pid` is inside syncfs now.
fn in_syncfs(pid: i32) -> bool {
    fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|t| fs::read_to_string(t.path().join("syscall")).is_ok_and(|s| s.split(' ').next() == Some(SYS_SYNCFS)))
}

/// kill -9 mid-snapshot: an acknowledged snapshot survives; listed snapshots and subvolumes match.
#[test]
fn kill9_during_a_snapshot_keeps_snapshots_consistent() {
    let mut server = Server::start();
    let client = server.client();
    let src = server.create(&persistent(Some("snapped")));
    let files = write_acknowledged(&src, "/home/user/acked");
    for round in 0..2 {
        // Dirty pages make the flush before the snapshot take a while.
        sh_ok(&src, "head -c 300000000 /dev/zero > /home/user/dirty");
        let pid = server.pid();
        let before: BTreeSet<String> = server.snapshot_dirs().into_iter().collect();
        let volume_snapshots = server.snapshots_path();
        let snapper = src.clone();
        let name = format!("crash-{round}");
        let call = std::thread::spawn(move || snapper.snapshot(Some(&name)));
        let t0 = Instant::now();
        let hit = loop {
            let now_in = match round {
                0 => in_syncfs(pid),
                _ => fs::read_dir(&volume_snapshots)
                    .map(|rd| rd.flatten().any(|e| !before.contains(&e.file_name().to_string_lossy().into_owned())))
                    .unwrap_or(false),
            };
            if now_in || call.is_finished() || t0.elapsed() > Duration::from_secs(10) {
                break now_in;
            }
        };
        server.kill9();
        let result = call.join().unwrap();
        eprintln!(
            "round {round}: killed after {:?} ({}); the snapshot call {}",
            t0.elapsed(),
            if hit { ["during syncfs", "as the subvolume appeared"][round] } else { "missed the moment" },
            if result.is_ok() { "succeeded" } else { "failed" }
        );

        server.restart();
        assert_recovered(&server, &client, &[&src], &[]);
        let listed: BTreeSet<String> = client.snapshots().unwrap().into_iter().map(|s| s.id).collect();
        let on_volume: BTreeSet<String> = server.snapshot_dirs().into_iter().collect();
        assert_eq!(listed, on_volume, "round {round}: listed snapshots vs subvolumes on the volume");
        if let Ok(snap) = &result {
            assert!(listed.contains(&snap.id), "round {round}: an acknowledged snapshot is gone: {snap:?}");
        }
        for id in &listed {
            let copy = server.create(&CreateSandbox { snapshot: Some(id.clone()), ..CreateSandbox::default() });
            assert_files(&copy, &files, &format!("round {round}: a sandbox made from snapshot {id}"));
            copy.delete().unwrap();
        }
        let name = format!("crash-{round}");
        if result.is_err() && !client.snapshots().unwrap().iter().any(|s| s.name.as_deref() == Some(name.as_str())) {
            // The failed snapshot's name is free again.
            src.snapshot(Some(&name)).unwrap_or_else(|e| panic!("round {round}: reusing {name}: {e:?}"));
        }
        assert_files(&src, &files, &format!("round {round}: the source after the crash"));
        sh_ok(&src, "rm -f /home/user/dirty");
    }
}

/// SIGTERM stops persistent sandboxes (files kept across the restart) and deletes ephemeral ones.
#[test]
fn sigterm_stops_persistent_sandboxes_and_deletes_ephemeral_ones() {
    let mut server = Server::start();
    let client = server.client();
    let running = server.create(&persistent(Some("running")));
    let stopped = server.create(&persistent(Some("stopped")));
    let gone = server.create(&CreateSandbox::default());
    for sb in [&running, &stopped, &gone] {
        sb.write_file("/home/user/note", sb.id().as_bytes()).unwrap();
        sb.spawn(&sh("sleep 300")).unwrap();
    }
    stopped.stop().unwrap();

    let status = server.terminate();
    assert!(status.success(), "the daemon exited with {status} on SIGTERM\n{}", server.log_text());
    for sb in [&running, &stopped, &gone] {
        assert!(sandbox_processes(sb.id()).is_empty(), "{:?}", sandbox_processes(sb.id()));
    }
    assert_eq!(server.host_mounts(), Vec::<String>::new());
    server.restart();
    for sb in [&running, &stopped] {
        let info = client.get(sb.id()).unwrap();
        assert_eq!(info.state, SandboxState::Stopped, "persistent sandbox after a graceful restart: {info:?}");
        assert_eq!(sb.read_file("/home/user/note").unwrap(), sb.id().as_bytes(), "files of {}", sb.id());
    }
    let info = client.get(gone.id()).unwrap();
    assert_eq!(info.state, SandboxState::Deleted, "{info:?}");
    assert!(!server.layer_dir(gone.id()).exists());
}

/// SIGTERM with a paused sandbox still exits promptly, and the sandbox comes back stopped with its files.
#[test]
fn sigterm_with_a_paused_sandbox_exits_and_keeps_it() {
    let mut server = Server::start();
    let client = server.client();
    let paused = server.create(&persistent(Some("paused")));
    paused.write_file("/home/user/note", b"paused one").unwrap();
    paused.spawn(&sh("sleep 300")).unwrap();
    paused.pause().unwrap();

    let status = server.terminate();
    assert!(status.success(), "the daemon exited with {status} on SIGTERM\n{}", server.log_text());
    assert!(sandbox_processes(paused.id()).is_empty(), "{:?}", sandbox_processes(paused.id()));
    server.restart();
    let info = client.get(paused.id()).unwrap();
    assert_eq!(info.state, SandboxState::Stopped, "paused persistent sandbox after a graceful restart: {info:?}");
    assert_eq!(paused.read_file("/home/user/note").unwrap(), b"paused one");
}
