//! `baseline`: bubblewrap doing the same work as `start` on this machine.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::parallel;
use super::report::{figure, Figure};

/// bwrap spawn→first output at each of `concurrency`, or none (said on stderr) without bwrap.
pub(super) fn figures(concurrency: &[usize], n: usize) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    if bwrap_available() {
        for &c in concurrency {
            figures.push(figure("bwrap spawn→first output", c, parallel(n, c, bwrap_first_output)?));
        }
    } else {
        eprintln!("bwrap not found: install Debian's bubblewrap for the baseline (apt-get install bubblewrap)");
    }
    Ok(figures)
}

fn bwrap_available() -> bool {
    Command::new("bwrap")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// bwrap over the host /usr with every namespace unshared, to the first byte of `echo`'s output.
fn bwrap_first_output() -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    let mut child = Command::new("bwrap")
        .args(["--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr"])
        .args(["--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64"])
        .args(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--", "/bin/echo", "ready"])
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .context("running bwrap")?;
    let mut byte = [0u8; 1];
    child.stdout.take().expect("piped").read_exact(&mut byte)?;
    let d = t0.elapsed();
    child.wait()?;
    Ok(d)
}
