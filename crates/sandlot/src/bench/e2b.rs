//! `e2b`: the official E2B Python SDK against this server (`resources/bench/e2b_bench.py`, run with
//! `--e2b-python`), beside the same work through sandlot's own API in the same run: create→first
//! output, create→run→delete, and the command round trip. The native side runs what the SDK's
//! `commands.run` runs (`/bin/bash -l -c CMD`), so the ratio is the SDK's and envd's cost alone.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sandlot_client::api::{CreateSandbox, ExecEvent, ExecRequest};
use sandlot_client::Client;

use super::report::{compared, figure, Figure};

const SCRIPT: &str = include_str!("../../../../resources/bench/e2b_bench.py");

/// Whether `python` can import the E2B SDK; the error says how to get it.
pub(super) fn check_python(python: &Path) -> anyhow::Result<()> {
    let ok = Command::new(python)
        .args(["-c", "import e2b"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        bail!(
            "{} cannot import the e2b SDK: make a venv with `python3 -m venv V && V/bin/pip install -r \
             tests/e2b/requirements.txt` and pass --e2b-python V/bin/python",
            python.display()
        );
    }
    Ok(())
}

/// What the SDK's `commands.run(cmd)` runs: a login bash (E2B's envd convention).
fn login_bash(cmd: &str) -> ExecRequest {
    ExecRequest { argv: Some(vec!["/bin/bash".into(), "-l".into(), "-c".into(), cmd.into()]), ..Default::default() }
}

/// The native twin of the SDK's create→run→kill: create, stream `bash -l -c 'echo hi'` (what the SDK
/// runs), delete. Returns (first stdout, end of delete).
fn native_create_run_delete(client: &Client) -> anyhow::Result<(Duration, Duration)> {
    let t0 = Instant::now();
    let sb = client.create(&CreateSandbox::default())?;
    let mut first = None;
    for ev in sb.exec_stream(&login_bash("echo hi"))? {
        if let ExecEvent::Stdout { .. } = ev? {
            first.get_or_insert_with(|| t0.elapsed());
        }
    }
    sb.delete()?;
    Ok((first.context("echo printed nothing")?, t0.elapsed()))
}

pub(super) fn figures(client: &Client, python: &Path, n: usize) -> anyhow::Result<Vec<Figure>> {
    let e2b_key = sandlot_api::e2b::e2b_api_key(client.api_key());
    let out = Command::new(python)
        .args(["-c", SCRIPT, &n.to_string()])
        .env("E2B_API_URL", format!("{}/e2b", client.url()))
        .env("E2B_SANDBOX_URL", client.url())
        .env("E2B_API_KEY", e2b_key)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", python.display()))?;
    if !out.status.success() {
        bail!("the E2B SDK figures failed ({}); see its output above", out.status);
    }
    let sdk: std::collections::BTreeMap<String, Vec<f64>> =
        serde_json::from_slice(&out.stdout).context("reading the SDK script's figures")?;
    let samples = |name: &str| -> anyhow::Result<Vec<Duration>> {
        let v = sdk.get(name).with_context(|| format!("the SDK script gave no {name:?}"))?;
        Ok(v.iter().map(|ms| Duration::from_secs_f64(ms / 1000.0)).collect())
    };

    let mut native_first = Vec::with_capacity(n);
    let mut native_full = Vec::with_capacity(n);
    for _ in 0..n {
        let (first, full) = native_create_run_delete(client)?;
        native_first.push(first);
        native_full.push(full);
    }
    let sb = client.create(&CreateSandbox::default())?;
    let t = login_bash("true");
    let native_rt = (0..n)
        .map(|_| {
            let t0 = Instant::now();
            sb.exec(&t).map(|_| t0.elapsed())
        })
        .collect::<Result<Vec<_>, _>>()?;
    sb.delete()?;

    let native_first = figure("sandlot API create→first output (bash -l)", 1, native_first);
    let native_full = figure("sandlot API create→exec(bash -l)→delete", 1, native_full);
    let native_rt = figure("sandlot API exec round trip (bash -l)", 1, native_rt);
    let sdk_first =
        compared(figure("e2b SDK create→first output", 1, samples("e2b SDK create→first output")?), &native_first);
    let sdk_full =
        compared(figure("e2b SDK create→run(echo)→kill", 1, samples("e2b SDK create→run(echo)→kill")?), &native_full);
    let sdk_rt = compared(
        figure("e2b SDK command round trip (true)", 1, samples("e2b SDK command round trip (true)")?),
        &native_rt,
    );
    Ok(vec![native_first, sdk_first, native_full, sdk_full, native_rt, sdk_rt])
}
