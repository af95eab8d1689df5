//! `sandlot doctor`: checks this host for what `sandlot serve` needs and prints what to do.

use sandlot_driver_linux::doctor;

use crate::server::ServeArgs;

/// The long help of `sandlot doctor` (on the subcommand: its one-line doc comment would replace it).
pub const LONG_ABOUT: &str = concat!(
    "Check this host for what `sandlot serve` needs, one line per feature: the verdict, the feature, what ",
    "was found and, under it, what to do.\n\n",
    "  ok        present and usable\n",
    "  degraded  serve starts, warns in its log, and lists it in GET /healthz\n",
    "  missing   serve refuses to start, with the same words\n\n",
    "It reads /proc, /sys and /etc and changes nothing on the host; three probes try the real thing and ",
    "undo it: creating a user namespace and mounting overlayfs in one (in a child that exits at once), and ",
    "loading the socket-lookup BPF program (attached to nothing). Run it as root, as serve runs, and from ",
    "where serve will be started: on cgroup v2 the cgroup it runs in is the one checked.\n\n",
    "It takes every option of `sandlot serve`, and its --config file, since some change what is required ",
    "(--no-disk-quota: no btrfs or loop devices; --max-sandboxes, --default-memory-mb, --default-pids, ",
    "--overcommit: the pid_max and memory checks; --state-dir: where the overlay probe runs).\n\n",
    "Exit status: 0 when nothing required is missing, 1 otherwise.\n\n",
    "Examples:\n",
    "  sudo sandlot doctor\n",
    "  sudo sandlot doctor --config /etc/sandlot/config.toml\n",
    "  sudo sandlot doctor --json | jq '.checks[] | select(.verdict != \"ok\")'",
);

/// Options of `sandlot doctor`: every option of `sandlot serve` (some change what is required), and
/// `--json`.
#[derive(clap::Args, Debug, Clone)]
pub struct DoctorArgs {
    /// Print the report as JSON: `{"ready": bool, "checks": [{"name", "verdict", "found", "fix"}]}`.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// `--json`'s shape: the verdict for serve, then every check (fields in the table's order).
#[derive(serde::Serialize)]
struct JsonReport<'a> {
    ready: bool,
    checks: &'a [doctor::Check],
}

/// Runs the checks and prints them; the exit status.
pub fn run(args: DoctorArgs) -> anyhow::Result<i32> {
    let report = doctor::examine(&args.serve.doctor_options()?);
    let out = if args.json {
        serde_json::to_string(&JsonReport { ready: report.ready(), checks: &report.checks })? + "\n"
    } else {
        let all: Vec<&doctor::Check> = report.checks.iter().collect();
        let missing = report.with(doctor::Verdict::Missing).len();
        let degraded = report.with(doctor::Verdict::Degraded).len();
        let summary = if missing == 0 {
            format!("ready: nothing required is missing ({degraded} degraded); `sandlot serve` will start")
        } else {
            format!(
                "not ready: {missing} required feature(s) missing ({degraded} degraded); `sandlot serve` would \
                 refuse to start"
            )
        };
        format!("{}\n{summary}\n", doctor::table(&all))
    };
    // A reader that stops early (`| head`) is not an error of ours.
    use std::io::Write;
    match std::io::stdout().lock().write_all(out.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(e.into()),
        _ => {}
    }
    Ok(if report.ready() { 0 } else { 1 })
}
