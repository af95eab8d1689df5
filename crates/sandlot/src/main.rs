//! `sandlot`: the server (`sandlot serve`) and the command-line client, in one binary.

mod bench;
mod cli;
mod server;

use clap::{Parser, Subcommand};

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
    Serve(server::ServeArgs),
    /// Measure create, exec and delete latency through the API, beside bubblewrap.
    Bench(bench::BenchArgs),
    #[command(flatten)]
    Client(cli::ClientCommand),
}

fn main() {
    // The sandbox side of the driver: this process is pid 1 of a fresh sandbox. It must not start a
    // runtime or parse the CLI; it builds its root and becomes the supervisor.
    if std::env::args().nth(1).as_deref() == Some(sandlot_linux::launch::SUPERVISOR_ARG) {
        supervisor_main();
    }
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Serve(args) => match server::run(args) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("sandlot serve: {e:#}");
                1
            }
        },
        Command::Bench(args) => match bench::run(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("sandlot bench: {e:#}");
                1
            }
        },
        Command::Client(cmd) => match cli::execute(cmd) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("sandlot: {e:#}");
                1
            }
        },
    };
    std::process::exit(code);
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
