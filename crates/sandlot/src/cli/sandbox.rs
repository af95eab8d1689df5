//! `sandlot sandbox create|ls|info|exec|cp|rm`.

use std::collections::BTreeMap;

use sandlot_client::api::{ProcessList, SandboxInfo, SandboxList};
use sandlot_client::ErrorKind;

use super::cp::{self, CpArgs};
use super::metrics::{metrics, MetricsArgs, METRICS_LONG};
use super::network::{network, NetworkArgs, NetworkCmdArgs, NETWORK_LONG};
use super::output::{now_ms, print_json, print_table, sanitize, shell_quote, short_duration, utc_time};
use super::run::{self, CommandArgs, LimitArgs};
use super::shell;
use super::{client_error_kind, parse_key_value, Conn, Doing};

const CREATE_LONG: &str = "\
Create a sandbox and print its id on stdout (the full description with --json). It lives until \
`sandlot sandbox rm` or until its --timeout passes.

Examples:
  id=$(sandlot sandbox create --memory 512 --timeout 3600 --meta owner=ci)
  id=$(sandlot sandbox create --allow pypi.org --allow files.pythonhosted.org)";

const LS_LONG: &str = "\
List the sandboxes of the key's tenant, newest first.

Examples:
  sandlot sandbox ls
  sandlot sandbox ls --json | jq -r '.sandboxes[].id'";

const INFO_LONG: &str = "\
Show one sandbox: state, image, limits, labels, creation and expiry times.

Example:
  sandlot sandbox info sb_123 --json | jq .state";

const EXEC_LONG: &str = "\
Run a command in an existing sandbox, streaming its output; sandlot exits with the command's exit \
code (124 on --timeout, 137 when out of memory, 128+N for signal N). With --json, wait and print the \
whole result (status, exit code, capped stdout and stderr) as JSON instead.

Examples:
  sandlot sandbox exec sb_123 -- python3 app.py
  sandlot sandbox exec sb_123 --user root --cwd /etc -- cat hostname
  sandlot sandbox exec sb_123 --json -- ls / | jq .stdout";

const PS_LONG: &str = "\
List the processes running in a sandbox: what `exec` started (in the foreground or with -d) and \
what a finished command left running in its process group (a server started with `&` or `nohup`), \
marked with the pid of the command that LEFT it. Those live on until they end or the sandbox does, \
as after `docker exec`; `kill` ends one with its whole group.

Examples:
  sandlot sandbox exec sb_123 -- sh -c 'nohup python3 -m http.server 8000 >/tmp/http.log 2>&1 &'
  sandlot sandbox ps sb_123
  sandlot sandbox ps sb_123 --all --json | jq '.processes[] | select(.left_by)'";

const LOGS_LONG: &str = "\
Print what a process has written so far, stdout to stdout and stderr to stderr (the server keeps the \
head and tail of each stream, up to the command's --max-output). With --follow, keep printing until \
it exits, then exit with its exit code.

Examples:
  pid=$(sandlot sandbox exec -d sb_123 -- python3 train.py)
  sandlot sandbox logs sb_123 $pid --follow";

const KILL_LONG: &str = "\
Send a signal (default TERM) to a process's whole process group: the command and everything it \
started that stayed in its group.

Examples:
  sandlot sandbox kill sb_123 4
  sandlot sandbox kill sb_123 4 --signal KILL";

const CP_LONG: &str = "\
Copy a file between this machine and a sandbox (docker cp style): exactly one of SRC and DST is \
ID:PATH. `-` as the local side means standard input or output. A DST inside the sandbox that ends \
with / or is a directory receives the file under its own name; local file modes are kept.

Directories travel as tar archives with --tar: upload a local .tar file (or - for stdin) and unpack \
it into a sandbox directory, or download a sandbox directory as a .tar file (or - for stdout).

Examples:
  sandlot sandbox cp ./main.py sb_123:/home/user/
  sandlot sandbox cp sb_123:/home/user/out.csv ./out.csv
  tar -C ./project -cf - . | sandlot sandbox cp --tar - sb_123:/home/user/project
  sandlot sandbox cp --tar sb_123:/home/user/project - | tar -xf - -C ./copy";

const RM_LONG: &str = "\
Delete sandboxes: their processes are killed and their files dropped. Prints each deleted id; exits \
with 1 if any could not be deleted.

Example:
  sandlot sandbox rm sb_123 sb_456";

