//! `lifecycle`: delete, pause/stop→resume, snapshot and fork.

use std::time::{Duration, Instant};

use sandlot_client::api::{CreateSandbox, ExecRequest};
use sandlot_client::Client;

use super::report::{figure, Figure};

/// Delete, then the transitions of one persistent sandbox; at most 50 samples each.
pub(super) fn figures(client: &Client, n: usize) -> anyhow::Result<Vec<Figure>> {
    let deletes = (0..n.min(50))
        .map(|_| {
            let sb = client.create(&CreateSandbox::default())?;
            let t0 = Instant::now();
            sb.delete().map(|_| t0.elapsed()).map_err(anyhow::Error::from)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut figures = vec![figure("sandlot delete", 1, deletes)];
    figures.extend(lifecycle(client, n.min(50))?);
    Ok(figures)
}

fn timed(f: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    f()?;
    Ok(t0.elapsed())
}

/// Pause→resume→first exec, stop→resume→first exec, snapshot of a 100 MiB tree, fork of 10.
fn lifecycle(client: &Client, n: usize) -> anyhow::Result<Vec<Figure>> {
    let spec = CreateSandbox { persistent: Some(true), ..Default::default() };
    let sb = client.create(&spec)?;
    let t = ExecRequest { argv: Some(vec!["/bin/true".into()]), ..Default::default() };
    let mut pause = Vec::new();
    let mut stop = Vec::new();
    for _ in 0..n {
        sb.pause()?;
        pause.push(timed(|| {
            sb.resume()?;
            sb.exec(&t)?;
            Ok(())
        })?);
    }
    for _ in 0..n.min(20) {
        sb.stop()?;
        stop.push(timed(|| {
            sb.resume()?;
            sb.exec(&t)?;
            Ok(())
        })?);
    }
    // 100 files of 1 MiB.
    let fill = ExecRequest {
        shell: Some(
            "mkdir -p ~/tree && for i in $(seq 100); do head -c 1048576 /dev/urandom > ~/tree/f$i; done".into(),
        ),
        timeout_s: Some(120.0),
        ..Default::default()
    };
    sb.exec(&fill)?;
    let mut snaps = Vec::new();
    let mut snapshot_ids = Vec::new();
    for _ in 0..5 {
        snaps.push(timed(|| {
            snapshot_ids.push(sb.snapshot(None)?.id);
            Ok(())
        })?);
    }
    for id in snapshot_ids {
        client.delete_snapshot(&id)?;
    }
    let mut forks = Vec::new();
    for _ in 0..3 {
        let mut copies = Vec::new();
        forks.push(timed(|| {
            copies = sb.fork(10)?;
            Ok(())
        })?);
        for c in copies {
            c.delete()?;
        }
    }
    sb.delete()?;
    Ok(vec![
        figure("sandlot pause→resume→first exec", 1, pause),
        figure("sandlot stop→resume→first exec", 1, stop),
        figure("sandlot snapshot of a 100 MiB tree", 1, snaps),
        figure("sandlot fork ×10 (100 MiB tree)", 1, forks),
    ])
}
