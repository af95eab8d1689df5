//! `sandlot`: the server (`sandlot serve`) and the command-line client, in one binary.

#![forbid(unsafe_code)]

mod bench;
mod cli;
mod doctor;
#[cfg(test)]
mod layering;
mod mcp;
mod server;

use clap::{CommandFactory, Parser, Subcommand};

/// Self-hosted sandboxes for untrusted code.
///
/// Start a server with `sudo sandlot serve`, then run commands in fresh sandboxes with
/// `sandlot run -- python3 -c 'print(1)'`. The CLI finds the server through SANDLOT_URL
/// (default http://127.0.0.1:7423) and authenticates with SANDLOT_API_KEY.
#[derive(Parser, Debug)]
#[command(name = "sandlot", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the sandlot server: HTTP API, sandbox engine and state store.
    // A later occurrence of an option replaces an earlier one: the command line overrides --config.
    #[command(args_override_self = true, long_about = server::LONG_ABOUT)]
    Serve(server::ServeArgs),
    /// Check this host for what `sandlot serve` needs: one line per feature, with what to do.
    #[command(args_override_self = true, long_about = doctor::LONG_ABOUT)]
    Doctor(doctor::DoctorArgs),
    /// Measure create, exec and delete latency through the API, beside bubblewrap.
    Bench(bench::BenchArgs),
    /// Print the OpenAPI 3.1 document of the HTTP API (what `GET /v1/openapi.json` serves).
    ///
    /// It is generated from the wire types: `sandlot openapi > docs/openapi.json` regenerates the
    /// committed copy, which a test holds to the code.
    Openapi,
    #[command(flatten)]
    Client(cli::ClientCommand),
}

fn main() {
    // The sandbox side of the driver: this process is pid 1 of a fresh sandbox. It must not start a
    // runtime or parse the CLI; it builds its root and becomes the supervisor.
    if std::env::args().nth(1).as_deref() == Some(sandlot_linux::launch::SUPERVISOR_ARG) {
        supervisor_main();
    }
    // The daemon's thaw watchdog (cgroup v1): waits for the daemon to end, then thaws its sandboxes.
    if std::env::args().nth(1).as_deref() == Some(sandlot_linux::cgroup::THAW_WATCHDOG_ARG) {
        let base = std::env::args_os().nth(2).map(std::path::PathBuf::from).unwrap_or_default();
        sandlot_linux::cgroup::thaw_watchdog_main(&base);
    }
    let cli = Cli::parse_from(with_serve_config());
    let code = match cli.command {
        Command::Serve(args) => match server::run(args) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("sandlot serve: {}", error_text(&e));
                1
            }
        },
        Command::Doctor(args) => match doctor::run(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("sandlot doctor: {}", error_text(&e));
                1
            }
        },
        Command::Bench(args) => match bench::run(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("sandlot bench: {}", error_text(&e));
                1
            }
        },
        Command::Openapi => {
            print!("{}", server::openapi::text());
            0
        }
        Command::Client(cmd) => match cli::execute(cmd) {
            Ok(code) => code,
            Err(e) => {
                // The server's messages can quote what a sandbox chose (file names, argv).
                eprintln!("sandlot: {}", cli::sanitize_text(&error_text(&e)));
                1
            }
        },
    };
    std::process::exit(code);
}

/// An error and its causes on one line, like anyhow's `{:#}`, but a cause whose text the message
/// already carries is not repeated: engine errors such as `host: {0}` show their source in their own
/// text, and `{:#}` printed every such cause twice.
pub(crate) fn error_text(err: &anyhow::Error) -> String {
    let mut text = err.to_string();
    for cause in err.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

/// The process's arguments, with the options of `sandlot serve`'s config file (if any) spliced in
/// (for `serve`, and for `doctor`, which takes the same options).
fn with_serve_config() -> Vec<std::ffi::OsString> {
    let serve = Cli::command();
    let known: Vec<String> = serve
        .find_subcommand("serve")
        .map(|s| s.get_arguments().filter_map(|a| a.get_long().map(str::to_string)).collect())
        .unwrap_or_default();
    match server::config::with_config_file(std::env::args_os().collect(), &known) {
        Ok(args) => args,
        Err(e) => {
            let command = std::env::args().nth(1).unwrap_or_default();
            eprintln!("sandlot {command}: config file {e}");
            std::process::exit(2);
        }
    }
}

fn supervisor_main() -> ! {
    let spec = match sandlot_linux::container::read_spec() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sandlot supervisor: reading the container spec: {e}");
            std::process::exit(64);
        }
    };
    if let Err(e) = sandlot_linux::container::enter(&spec) {
        eprintln!("{e}");
        std::process::exit(71);
    }
    let work_cgroup_fds = (0..spec.work_cgroup_fds as i32).map(|i| sandlot_linux::WORK_CGROUP_FD + i).collect();
    sandlot_supervisor::run(sandlot_supervisor::Options {
        seccomp: spec.layers.seccomp,
        work_cgroup_fds,
        max_file_bytes: spec.max_file_bytes,
    })
}

/// Locks `m`, going on with the data of a holder that panicked: every value kept under these locks
/// (the listener's open-connection counts, the bench's samples) is whole after each statement, so a
/// panic elsewhere never leaves it half-changed.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that shows its source in its own text, as the engine's `host: {0}` errors do.
    #[derive(Debug)]
    struct Wraps(std::io::Error);

    impl std::fmt::Display for Wraps {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "host: {}", self.0)
        }
    }

    impl std::error::Error for Wraps {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let inner = std::io::Error::other("mounting the layers volume: bad superblock");
        let err = anyhow::Error::from(Wraps(inner)).context("starting the sandbox engine");
        assert_eq!(error_text(&err), "starting the sandbox engine: host: mounting the layers volume: bad superblock");
        let plain = anyhow::anyhow!("no such file").context("reading the config");
        assert_eq!(error_text(&plain), "reading the config: no such file");
    }

    #[test]
    fn the_command_line_overrides_the_config_file_and_lists_add_up() {
        let cli = Cli::try_parse_from([
            "sandlot",
            "serve",
            "--listen",
            "127.0.0.1:9",
            "--resolve",
            "a.test=10.0.0.1",
            "--no-disk-quota",
            "--listen",
            "127.0.0.1:10",
            "--resolve",
            "b.test=10.0.0.2",
            "--no-disk-quota",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command else { panic!("not serve") };
        assert_eq!(args.listen, "127.0.0.1:10".parse().unwrap());
        assert_eq!(args.resolve, ["a.test=10.0.0.1", "b.test=10.0.0.2"]);
        assert!(args.no_disk_quota);
    }
}