/// `sandlot sandbox …` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum SandboxCmd {
    /// Create a sandbox and print its id.
    #[command(long_about = CREATE_LONG)]
    Create(CreateArgs),
    /// List sandboxes.
    #[command(long_about = LS_LONG, visible_alias = "list")]
    Ls(LsArgs),
    /// Show one sandbox.
    #[command(long_about = INFO_LONG)]
    Info(InfoArgs),
    /// Run a command in a sandbox.
    #[command(long_about = EXEC_LONG)]
    Exec(ExecArgs),
    /// List a sandbox's processes.
    #[command(long_about = PS_LONG)]
    Ps(PsArgs),
    /// Print a process's output.
    #[command(long_about = LOGS_LONG)]
    Logs(LogsArgs),
    /// Send a signal to a process's group.
    #[command(long_about = KILL_LONG)]
    Kill(KillArgs),
    /// Open an interactive terminal (a shell) in a sandbox.
    #[command(long_about = shell::SHELL_LONG)]
    Shell(shell::ShellArgs),
    /// Copy files into or out of a sandbox.
    #[command(long_about = CP_LONG)]
    Cp(CpArgs),
    /// Delete sandboxes.
    #[command(long_about = RM_LONG, visible_alias = "delete")]
    Rm(RmArgs),
    /// Stop a sandbox: processes end, files stay (resume brings it back).
    #[command(long_about = "Stop a sandbox: every process ends, the files stay (synced to disk first).\n\n\
Example:\n  sandlot sandbox stop sb_abc123\n  sandlot sandbox resume sb_abc123")]
    Stop(TransitionArgs),
    /// Resume a stopped or paused sandbox.
    #[command(long_about = "Resume a stopped sandbox (fresh processes on the same files) or a paused one \
(frozen processes continue where they were).\n\nExample:\n  sandlot sandbox resume sb_abc123")]
    Resume(TransitionArgs),
    /// Pause a sandbox: processes frozen in memory, no CPU.
    #[command(long_about = "Pause a sandbox: every process is frozen in memory and uses no CPU until it \
is resumed (by `resume`, or by the next exec when the sandbox has auto-resume).\n\nExample:\n  sandlot sandbox pause sb_abc123")]
    Pause(TransitionArgs),
    /// Snapshot a sandbox's files.
    #[command(long_about = "Take a read-only, copy-on-write snapshot of a sandbox's files. Start new \
sandboxes from it with `sandlot sandbox create --snapshot ID`.\n\nExample:\n  sandlot sandbox snapshot sb_abc123 --name deps-installed")]
    Snapshot(SnapshotArgs),
    /// Make copies of a sandbox.
    #[command(long_about = "Make COUNT new running sandboxes, each with a copy-on-write copy of this one's \
files, and print their ids.\n\nExample:\n  sandlot sandbox fork sb_abc123 --count 4")]
    Fork(ForkArgs),
    /// Expose a server listening inside a sandbox; prints its preview URL.
    #[command(long_about = "Expose a server listening on PORT inside a sandbox and print its preview URL, \
which works over HTTP without an API key (a per-port token is part of it).\n\nExample:\n  \
sandlot sandbox expose sb_abc123 8000")]
    Expose(ExposeArgs),
    /// Show or replace a sandbox's network policy.
    #[command(long_about = NETWORK_LONG)]
    Network(NetworkCmdArgs),
    /// Show a sandbox's recent CPU, memory, process, disk and network samples.
    #[command(long_about = METRICS_LONG)]
    Metrics(MetricsArgs),
    /// List snapshots.
    #[command(
        long_about = "List the snapshots of your tenant, newest first.\n\nExample:\n  sandlot sandbox snapshots --json"
    )]
    Snapshots(LsArgs),
    /// Delete snapshots (sandboxes made from them are unaffected).
    #[command(long_about = "Delete snapshots by id or name. Sandboxes made from a snapshot hold their own \
copy-on-write copies and are unaffected.\n\nExample:\n  sandlot sandbox rm-snapshot deps-installed")]
    RmSnapshot(RmArgs),
}

