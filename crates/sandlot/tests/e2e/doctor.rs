//! `sandlot doctor` on this host, the same checks at `serve`'s start, and `/healthz`'s `degraded`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::{free_port, serve_command, wait_timeout};
use crate::harness::Server;

/// Every check, in the order of the table.
const CHECKS: [&str; 16] = [
    "root",
    "kernel",
    "cgroup-mode",
    "cgroup-controllers",
    "cgroup-placement",
    "userns",
    "overlay-userns",
    "landlock",
    "seccomp",
    "sk-lookup",
    "btrfs",
    "loop",
    "uid-ranges",
    "pid-max",
    "memory",
    // The summary line's first word, after the blank line.
    "",
];

fn doctor(args: &[&str]) -> Output {
    let state = tempfile::tempdir().expect("tempdir");
    Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .arg("doctor")
        .arg("--state-dir")
        .arg(state.path())
        .args(args)
        .env_remove("SANDLOT_CONFIG")
        .env_remove("SANDLOT_STATE_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("running sandlot doctor")
}

/// Whether this process's memory controller is on a v1 hierarchy (the engine then uses v1).
fn memory_on_v1() -> bool {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let own = fs::read_to_string("/proc/self/cgroup").unwrap();
    own.lines().any(|l| l.split(':').nth(1).is_some_and(|c| c.split(',').any(|c| c == "memory")))
        && mountinfo.lines().any(|l| l.contains(" - cgroup cgroup ") && l.split(',').any(|o| o == "memory"))
}

/// `(verdict, name, found)` of each line of the table (fix lines, which start with spaces, skipped).
fn table_lines(stdout: &str) -> Vec<(String, String, String)> {
    stdout
        .lines()
        .take_while(|l| !l.is_empty())
        .filter(|l| !l.starts_with(' '))
        .map(|l| {
            let mut parts = l.splitn(2, "  ");
            let verdict = parts.next().unwrap().trim().to_string();
            let rest = parts.next().unwrap_or("").trim_start();
            let (name, found) = rest.split_once("  ").unwrap_or((rest, ""));
            (verdict, name.to_string(), found.trim().to_string())
        })
        .collect()
}

/// On this host (root, Linux ≥ 5.11, user namespaces, btrfs, loop): every required feature is there,
/// so the table has no `missing` line and the exit status is 0; the cgroup mode is the one the engine
/// uses (a v1 hybrid here).
#[test]
fn doctor_prints_one_line_per_check_and_exits_0_on_this_host() {
    let out = doctor(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines = table_lines(&stdout);
    let names: Vec<&str> = lines.iter().map(|(_, n, _)| n.as_str()).collect();
    assert_eq!(names, CHECKS[..CHECKS.len() - 1], "{stdout}");
    for (verdict, name, found) in &lines {
        assert!(["ok", "degraded", "missing"].contains(&verdict.as_str()), "{name}: {verdict}");
        assert!(!found.is_empty(), "{name} says what it found");
    }
    let verdict =
        |name: &str| lines.iter().find(|(_, n, _)| n == name).map(|(v, _, f)| (v.as_str(), f.as_str())).unwrap();
    for required in ["root", "kernel", "userns", "overlay-userns", "seccomp", "sk-lookup", "btrfs", "loop"] {
        assert_eq!(verdict(required).0, "ok", "{required} on this host\n{stdout}");
    }
    if memory_on_v1() {
        assert!(verdict("cgroup-mode").1.starts_with("v1"), "{stdout}");
        for c in ["cgroup-mode", "cgroup-controllers", "cgroup-placement"] {
            assert_eq!(verdict(c).0, "ok", "{c}\n{stdout}");
        }
    } else {
        assert!(verdict("cgroup-mode").1.contains("v2"), "{stdout}");
    }
    // Every degraded or missing line is followed by what to do.
    let all: Vec<&str> = stdout.lines().collect();
    for (i, l) in all.iter().enumerate() {
        if l.starts_with("degraded") || l.starts_with("missing") {
            assert!(all.get(i + 1).is_some_and(|n| n.trim_start().starts_with("→ ")), "no fix under {l:?}");
        }
    }
    let missing = lines.iter().filter(|(v, _, _)| v == "missing").count();
    assert_eq!(out.status.code(), Some(if missing == 0 { 0 } else { 1 }), "{stdout}");
    assert!(stdout.trim_end().lines().last().unwrap().starts_with(if missing == 0 { "ready:" } else { "not ready:" }));
    if memory_on_v1() {
        assert_eq!(missing, 0, "nothing required is missing on this host\n{stdout}");
    }
}

/// `--json`: `{"ready", "checks": [{"name", "verdict", "found", "fix"}]}`, the same checks as the table;
/// options that change the requirements change the verdicts (`--no-disk-quota`: btrfs degraded, loop
/// not needed; `--insecure-disable-layer seccomp`: seccomp degraded).
#[test]
fn doctor_json_has_the_tables_checks_and_follows_the_options() {
    let out = doctor(&["--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor --json prints JSON");
    let checks = v["checks"].as_array().expect("checks");
    let names: Vec<&str> = checks.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, CHECKS[..CHECKS.len() - 1]);
    for c in checks {
        let keys: Vec<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 4, "{c}");
        for k in ["name", "verdict", "found", "fix"] {
            assert!(c[k].is_string(), "{k} in {c}");
        }
        let verdict = c["verdict"].as_str().unwrap();
        assert!(["ok", "degraded", "missing"].contains(&verdict), "{c}");
        assert_eq!(verdict == "ok", c["fix"] == "", "a fix exactly when not ok: {c}");
    }
    let ready = checks.iter().all(|c| c["verdict"] != "missing");
    assert_eq!(v["ready"], ready);
    assert_eq!(out.status.code(), Some(if ready { 0 } else { 1 }));

    let out = doctor(&["--json", "--no-disk-quota", "--insecure-disable-layer", "seccomp"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let find = |name: &str| v["checks"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap().clone();
    assert_eq!(find("btrfs")["verdict"], "degraded", "{}", find("btrfs"));
    assert!(find("btrfs")["found"].as_str().unwrap().contains("--no-disk-quota"));
    assert_eq!(find("loop")["verdict"], "ok");
    assert_eq!(find("seccomp")["verdict"], "degraded");
}

/// `/healthz` lists what the start-up checks found degraded — the doctor's degraded lines for the
/// same options — and the log has a warning for each.
#[test]
fn healthz_lists_the_degraded_host_features_and_the_log_warns_of_each() {
    let server = Server::start_with(&["--insecure-disable-layer", "landlock"]);
    let r = server.raw("GET", "/healthz", None, &[], b"");
    assert_eq!(r.status, 200, "{r:?}");
    let health = r.json();
    assert_eq!(health["status"], "ok");
    let degraded: Vec<&str> =
        health["degraded"].as_array().expect("degraded").iter().map(|d| d.as_str().unwrap()).collect();
    assert!(degraded.contains(&"landlock"), "{health}");

    let out = doctor(&["--json", "--insecure-disable-layer", "landlock"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let doctor_degraded: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verdict"] == "degraded")
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(degraded, doctor_degraded, "serve's start-up checks are the doctor's");
    let log = server.log_text();
    for name in &degraded {
        assert!(log.contains(&format!("DEGRADED {name}: ")), "no warning for {name}\n{log}");
    }
}

/// A cgroup v2 directory for this test, holding one `sleep` of the test's: what a login session's
/// scope looks like to a daemon started in it (another process beside it). Removed on drop.
struct SharedCgroup {
    dir: PathBuf,
    path: String,
    sleeper: std::process::Child,
}

impl SharedCgroup {
    fn create() -> Option<SharedCgroup> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let point = mountinfo.lines().find(|l| l.contains(" - cgroup2 "))?.split(' ').nth(4)?.to_string();
        let path = format!("/sandlot-doctor-test-{}", std::process::id());
        let dir = Path::new(&point).join(&path[1..]);
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let sleeper = Command::new("sleep").arg("60").spawn().expect("sleep");
        let cg = SharedCgroup { dir, path, sleeper };
        fs::write(cg.dir.join("cgroup.procs"), cg.sleeper.id().to_string()).expect("moving the sleeper in");
        Some(cg)
    }

    fn procs(&self) -> String {
        fs::read_to_string(self.dir.join("cgroup.procs")).unwrap()
    }
}

impl Drop for SharedCgroup {
    fn drop(&mut self) {
        let _ = self.sleeper.kill();
        let _ = self.sleeper.wait();
        // The killed sleeper leaves the cgroup once the kernel has reaped it.
        crate::common::eventually(Duration::from_secs(2), || fs::remove_dir(&self.dir).is_ok());
    }
}

/// A daemon whose cgroup v2 holds another process refuses to start, in the doctor's words (what is
/// missing and what to do), and changes nothing: the other process stays where it was, not even the
/// state directory is made. (`--test-proc-self-cgroup` points the check at a cgroup this test made; the
/// cgroup2 hierarchy of this host's v1 hybrid serves, so does a pure v2 one.)
#[test]
fn serve_refuses_in_the_doctors_words_when_its_cgroup_is_shared() {
    let Some(cg) = SharedCgroup::create() else {
        panic!("no cgroup2 hierarchy is mounted on this host to make the shared cgroup in");
    };
    let root = tempfile::tempdir().unwrap();
    let fake = root.path().join("proc-self-cgroup");
    fs::write(&fake, format!("0::{}\n", cg.path)).unwrap();
    let state = root.path().join("state");
    let log = root.path().join("server.log");
    let mut child = serve_command(&state, free_port(), &log)
        .arg("--test-proc-self-cgroup")
        .arg(&fake)
        .spawn()
        .expect("starting sandlot serve");
    let status = wait_timeout(&mut child, Duration::from_secs(30)).unwrap_or_else(|| {
        let _ = child.kill();
        let _ = child.wait();
        panic!("serve did not refuse within 30 s: {}", fs::read_to_string(&log).unwrap_or_default())
    });
    let text = fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(text.contains("this host lacks what sandlot needs; nothing was changed"), "{text}");
    let pid = cg.sleeper.id();
    assert!(text.contains("missing   cgroup-placement"), "{text}");
    assert!(text.contains(&format!("{} also holds 1 other process (pid {pid})", cg.path)), "{text}");
    assert!(text.contains("→ give sandlot a cgroup of its own") && text.contains("Delegate=yes"), "{text}");
    // Only what is missing is listed, and nothing was touched.
    assert!(!text.contains("ok        kernel"), "{text}");
    assert_eq!(cg.procs().trim(), pid.to_string(), "the other process was not moved");
    assert!(!state.exists(), "not even the state directory was made");
}

/// Run by an unprivileged user, the doctor says that root is missing (exit 1), still runs the checks
/// that need no root, and leaves its overlay probe's directories behind nowhere (overlayfs makes
/// `work/work` mode 000, which an unprivileged owner must chmod before it can remove it).
#[test]
fn doctor_as_an_unprivileged_user_reports_root_missing_and_leaves_nothing() {
    use std::os::unix::process::CommandExt;
    let state = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::chown(state.path(), Some(65534), Some(65534)).expect("chown the state dir to nobody");
    let out = Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .arg("doctor")
        .arg("--json")
        .arg("--state-dir")
        .arg(state.path())
        .env_remove("SANDLOT_CONFIG")
        .env_remove("SANDLOT_STATE_DIR")
        .current_dir("/")
        .uid(65534)
        .gid(65534)
        .stdin(Stdio::null())
        .output()
        .expect("running sandlot doctor as nobody");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let find = |name: &str| v["checks"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap().clone();
    assert_eq!(find("root")["verdict"], "missing");
    assert_eq!(v["ready"], false);
    assert_eq!(out.status.code(), Some(1));
    assert!(find("sk-lookup")["found"].as_str().unwrap().contains("needs root"));
    let overlay = find("overlay-userns");
    assert!(!overlay["found"].as_str().unwrap().contains("could not remove"), "{overlay}");
    let left: Vec<_> = fs::read_dir(state.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "the probe left {left:?} in the state directory");
}
