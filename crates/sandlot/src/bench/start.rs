//! `start`: create→first output through the API, at each concurrency level.

use std::time::{Duration, Instant};

use anyhow::Context;
use sandlot_client::api::{CreateSandbox, ExecEvent, ExecRequest};
use sandlot_client::Client;

use super::parallel;
use super::report::{figure, Figure};

/// Create→first output at each of `concurrency`, `n` samples each.
pub(super) fn figures(client: &Client, concurrency: &[usize], n: usize) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    for &c in concurrency {
        let cl = client.clone();
        figures.push(figure("sandlot create→first output", c, parallel(n, c, move || create_to_first_output(&cl))?));
    }
    Ok(figures)
}

fn echo_request() -> ExecRequest {
    ExecRequest { argv: Some(vec!["/bin/echo".into(), "ready".into()]), ..Default::default() }
}

/// [`create_to_first_output_from`] the default image (`host`).
pub(super) fn create_to_first_output(client: &Client) -> anyhow::Result<Duration> {
    create_to_first_output_from(client, None)
}

/// Create a sandbox of `image` (`None`: the server's default), stream `echo ready`, stop the clock at
/// the first stdout event; delete untimed.
pub(super) fn create_to_first_output_from(client: &Client, image: Option<&str>) -> anyhow::Result<Duration> {
    let spec = CreateSandbox { image: image.map(str::to_owned), ..Default::default() };
    let t0 = Instant::now();
    let sb = client.create(&spec)?;
    let mut first = None;
    for ev in sb.exec_stream(&echo_request())? {
        if let ExecEvent::Stdout { .. } = ev? {
            first.get_or_insert_with(|| t0.elapsed());
        }
    }
    sb.delete()?;
    first.context("the command printed nothing")
}