/// Arguments of `sandlot sandbox stop|resume|pause`.
#[derive(clap::Args, Debug)]
pub struct TransitionArgs {
    /// Sandbox id.
    id: String,
    /// Print the sandbox as JSON afterwards.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot sandbox snapshot`.
#[derive(clap::Args, Debug)]
pub struct SnapshotArgs {
    /// Sandbox id.
    id: String,
    /// Name for the snapshot (usable instead of its id).
    #[arg(long)]
    name: Option<String>,
    /// Print the snapshot as JSON instead of its id.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot sandbox expose`.
#[derive(clap::Args, Debug)]
pub struct ExposeArgs {
    /// Sandbox id.
    id: String,
    /// Port the server listens on inside the sandbox.
    port: u16,
    /// Print JSON (url, token) instead of the URL.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot sandbox fork`.
#[derive(clap::Args, Debug)]
pub struct ForkArgs {
    /// Sandbox id.
    id: String,
    /// Number of copies (1-32).
    #[arg(long, default_value_t = 1)]
    count: u32,
    #[command(flatten)]
    conn: Conn,
}

impl SandboxCmd {
    pub(super) fn conn(&self) -> &Conn {
        match self {
            SandboxCmd::Create(args) => &args.conn,
            SandboxCmd::Ls(args) => &args.conn,
            SandboxCmd::Info(args) => &args.conn,
            SandboxCmd::Exec(args) => &args.conn,
            SandboxCmd::Ps(args) => &args.conn,
            SandboxCmd::Logs(args) => &args.conn,
            SandboxCmd::Kill(args) => &args.conn,
            SandboxCmd::Cp(args) => &args.conn,
            SandboxCmd::Shell(args) => &args.conn,
            SandboxCmd::Rm(args) | SandboxCmd::RmSnapshot(args) => &args.conn,
            SandboxCmd::Stop(args) | SandboxCmd::Resume(args) | SandboxCmd::Pause(args) => &args.conn,
            SandboxCmd::Snapshot(args) => &args.conn,
            SandboxCmd::Fork(args) => &args.conn,
            SandboxCmd::Expose(args) => &args.conn,
            SandboxCmd::Network(args) => &args.conn,
            SandboxCmd::Metrics(args) => &args.conn,
            SandboxCmd::Snapshots(args) => &args.conn,
        }
    }
}

/// Arguments of `sandlot sandbox create`.
#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    // Field order is help order: a flattened group's heading also covers the fields after it.
    /// Print the created sandbox as JSON instead of its id.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    limits: LimitArgs,
    /// Lifetime in seconds; the sandbox is deleted when it passes (default: the server's).
    #[arg(long, value_name = "S", help_heading = "Sandbox")]
    timeout: Option<u64>,
    /// Environment variable for every command in the sandbox (repeatable).
    #[arg(long, short = 'e', value_name = "K=V", value_parser = parse_key_value, help_heading = "Sandbox")]
    env: Vec<(String, String)>,
    /// Label returned as given, e.g. owner=ci (repeatable).
    #[arg(long, value_name = "K=V", value_parser = parse_key_value, help_heading = "Sandbox")]
    meta: Vec<(String, String)>,
    /// Name, unique among your live sandboxes.
    #[arg(long, help_heading = "Sandbox")]
    name: Option<String>,
    /// Keep it (and its files) across stop, expiry and server restarts.
    #[arg(long, help_heading = "Sandbox")]
    persistent: bool,
    /// With --name: reuse (and resume) the existing sandbox of that name.
    #[arg(long, help_heading = "Sandbox")]
    get_or_create: bool,
    /// Start from a snapshot's files (id or name).
    #[arg(long, value_name = "SNAPSHOT", help_heading = "Sandbox")]
    snapshot: Option<String>,
    /// End the sandbox after this many seconds without API calls or process output.
    #[arg(long, value_name = "S", help_heading = "Sandbox")]
    idle_timeout: Option<u64>,
    #[command(flatten)]
    net: NetworkArgs,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot sandbox ls`.
#[derive(clap::Args, Debug)]
pub struct LsArgs {
    /// Print JSON (`{"sandboxes": [...]}`) instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot sandbox info`.
#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    /// Sandbox id.
    id: String,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot sandbox exec`.
#[derive(clap::Args, Debug)]
pub struct ExecArgs {
    /// Sandbox id.
    id: String,
    /// The command and its arguments (use `--` before a command that starts with `-`).
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<String>,
    /// Wait for the command and print its result as JSON instead of streaming its output.
    #[arg(long, conflicts_with = "background")]
    json: bool,
    /// Start it in the background and print its process id at once (see `ps`, `logs`, `kill`).
    #[arg(long, short = 'd')]
    background: bool,
    #[command(flatten)]
    exec: CommandArgs,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot sandbox ps`.
#[derive(clap::Args, Debug)]
pub struct PsArgs {
    /// Sandbox id.
    id: String,
    /// Also list processes that have ended (the server remembers the last 1024).
    #[arg(long, short = 'a')]
    all: bool,
    /// Print the list as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot sandbox logs`.
#[derive(clap::Args, Debug)]
pub struct LogsArgs {
    /// Sandbox id.
    id: String,
    /// Process id (as `exec -d` or `ps` gives it).
    pid: u64,
    /// Keep printing output as it comes until the process exits.
    #[arg(long, short = 'f')]
    follow: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot sandbox kill`.
#[derive(clap::Args, Debug)]
pub struct KillArgs {
    /// Sandbox id.
    id: String,
    /// Process id (as `exec -d` or `ps` gives it).
    pid: u64,
    /// Signal, by name or number.
    #[arg(long, short = 's', default_value = "TERM")]
    signal: String,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot sandbox rm`.
#[derive(clap::Args, Debug)]
pub struct RmArgs {
    /// Sandbox ids.
    #[arg(required = true, value_name = "ID")]
    ids: Vec<String>,
    #[command(flatten)]
    conn: Conn,
}

pub(super) fn execute(cmd: SandboxCmd) -> anyhow::Result<i32> {
    match cmd {
        SandboxCmd::Create(args) => create(args),
        SandboxCmd::Ls(args) => ls(args),
        SandboxCmd::Info(args) => info(args),
        SandboxCmd::Exec(args) => exec(args),
        SandboxCmd::Ps(args) => ps(args),
        SandboxCmd::Logs(args) => logs(args),
        SandboxCmd::Kill(args) => kill(args),
        SandboxCmd::Cp(args) => cp::cp(args),
        SandboxCmd::Shell(args) => shell::shell(args),
        SandboxCmd::Rm(args) => rm(args),
        SandboxCmd::Stop(args) => transition(args, "stop"),
        SandboxCmd::Resume(args) => transition(args, "resume"),
        SandboxCmd::Pause(args) => transition(args, "pause"),
        SandboxCmd::Snapshot(args) => snapshot(args),
        SandboxCmd::Fork(args) => fork(args),
        SandboxCmd::Expose(args) => expose(args),
        SandboxCmd::Network(args) => network(args),
        SandboxCmd::Metrics(args) => metrics(args),
        SandboxCmd::Snapshots(args) => snapshots(args),
        SandboxCmd::RmSnapshot(args) => rm_snapshots(args),
    }
}

fn create(args: CreateArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    let mut spec = args.limits.spec();
    spec.timeout_s = args.timeout;
    spec.env = args.env.into_iter().collect();
    spec.metadata = args.meta.into_iter().collect();
    spec.name = args.name;
    spec.persistent = args.persistent.then_some(true);
    spec.get_or_create = args.get_or_create;
    spec.snapshot = args.snapshot;
    spec.idle_timeout_s = args.idle_timeout;
    spec.network = args.net.spec()?;
    let sandbox = client.create(&spec).doing("creating a sandbox")?;
    match sandbox.created() {
        Some(info) if args.json => print_json(info)?,
        _ => println!("{}", sandbox.id()),
    }
    Ok(0)
}

fn transition(args: TransitionArgs, what: &str) -> anyhow::Result<i32> {
    let sandbox = args.conn.client()?.sandbox(&args.id);
    let info = match what {
        "stop" => sandbox.stop(),
        "resume" => sandbox.resume(),
        _ => sandbox.pause(),
    }
    .doing(&format!("{what} of sandbox {}", args.id))?;
    if args.json {
        print_json(&info)?;
    } else {
        println!("{} {}", info.id, info.state.as_str());
    }
    Ok(0)
}

fn snapshot(args: SnapshotArgs) -> anyhow::Result<i32> {
    let sandbox = args.conn.client()?.sandbox(&args.id);
    let snap = sandbox.snapshot(args.name.as_deref()).doing(&format!("snapshotting sandbox {}", args.id))?;
    if args.json {
        print_json(&snap)?;
    } else {
        println!("{}", snap.id);
    }
    Ok(0)
}

fn fork(args: ForkArgs) -> anyhow::Result<i32> {
    let sandbox = args.conn.client()?.sandbox(&args.id);
    for copy in sandbox.fork(args.count).doing(&format!("forking sandbox {}", args.id))? {
        println!("{}", copy.id());
    }
    Ok(0)
}

fn expose(args: ExposeArgs) -> anyhow::Result<i32> {
    let sandbox = args.conn.client()?.sandbox(&args.id);
    let port = sandbox.expose_port(args.port).doing(&format!("exposing port {} of {}", args.port, args.id))?;
    if args.json {
        print_json(&port)?;
    } else {
        println!("{}", port.url);
    }
    Ok(0)
}

fn snapshots(args: LsArgs) -> anyhow::Result<i32> {
    let snapshots = args.conn.client()?.snapshots().doing("listing snapshots")?;
    if args.json {
        print_json(&sandlot_client::api::SnapshotList { snapshots })?;
        return Ok(0);
    }
    let now = now_ms();
    let rows: Vec<Vec<String>> = snapshots
        .iter()
        .map(|s| {
            vec![
                s.id.clone(),
                s.name.clone().unwrap_or_else(|| "-".into()),
                s.sandbox_id.clone(),
                short_duration(now - s.created_at_ms),
            ]
        })
        .collect();
    print_table(&["ID", "NAME", "FROM", "AGE"], &rows)?;
    Ok(0)
}

fn rm_snapshots(args: RmArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    let mut code = 0;
    for id in &args.ids {
        match client.delete_snapshot(id) {
            Ok(()) => println!("{id}"),
            Err(e) => {
                eprintln!("sandlot: deleting snapshot {id}: {e}");
                code = 1;
            }
        }
    }
    Ok(code)
}

fn ls(args: LsArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    let sandboxes = client.list().doing("listing sandboxes")?;
    if args.json {
        print_json(&SandboxList { sandboxes })?;
        return Ok(0);
    }
    let now = now_ms();
    let rows: Vec<Vec<String>> = sandboxes
        .iter()
        .map(|sb| {
            vec![
                sb.id.clone(),
                sb.state.as_str().to_string(),
                sb.image.clone(),
                sb.limits.cpu.to_string(),
                sb.limits.memory_mb.to_string(),
                short_duration(now - sb.created_at_ms),
            ]
        })
        .collect();
    print_table(&["ID", "STATE", "IMAGE", "CPU", "MEM(MB)", "AGE"], &rows)?;
    Ok(0)
}

fn info(args: InfoArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    let info = client.get(&args.id).doing(&format!("getting sandbox {}", args.id))?;
    if args.json {
        print_json(&info)?;
    } else {
        print!("{}", describe(&info, now_ms()));
    }
    Ok(0)
}

/// `key: value` lines for `sandbox info`.
fn describe(info: &SandboxInfo, now: i64) -> String {
    let mut lines = vec![("id", info.id.clone()), ("state", info.state.as_str().to_string())];
    if let Some(reason) = &info.reason {
        lines.push(("reason", reason.clone()));
    }
    lines.extend([
        ("image", info.image.clone()),
        ("cpu", format!("{} cores", info.limits.cpu)),
        ("memory", format!("{} MiB", info.limits.memory_mb)),
        ("pids", info.limits.pids.to_string()),
        ("lifetime", format!("{} s", info.limits.timeout_s)),
        ("created", format!("{} ({} ago)", utc_time(info.created_at_ms), short_duration(now - info.created_at_ms))),
        ("expires", expiry(info.expires_at_ms, now)),
    ]);
    lines.extend(labels(&info.metadata).map(|label| ("label", label)));
    lines.into_iter().map(|(key, value)| format!("{:<10}{value}\n", format!("{key}:"))).collect()
}

fn expiry(expires_at_ms: i64, now: i64) -> String {
    let when = utc_time(expires_at_ms);
    if expires_at_ms >= now {
        format!("{when} (in {})", short_duration(expires_at_ms - now))
    } else {
        format!("{when} ({} ago)", short_duration(now - expires_at_ms))
    }
}

fn labels(metadata: &BTreeMap<String, String>) -> impl Iterator<Item = String> + '_ {
    metadata.iter().map(|(k, v)| format!("{k}={v}"))
}

fn exec(args: ExecArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    let sandbox = client.sandbox(&args.id);
    let request = args.exec.request(&args.command)?;
    if args.background {
        let pid = sandbox.spawn(&request).doing(&format!("starting the command in {}", args.id))?;
        println!("{pid}");
        return Ok(0);
    }
    if args.json {
        let result = sandbox.exec(&request).doing(&format!("running the command in {}", args.id))?;
        print_json(&result)?;
        return Ok(run::exit_code_of(&result));
    }
    run::stream(&sandbox, &request)
}

fn ps(args: PsArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    let mut processes = client.sandbox(&args.id).processes().doing(&format!("listing the processes of {}", args.id))?;
    if !args.all {
        processes.retain(|p| p.running);
    }
    if args.json {
        print_json(&ProcessList { processes })?;
        return Ok(0);
    }
    let now = now_ms();
    let rows: Vec<Vec<String>> = processes
        .iter()
        .map(|p| {
            let state = match (&p.status, p.exit_code) {
                (None, _) => "running".to_string(),
                (Some(s), Some(code)) => format!("{} ({code})", s.as_str()),
                (Some(s), None) => s.as_str().to_string(),
            };
            vec![
                p.pid.to_string(),
                state,
                short_duration(now - p.started_at_ms),
                p.left_by.map_or_else(|| "-".to_string(), |by| by.to_string()),
                p.tag.clone().unwrap_or_else(|| "-".to_string()),
                sanitize(&shell_words(&p.argv)).into_owned(),
            ]
        })
        .collect();
    print_table(&["PID", "STATE", "AGE", "LEFT BY", "TAG", "COMMAND"], &rows)?;
    Ok(0)
}

/// `argv` as one line, each argument that needs it quoted.
fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty() && a.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@%+".contains(&b)) {
                a.clone()
            } else {
                shell_quote(a)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn logs(args: LogsArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    let sandbox = client.sandbox(&args.id);
    let doing = format!("reading the output of process {} in {}", args.pid, args.id);
    let events = if args.follow { sandbox.logs(args.pid) } else { sandbox.logs_so_far(args.pid) }.doing(&doing)?;
    run::print_events(events, args.follow)
}

fn kill(args: KillArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    let signal = parse_signal(&args.signal)?;
    client
        .sandbox(&args.id)
        .kill_process(args.pid, Some(signal))
        .doing(&format!("signalling process {} in {}", args.pid, args.id))?;
    Ok(0)
}

/// A signal by number or name (`TERM`, `SIGTERM`, `15`).
fn parse_signal(s: &str) -> anyhow::Result<i32> {
    if let Ok(n) = s.parse::<i32>() {
        return Ok(n);
    }
    let name = s.to_ascii_uppercase();
    let name = name.strip_prefix("SIG").unwrap_or(&name);
    Ok(match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        "CONT" => libc::SIGCONT,
        "STOP" => libc::SIGSTOP,
        _ => anyhow::bail!("unknown signal {s:?}: give a number or one of HUP INT QUIT KILL USR1 USR2 TERM CONT STOP"),
    })
}

fn rm(args: RmArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    let mut failed = false;
    for id in &args.ids {
        match client.sandbox(id).delete().doing(&format!("deleting {id}")) {
            Ok(()) => println!("{id}"),
            // Without a server every other id would fail the same way: stop and say so once.
            Err(err) if client_error_kind(&err) == Some(ErrorKind::Connect) => return Err(err),
            Err(err) => {
                eprintln!("sandlot: {}", crate::error_text(&err));
                failed = true;
            }
        }
    }
    Ok(i32::from(failed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandlot_client::api::{Limits, SandboxState};

    #[test]
    fn info_text_lists_every_field() {
        let info = SandboxInfo {
            id: "sb_1".into(),
            state: SandboxState::Running,
            reason: None,
            image: "host".into(),
            limits: Limits { cpu: 0.5, memory_mb: 512, pids: 256, disk_mb: Some(1024), timeout_s: 3600 },
            metadata: BTreeMap::from([("owner".to_string(), "ci".to_string())]),
            created_at_ms: 0,
            expires_at_ms: 3_600_000,
            name: None,
            persistent: false,
            auto_resume: false,
            idle_timeout_s: None,
            on_timeout: sandlot_client::api::TimeoutAction::Delete,
            stop_after_s: 600,
            last_active_at_ms: 0,
            snapshot: None,
            network: Default::default(),
        };
        let text = describe(&info, 60_000);
        assert!(text.starts_with("id:       sb_1\nstate:    running\n"), "{text}");
        assert!(text.contains("cpu:      0.5 cores\n"), "{text}");
        assert!(text.contains("expires:  1970-01-01T01:00:00Z (in 59m)\n"), "{text}");
        assert!(text.contains("label:    owner=ci\n"), "{text}");
    }
}
