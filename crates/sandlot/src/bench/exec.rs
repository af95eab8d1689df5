//! `exec`: the exec round trip in a running sandbox, and a file download through the API.

use std::time::Instant;

use sandlot_client::api::{CreateSandbox, ExecRequest};
use sandlot_client::Client;

use super::report::{figure, Figure};

/// Exec round trip (`n` samples) and 64 MiB download (at most 20), in one sandbox.
pub(super) fn figures(client: &Client, n: usize) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    let sb = client.create(&CreateSandbox::default())?;
    let t = ExecRequest { argv: Some(vec!["/bin/true".into()]), ..Default::default() };
    let samples = (0..n)
        .map(|_| {
            let t0 = Instant::now();
            sb.exec(&t).map(|_| t0.elapsed())
        })
        .collect::<Result<Vec<_>, _>>()?;
    figures.push(figure("sandlot exec round trip (/bin/true)", 1, samples));
    // A file out of the sandbox through the API: supervisor read, credit-windowed frames, HTTP.
    let fill = "head -c 67108864 /dev/zero > /home/user/blob";
    sb.exec(&ExecRequest { shell: Some(fill.into()), ..Default::default() })?;
    let samples = (0..n.min(20))
        .map(|_| {
            let t0 = Instant::now();
            sb.read_file_to("/home/user/blob", std::io::sink()).map(|_| t0.elapsed())
        })
        .collect::<Result<Vec<_>, _>>()?;
    figures.push(figure("sandlot 64 MiB file download (API)", 1, samples));
    sb.delete()?;
    Ok(figures)
}
