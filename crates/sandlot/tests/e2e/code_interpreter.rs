//! The code interpreter as users get it: `scripts/code-interpreter-image.sh` builds the image offline
//! (pinned wheels downloaded on the host, `pip --no-index` in a build step without network) on a real
//! server, and a sandbox of it answers the e2b-code-interpreter wire on port 49999 from boot, because
//! the image's `sandlot.start` label starts the runner at every boot (create and resume). Needs the
//! Debian tarball (`SANDLOT_DEBIAN_IMAGE`, see [`crate::images_debian`]) and, once, PyPI for the wheels.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sandlot_client::api::{CreateSandbox, ExecRequest, User};
use sandlot_client::Sandbox;

use crate::harness::Server;
use crate::images_debian::import_debian;

const IMAGE: &str = "code-interpreter";

/// Runs in the sandbox: POSTs a cell to the runner on 127.0.0.1:49999 (retrying while nothing listens
/// yet) and prints the answer's JSON lines.
const PROBE: &str = r#"
import json, sys, time, urllib.request, urllib.error
deadline = time.monotonic() + 90
while True:
    req = urllib.request.Request("http://127.0.0.1:49999/execute", data=json.dumps({"code": sys.argv[1]}).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=90) as r:
            sys.stdout.write(r.read().decode())
            break
    except (ConnectionError, urllib.error.URLError):
        if time.monotonic() > deadline:
            raise
        time.sleep(0.01)
"#;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `script` from the repository with the CLI pointed at `server`; returns stdout.
fn run_script(server: &Server, script: &str, args: &[&str]) -> String {
    let out = Command::new(repo_root().join(script))
        .args(args)
        .current_dir(repo_root())
        .env("SANDLOT_BIN", env!("CARGO_BIN_EXE_sandlot"))
        .env("SANDLOT_URL", server.url())
        .env("SANDLOT_API_KEY", server.admin_key())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script} {args:?} failed:\n{}\n--- server log ---\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log_text()
    );
    String::from_utf8(out.stdout).unwrap()
}

/// One cell through the runner inside `sb`: its lines, parsed.
fn execute(sb: &Sandbox, code: &str) -> Vec<serde_json::Value> {
    let req = ExecRequest {
        argv: Some(vec!["python3".into(), "-c".into(), PROBE.into(), code.into()]),
        user: Some(User::User),
        timeout_s: Some(120.0),
        ..Default::default()
    };
    let r = sb.exec(&req).unwrap();
    assert_eq!((r.status.as_str(), r.exit_code), ("exited", 0), "{r:?}");
    let lines: Vec<serde_json::Value> = r.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.last().map(|l| l["type"].as_str()), Some(Some("end_of_execution")), "{lines:?}");
    lines
}

fn of<'a>(lines: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().filter(|l| l["type"] == kind).collect()
}

fn audit_actions(server: &Server, id: &str) -> Vec<(String, serde_json::Value)> {
    server.client().audit(Some(id), Some(200)).unwrap().into_iter().map(|e| (e.action, e.detail)).collect()
}

/// The image builds through the script with no network in its build steps, and its sandboxes answer
/// on 49999 right after create (the first cell waits for the kernel instead of failing), keep state
/// between cells, return matplotlib figures as PNG, and start the runner again when resumed or forked.
#[test]
fn code_interpreter_image_builds_offline_and_answers_from_boot() {
    let server = Server::start();
    import_debian(&server);
    let t0 = Instant::now();
    assert_eq!(run_script(&server, "scripts/code-interpreter-image.sh", &[IMAGE]).trim(), IMAGE);
    eprintln!("code-interpreter image built in {:?}", t0.elapsed());

    let t0 = Instant::now();
    let sb = server.create(&CreateSandbox { image: Some(IMAGE.into()), ..Default::default() });
    let created = t0.elapsed();
    let first = execute(&sb, "x = 6 * 7\nx");
    let first_ms = t0.elapsed();
    eprintln!("create {created:?}; create -> first successful /execute {first_ms:?}");
    assert_eq!(of(&first, "result")[0]["text"], "42", "{first:?}");
    assert!(first_ms < Duration::from_secs(60), "{first_ms:?}");

    let t0 = Instant::now();
    let second = execute(&sb, "x + 1");
    eprintln!("a cell in a warm context (exec + HTTP + kernel) {:?}", t0.elapsed());
    assert_eq!(of(&second, "result")[0]["text"], "43", "{second:?}");

    let plot = execute(
        &sb,
        "import matplotlib.pyplot as plt, numpy as np, pandas as pd, base64\n\
         plt.plot(np.arange(3), pd.Series([3, 1, 2]))\nplt.show()",
    );
    let png = of(&plot, "result").into_iter().find_map(|r| r["png"].as_str()).unwrap_or_else(|| panic!("{plot:?}"));
    // Decoded by the image's own python (the PNG signature and the IHDR size, 640x480 trimmed by the
    // inline backend's tight bounding box).
    let check = "import base64, sys; raw = base64.b64decode(sys.stdin.read()); \
                 print(raw[:8] == bytes.fromhex('89504e470d0a1a0a'), int.from_bytes(raw[16:20], 'big') > 300)";
    let req = ExecRequest {
        argv: Some(vec!["python3".into(), "-c".into(), check.into()]),
        stdin: Some(png.to_string()),
        ..Default::default()
    };
    assert_eq!(sb.exec(&req).unwrap().stdout, "True True\n");

    // Who started it, as whom, audited.
    let audit = audit_actions(&server, sb.id());
    let starts: Vec<_> = audit.iter().filter(|(a, _)| a == "sandbox.start_command").collect();
    assert_eq!(starts.len(), 1, "{audit:?}");
    assert_eq!(starts[0].1["tag"], "sandlot.start");
    assert_eq!(starts[0].1["user"], "root", "the image runs its runner as root (sandlot.start.user)");
    // The runner is a process of its own, found by its tag (envd's Connect by tag, List).
    let tagged = sb.processes_tagged("sandlot.start").unwrap();
    assert_eq!(tagged.len(), 1, "{tagged:?}");
    assert!(tagged[0].running && tagged[0].tag.as_deref() == Some("sandlot.start"), "{tagged:?}");

    // A resume is a boot: the runner starts again (a fresh kernel: the state is gone).
    sb.stop().unwrap();
    sb.resume().unwrap();
    let after = execute(&sb, "x");
    assert_eq!(of(&after, "error")[0]["name"], "NameError", "{after:?}");
    let starts = audit_actions(&server, sb.id()).into_iter().filter(|(a, _)| a == "sandbox.start_command").count();
    assert_eq!(starts, 2);

    // A fork boots too: its runner answers on its own 49999.
    let forks = sb.fork(1).unwrap();
    let forked = execute(&forks[0], "'forked'");
    assert_eq!(of(&forked, "result")[0]["text"], "forked", "{forked:?}");
    let starts =
        audit_actions(&server, forks[0].id()).into_iter().filter(|(a, _)| a == "sandbox.start_command").count();
    assert_eq!(starts, 1);
    forks[0].delete().unwrap();
    sb.delete().unwrap();
}

