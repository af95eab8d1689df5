//! `sandlot sandbox metrics ID`: a sandbox's recent samples as a table or JSON.

use sandlot_client::api::{MetricsSample, SandboxSamples};

use super::output::{now_ms, print_json, print_table, utc_time};
use super::{Conn, Doing};

pub(super) const METRICS_LONG: &str = "\
Show a sandbox's recent metrics samples, oldest first: CPU (percent of its limit, time throttled), \
memory (now and peak), processes, writable-layer bytes, network bytes and TCP connections, and OOM \
kills. The server samples every running sandbox every few seconds (`serve --metrics-interval-s`) and \
keeps an hour of samples (`--metrics-window-s`); counters count from the sandbox's last start.

--since takes Unix milliseconds or a time ago: 30s, 10m, 2h.

Examples:
  sandlot sandbox metrics sb_123
  sandlot sandbox metrics sb_123 --since 5m
  sandlot sandbox metrics sb_123 --json | jq '.samples[-1].memory_bytes'";

/// Arguments of `sandlot sandbox metrics`.
#[derive(clap::Args, Debug)]
pub struct MetricsArgs {
    /// Sandbox id.
    id: String,
    /// Only samples after this: Unix milliseconds, or a time ago (30s, 10m, 2h).
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    since: Option<Since>,
    /// Print the server's answer as JSON (limits, interval, samples) instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(super) conn: Conn,
}

/// `--since`: an instant, or a time before the command runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Since {
    At(i64),
    Ago(i64),
}

fn parse_since(s: &str) -> Result<Since, String> {
    let bad = || format!("{s:?}: give Unix milliseconds (1767225600000) or a time ago (30s, 10m, 2h, 1d)");
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(Since::At(ms));
    }
    let unit = match s.chars().last() {
        Some('s') => 1_000,
        Some('m') => 60_000,
        Some('h') => 3_600_000,
        Some('d') => 86_400_000,
        _ => return Err(bad()),
    };
    let n: i64 = s[..s.len() - 1].parse().map_err(|_| bad())?;
    if n < 0 {
        return Err(bad());
    }
    Ok(Since::Ago(n.saturating_mul(unit)))
}

pub(super) fn metrics(args: MetricsArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    let since = args.since.map(|s| match s {
        Since::At(ms) => ms,
        Since::Ago(ms) => now_ms() - ms,
    });
    let got = client.sandbox(&args.id).metrics(since).doing(&format!("getting the metrics of sandbox {}", args.id))?;
    if args.json {
        print_json(&got)?;
        return Ok(0);
    }
    print!("{}", header(&got));
    let rows: Vec<Vec<String>> = got.samples.iter().map(row).collect();
    if rows.is_empty() {
        println!("no samples{}", if got.state.as_str() == "running" { " yet" } else { " (not running)" });
        return Ok(0);
    }
    print_table(
        &["TIME", "CPU%", "THROTTLED", "MEM(MB)", "PEAK(MB)", "PIDS", "DISK(MB)", "NET OUT", "NET IN", "CONNS", "OOM"],
        &rows,
    )?;
    Ok(0)
}

fn header(s: &SandboxSamples) -> String {
    let l = &s.limits;
    let disk = l.disk_bytes.map_or("none".to_string(), |b| format!("{} MB", b >> 20));
    format!(
        "{} ({}): limits {} cpu, {} MB memory, {} pids, disk {disk}; a sample every {} s, {} s kept\n",
        s.id,
        s.state.as_str(),
        l.cpu,
        l.memory_bytes >> 20,
        l.pids,
        s.interval_ms / 1000,
        s.window_s
    )
}

fn mb(v: Option<u64>) -> String {
    v.map_or("-".into(), |b| format!("{:.1}", b as f64 / (1 << 20) as f64))
}

fn num(v: Option<u64>) -> String {
    v.map_or("-".into(), |n| n.to_string())
}

fn bytes(n: u64) -> String {
    match n {
        0..=9_999 => format!("{n}B"),
        10_000..=9_999_999 => format!("{}K", n >> 10),
        _ => format!("{}M", n >> 20),
    }
}

fn row(s: &MetricsSample) -> Vec<String> {
    vec![
        utc_time(s.at_ms),
        s.cpu_used_pct.map_or("-".into(), |p| format!("{p:.1}")),
        s.cpu_throttled_usec.map_or("-".into(), |u| format!("{:.1}s", u as f64 / 1e6)),
        mb(s.memory_bytes),
        mb(s.memory_peak_bytes),
        num(s.pids),
        mb(s.disk_used_bytes),
        bytes(s.net_bytes_out_total),
        bytes(s.net_bytes_in_total),
        format!("{}/{}", s.net_connections, s.net_connections_total),
        num(s.oom_kills_total),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_milliseconds_or_a_time_ago() {
        assert_eq!(parse_since("1767225600000"), Ok(Since::At(1_767_225_600_000)));
        assert_eq!(parse_since("30s"), Ok(Since::Ago(30_000)));
        assert_eq!(parse_since("10m"), Ok(Since::Ago(600_000)));
        assert_eq!(parse_since("2h"), Ok(Since::Ago(7_200_000)));
        assert!(parse_since("yesterday").unwrap_err().contains("Unix milliseconds"));
        assert!(parse_since("-5m").is_err());
        assert!(parse_since("m").is_err());
    }

    #[test]
    fn a_row_shows_unknown_figures_as_dashes() {
        let s =
            MetricsSample { at_ms: 0, memory_bytes: Some(3 << 20), net_bytes_in_total: 20_000, ..Default::default() };
        let r = row(&s);
        assert_eq!(r[0], "1970-01-01T00:00:00Z");
        assert_eq!((r[1].as_str(), r[3].as_str(), r[5].as_str(), r[8].as_str()), ("-", "3.0", "-", "19K"));
    }
}
