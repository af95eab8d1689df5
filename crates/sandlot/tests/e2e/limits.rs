//! Resource limits: processes, memory, CPU, command and sandbox wall-clock time.

use std::time::{Duration, Instant};

use sandlot_client::api::{CreateSandbox, ExecRequest, ExitStatus, SandboxState};

use crate::harness::{argv, eventually, expect_error, sh, sh_ok, Server};

fn read_trim(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).trim().to_string()
}

/// Limits asked at create are written to the sandbox's cgroup on the host: exactly, on the command leaf
/// (`work`); the sandbox's own cgroup adds a fixed headroom for the supervisor.
#[test]
fn limits_are_written_to_the_cgroup() {
    let server = Server::start();
    let sb =
        server.create(&CreateSandbox { cpu: Some(0.5), memory_mb: Some(64), pids: Some(64), ..Default::default() });
    let id = sb.id();
    let outer = server.cgroup_dir(id, "memory").expect("memory cgroup");
    let memory = outer.join("work");
    if memory.join("memory.limit_in_bytes").exists() {
        assert_eq!(read_trim(&memory.join("memory.limit_in_bytes")), (64u64 << 20).to_string());
        if memory.join("memory.memsw.limit_in_bytes").exists() {
            assert_eq!(read_trim(&memory.join("memory.memsw.limit_in_bytes")), (64u64 << 20).to_string());
        }
        assert_eq!(read_trim(&outer.join("memory.limit_in_bytes")), ((64u64 + 32) << 20).to_string());
        let pids = server.cgroup_dir(id, "pids").unwrap();
        assert_eq!(read_trim(&pids.join("work/pids.max")), "64");
        // 64 plus pid 1's reserved threads (HEADROOM_PIDS of sandlot_linux::cgroup).
        assert_eq!(read_trim(&pids.join("pids.max")), "224");
        let cpu = server.cgroup_dir(id, "cpu").unwrap();
        assert_eq!(read_trim(&cpu.join("cpu.cfs_quota_us")), "50000");
        assert_eq!(read_trim(&cpu.join("cpu.cfs_period_us")), "100000");
    } else {
        assert_eq!(read_trim(&memory.join("memory.max")), (64u64 << 20).to_string());
        assert_eq!(read_trim(&memory.join("pids.max")), "64");
        assert_eq!(read_trim(&outer.join("cpu.max")), "50000 100000");
    }
    // Every process of the sandbox is inside that cgroup.
    let pids = server.sandbox_pids(id);
    assert!(!pids.is_empty());
    sb.delete().unwrap();
}