/// A start command that fails does not fail the create: the sandbox runs, and the audit says what
/// happened and where its output is.
#[test]
fn a_failing_start_command_is_audited_and_the_sandbox_runs() {
    let server = Server::start();
    import_debian(&server);
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        "FROM debian:bookworm\nLABEL sandlot.start=\"echo starting >&2; exit 3\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .args(["image", "build", "-t", "failing-start", ctx.path().to_str().unwrap()])
        .env("SANDLOT_URL", server.url())
        .env("SANDLOT_API_KEY", server.admin_key())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sb = server.create(&CreateSandbox { image: Some("failing-start".into()), ..Default::default() });
    assert_eq!(sb.shell("echo up").unwrap().stdout, "up\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    let failed = loop {
        let audit = audit_actions(&server, sb.id());
        if let Some((_, d)) = audit.iter().find(|(a, _)| a == "sandbox.start_command_failed") {
            break d.clone();
        }
        assert!(Instant::now() < deadline, "no sandbox.start_command_failed row: {audit:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(failed["exit_code"], 3, "{failed}");
    assert_eq!(failed["tag"], "sandlot.start");
    assert!(failed["logs"].as_str().unwrap().contains("/logs"), "{failed}");
    sb.delete().unwrap();
}

/// `sandlot.start.user` runs the start command as the user it names (here the sandbox's root, while
/// the image's user stays `user` for everything else), audited as such; a value other than `user` or
/// `root` starts nothing and says why.
#[test]
fn the_start_user_label_names_who_runs_the_start_command() {
    let server = Server::start();
    import_debian(&server);
    let build = |name: &str, user: &str| {
        let ctx = tempfile::tempdir().unwrap();
        let dockerfile = format!(
            "FROM debian:bookworm\nUSER user\nLABEL sandlot.start=\"id -u > /tmp/start-uid; exec sleep 600\"\n\
             LABEL sandlot.start.user=\"{user}\"\n"
        );
        std::fs::write(ctx.path().join("Dockerfile"), dockerfile).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_sandlot"))
            .args(["image", "build", "-t", name, ctx.path().to_str().unwrap()])
            .env("SANDLOT_URL", server.url())
            .env("SANDLOT_API_KEY", server.admin_key())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    build("start-as-root", "root");
    build("start-as-nobody", "nobody");

    let sb = server.create(&CreateSandbox { image: Some("start-as-root".into()), ..Default::default() });
    let deadline = Instant::now() + Duration::from_secs(10);
    while sb.shell("test -s /tmp/start-uid").unwrap().exit_code != 0 {
        assert!(Instant::now() < deadline, "the start command wrote nothing");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(sb.shell("cat /tmp/start-uid").unwrap().stdout, "0\n");
    assert_eq!(sb.shell("id -u").unwrap().stdout, "1000\n", "other commands still run as the image's user");
    let audit = audit_actions(&server, sb.id());
    let start = audit.iter().find(|(a, _)| a == "sandbox.start_command").unwrap_or_else(|| panic!("{audit:?}"));
    assert_eq!(start.1["user"], "root", "{audit:?}");
    sb.delete().unwrap();

    let sb = server.create(&CreateSandbox { image: Some("start-as-nobody".into()), ..Default::default() });
    let audit = audit_actions(&server, sb.id());
    let failed = audit.iter().find(|(a, _)| a == "sandbox.start_command_failed").unwrap_or_else(|| panic!("{audit:?}"));
    let reason = failed.1["reason"].as_str().unwrap();
    assert!(reason.contains("sandlot.start.user") && reason.contains("\"nobody\""), "{reason}");
    assert!(!audit.iter().any(|(a, _)| a == "sandbox.start_command"), "{audit:?}");
    assert_eq!(sb.shell("test -e /tmp/start-uid").unwrap().exit_code, 1);
    sb.delete().unwrap();
}
