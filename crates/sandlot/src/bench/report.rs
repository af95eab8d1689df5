//! Figures: percentiles of a group's samples, printed as a table or as JSON.

use std::time::Duration;

#[derive(serde::Serialize)]
pub(super) struct Figure {
    pub(super) name: String,
    pub(super) concurrency: usize,
    pub(super) samples: usize,
    pub(super) p50_ms: f64,
    pub(super) p90_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) mean_ms: f64,
    /// This figure over a baseline measured in the same run, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) vs: Option<Ratio>,
}

/// A figure's percentiles divided by its baseline's (below 1: faster than the baseline).
#[derive(serde::Serialize)]
pub(super) struct Ratio {
    pub(super) baseline: String,
    pub(super) p50: f64,
    pub(super) p90: f64,
}

pub(super) fn figure(name: &str, concurrency: usize, mut samples: Vec<Duration>) -> Figure {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let pct = |p: f64| ms(samples[((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1]);
    let mean = samples.iter().map(|d| ms(*d)).sum::<f64>() / samples.len() as f64;
    Figure {
        name: name.into(),
        concurrency,
        samples: samples.len(),
        p50_ms: pct(0.50),
        p90_ms: pct(0.90),
        p99_ms: pct(0.99),
        mean_ms: mean,
        vs: None,
    }
}

/// `f` with its ratio to `baseline` (measured in the same run) attached.
pub(super) fn compared(mut f: Figure, baseline: &Figure) -> Figure {
    f.vs = Some(Ratio {
        baseline: baseline.name.clone(),
        p50: f.p50_ms / baseline.p50_ms,
        p90: f.p90_ms / baseline.p90_ms,
    });
    f
}

/// Prints `figures` as JSON when `json`, else as a table.
pub(super) fn print(figures: &[Figure], json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        println!(
            "{:<48} {:>5} {:>8} {:>9} {:>9} {:>9} {:>9}  ratio p50 / p90",
            "figure", "conc", "samples", "p50 ms", "p90 ms", "p99 ms", "mean ms"
        );
        for f in figures {
            let ratio = f.vs.as_ref().map(|r| format!("  {:.2}× / {:.2}× {}", r.p50, r.p90, r.baseline));
            println!(
                "{:<48} {:>5} {:>8} {:>9.2} {:>9.2} {:>9.2} {:>9.2}{}",
                f.name,
                f.concurrency,
                f.samples,
                f.p50_ms,
                f.p90_ms,
                f.p99_ms,
                f.mean_ms,
                ratio.unwrap_or_default()
            );
        }
    }
    Ok(())
}