/// A fork bomb under `pids: 64` is contained, ends, and the sandbox still answers afterwards.
#[test]
fn fork_bomb_is_contained() {
    let server = Server::start();
    let sb = server.create(&CreateSandbox { pids: Some(64), ..Default::default() });
    let started = Instant::now();
    let bomb = ExecRequest { timeout_s: Some(5.0), ..argv(&["bash", "-c", ":(){ :|:& };:"]) };
    let r = sb.exec(&bomb);
    assert!(started.elapsed() < Duration::from_secs(15), "bomb exec took {:?}", started.elapsed());
    // The host is fine, and so is the daemon.
    server.client().health().unwrap();
    // The bomb must be over: the sandbox's process count falls back and a new command runs.
    // The command leaf (`work`) holds the limit; the sandbox's own cgroup adds pid 1's threads on top.
    let work = server.cgroup_dir(sb.id(), "pids").unwrap().join("work");
    let current = || {
        std::fs::read_to_string(work.join("pids.current"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(u64::MAX)
    };
    // The bomb's shell returns at once; what it left lives on in its group (as after `docker exec`),
    // held to the pids limit, listed as left by the exec, and ended by one kill of its group.
    assert!(current() <= 64, "pids.current = {}", current());
    let left = || sb.processes().unwrap().into_iter().find(|p| p.left_by.is_some() && p.running);
    assert!(eventually(Duration::from_secs(5), || left().is_some()), "the bomb is not listed: {:?}", sb.processes());
    sb.kill_process(left().unwrap().pid, Some(9)).unwrap();
    let settled = eventually(Duration::from_secs(8), || current() < 32);
    let later = sb.exec(&ExecRequest { timeout_s: Some(5.0), ..argv(&["echo", "alive"]) });
    assert!(
        settled,
        "the bomb still runs {:?} after it started: pids.current = {}; bomb exec gave {:?}; a later exec gave {later:?}",
        started.elapsed(),
        current(),
        r.as_ref().map(|r| (r.status, r.exit_code, r.duration_ms, r.stderr_bytes)),
    );
    let later = later.unwrap_or_else(|e| panic!("sandbox no longer answers: {e:?}"));
    assert_eq!(later.stdout, "alive\n", "{later:?}");
    sb.delete().unwrap();
}

/// A memory bomb over `memory_mb` ends as `oom` (not a generic signal), and the sandbox survives it.
#[test]
fn memory_bomb_ends_as_oom() {
    let server = Server::start();
    let sb = server.create(&CreateSandbox { memory_mb: Some(64), ..Default::default() });
    let r = sb.run(&["python3", "-c", "b = bytearray(512 << 20); print('allocated', len(b))"]).unwrap();
    assert_eq!(r.status, ExitStatus::Oom, "{r:?}");
    assert_eq!((r.exit_code, r.signal), (137, Some(9)), "{r:?}");
    assert!(!r.stdout.contains("allocated"), "{r:?}");
    // A shell whose child was OOM-killed is reported as oom as well.
    let r = sb.shell("python3 -c 'b = bytearray(512 << 20)'; exit $?").unwrap();
    assert_eq!(r.status, ExitStatus::Oom, "{r:?}");
    // The supervisor (pid 1) was not the victim: the sandbox still works.
    assert_eq!(sh_ok(&sb, "echo still here"), "still here\n");
    // And a modest allocation below the limit is fine.
    let r = sb.run(&["python3", "-c", "b = bytearray(16 << 20); print(len(b))"]).unwrap();
    assert_eq!((r.status, r.stdout.as_str()), (ExitStatus::Exited, "16777216\n"), "{r:?}");
    sb.delete().unwrap();
}

/// A command that outlives its `timeout_s` is killed with its process group and reported as `timeout`.
#[test]
fn endless_loop_times_out() {
    let server = Server::start();
    let sb = server.sandbox();
    let req = ExecRequest { timeout_s: Some(1.0), ..sh("sleep 100 & while :; do :; done") };
    let started = Instant::now();
    let r = sb.exec(&req).unwrap();
    let elapsed = started.elapsed();
    assert_eq!(r.status, ExitStatus::Timeout, "{r:?}");
    assert_eq!((r.exit_code, r.signal), (124, Some(9)), "{r:?}");
    assert!((900..3000).contains(&r.duration_ms), "{r:?}");
    assert!(elapsed < Duration::from_secs(4), "{elapsed:?}");
    // The whole group went, the background sleep included.
    let ps = sh_ok(&sb, "ps -eo args=");
    assert!(!ps.contains("sleep 100"), "{ps}");
    // Fractional timeouts work too.
    let req = ExecRequest { timeout_s: Some(0.3), ..argv(&["sleep", "10"]) };
    let r = sb.exec(&req).unwrap();
    assert_eq!(r.status, ExitStatus::Timeout);
    assert!((250..2000).contains(&r.duration_ms), "{r:?}");
    sb.delete().unwrap();
}

/// A sandbox's lifetime (`timeout_s`) ends it: it is deleted after ~2 s and the audit says `sandbox.expire`.
#[test]
fn sandbox_lifetime_expires() {
    let server = Server::start();
    let client = server.client();
    let created = Instant::now();
    let sb = server.create(&CreateSandbox { timeout_s: Some(2), ..Default::default() });
    sb.spawn(&argv(&["sleep", "300"])).unwrap();
    let host_pids = server.sandbox_pids(sb.id());
    std::thread::sleep(Duration::from_secs(1).saturating_sub(created.elapsed()));
    assert_eq!(sb.info().unwrap().state, SandboxState::Running, "expired early");
    let gone = eventually(Duration::from_secs(4), || match client.get(sb.id()) {
        Err(e) => e.status() == Some(404),
        Ok(info) => info.state == SandboxState::Deleted,
    });
    let after = created.elapsed();
    assert!(gone, "still there after {after:?}: {:?}", client.get(sb.id()));
    assert!(after < Duration::from_millis(4500), "expired late: {after:?}");
    crate::harness::assert_deleted(&client, sb.id());
    let rows = client.audit(Some(sb.id()), None).unwrap();
    let expire = rows
        .iter()
        .find(|r| r.action == "sandbox.expire")
        .unwrap_or_else(|| panic!("no sandbox.expire row: {rows:#?}"));
    assert!(expire.detail["reason"].as_str().unwrap_or("").contains("2 s"), "{expire:?}");
    assert!(host_pids.iter().all(|p| !crate::harness::alive(*p)), "processes survived expiry");
    server.assert_clean();
    assert!(client.list().unwrap().is_empty());
}

/// `cpu: 0.5` caps CPU time at about half of wall time for a busy loop.
#[test]
fn cpu_quota_halves_cpu_time() {
    let server = Server::start();
    let sb = server.create(&CreateSandbox { cpu: Some(0.5), ..Default::default() });
    let script = r#"
import os, time
t0 = time.monotonic(); c0 = os.times()
while time.monotonic() - t0 < 1.5:
    pass
c1 = os.times(); wall = time.monotonic() - t0
cpu = (c1.user - c0.user) + (c1.system - c0.system)
print(f"{cpu:.3f} {wall:.3f}")
"#;
    let r = sb.run(&["python3", "-c", script]).unwrap();
    assert_eq!(r.exit_code, 0, "{r:?}");
    let v: Vec<f64> = r.stdout.split_whitespace().map(|x| x.parse().unwrap()).collect();
    let (cpu, wall) = (v[0], v[1]);
    let ratio = cpu / wall;
    eprintln!("cpu {cpu} s over {wall} s wall: ratio {ratio:.2}");
    assert!(ratio < 0.75, "cpu {cpu} s over {wall} s wall: ratio {ratio:.2} (limit 0.5)");
    assert!(ratio > 0.05, "cpu {cpu} s over {wall} s wall: suspiciously low ({ratio:.2})");
    sb.delete().unwrap();
}

/// `disk_mb` caps the writable layer: writes past it fail with EDQUOT inside, and the sandbox recovers
/// once space is freed.
#[test]
fn disk_quota_caps_the_writable_layer() {
    let server = Server::start();
    let sb = server.create(&CreateSandbox { disk_mb: Some(64), ..Default::default() });
    let r = sb.shell("head -c 200000000 /dev/zero > /home/user/fill").unwrap();
    assert_ne!(r.exit_code, 0, "wrote 200 MB into a 64 MiB layer: {r:?}");
    assert!(r.stderr.contains("Disk quota exceeded") || r.stderr.contains("No space left"), "{r:?}");
    let size: u64 = sh_ok(&sb, "stat -c %s /home/user/fill").trim().parse().unwrap();
    assert!(size <= 64 << 20, "{size} bytes landed");
    sh_ok(&sb, "rm -f /home/user/fill");
    sb.write_file("/home/user/after", &vec![1u8; 8 << 20]).unwrap();
    assert_eq!(sb.stat("/home/user/after").unwrap().size, 8 << 20);
    sb.delete().unwrap();
}

/// A file upload that outgrows `disk_mb` is answered 413 `too_large` (the client gets the answer, not a
/// broken connection), and leaves no partial file.
#[test]
fn upload_over_disk_quota_is_413() {
    let server = Server::start();
    let sb = server.create(&CreateSandbox { disk_mb: Some(64), ..Default::default() });
    let big = vec![7u8; 80 << 20];
    let err = sb.write_file("/home/user/api-fill", &big).unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(413), Some("too_large")), "{err:?}");
    expect_error(sb.stat("/home/user/api-fill"), 404, "file_not_found");
    let leftovers = sh_ok(&sb, "ls -A /home/user");
    assert_eq!(leftovers, "", "partial upload left behind");
    sb.delete().unwrap();
}

/// Commands run with RLIMIT_CORE 0 and RLIMIT_FSIZE at the writable layer's cap: no core dumps, and no
/// single file larger than the layer can hold.
#[test]
fn rlimits_bound_core_dumps_and_file_size() {
    let server = Server::start();
    let sb = server.create(&CreateSandbox { disk_mb: Some(64), ..Default::default() });
    let out = sh_ok(
        &sb,
        "python3 -c 'import resource as r; print(r.getrlimit(r.RLIMIT_CORE)[0], r.getrlimit(r.RLIMIT_FSIZE)[0], r.getrlimit(r.RLIMIT_NOFILE)[0] <= 65536)'",
    );
    assert_eq!(out.trim(), format!("0 {} True", 64u64 << 20));
}
