//! `sandlot run`, and the streaming of one command's output shared with `sandlot sandbox exec`.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};

use anyhow::{bail, Context};
use sandlot_client::api::{CreateSandbox, ExecEvent, ExecRequest, ExecResult, ExitStatus};
use sandlot_client::{EventStream, Sandbox};

use super::{parse_key_value, Conn, Doing, UserArg};

/// Exit status of a command killed because its time limit passed (as coreutils `timeout`).
const EXIT_TIMEOUT: i32 = 124;
/// Exit status of a command killed by the kernel's OOM killer (128 + SIGKILL).
const EXIT_OOM: i32 = 137;
/// Exit status when our own stdout is closed (128 + SIGPIPE), as a shell pipeline would report.
const EXIT_BROKEN_PIPE: i32 = 141;
/// Seconds a `run` sandbox outlives the command's own `--timeout`, so the command's limit fires first.
const LIFETIME_MARGIN_S: u64 = 60;

/// Arguments of `sandlot run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    // Field order is help order: a flattened group's heading also covers the fields after it.
    /// The command and its arguments (use `--` before a command that starts with `-`).
    /// Without one, the image's entrypoint and default command run (`--image`).
    #[arg(trailing_var_arg = true, value_name = "CMD")]
    pub(super) command: Vec<String>,
    /// Keep the sandbox after the command ends and print its id on stderr.
    #[arg(long)]
    pub(super) keep: bool,
    #[command(flatten)]
    pub(super) limits: LimitArgs,
    #[command(flatten)]
    pub(super) net: super::network::NetworkArgs,
    #[command(flatten)]
    pub(super) exec: CommandArgs,
    #[command(flatten)]
    pub(super) conn: Conn,
}

/// Resource limits of a new sandbox.
#[derive(clap::Args, Debug)]
#[command(next_help_heading = "Sandbox")]
pub(super) struct LimitArgs {
    /// Image to boot (default: `host`, the host's /usr read-only).
    #[arg(long)]
    pub(super) image: Option<String>,
    /// CPU limit in cores, fractions allowed (e.g. 0.5).
    #[arg(long, value_name = "N")]
    pub(super) cpu: Option<f64>,
    /// Memory limit in MiB.
    #[arg(long, value_name = "MB")]
    pub(super) memory: Option<u64>,
    /// Maximum number of processes and threads.
    #[arg(long, value_name = "N")]
    pub(super) pids: Option<u64>,
}

impl LimitArgs {
    pub(super) fn spec(&self) -> CreateSandbox {
        CreateSandbox {
            image: self.image.clone(),
            cpu: self.cpu,
            memory_mb: self.memory,
            pids: self.pids,
            ..CreateSandbox::default()
        }
    }
}

/// How one command runs.
#[derive(clap::Args, Debug)]
#[command(next_help_heading = "Command")]
pub(super) struct CommandArgs {
    /// Time limit in seconds; when it passes the command is killed and sandlot exits with 124.
    #[arg(long, value_name = "S")]
    pub(super) timeout: Option<f64>,
    /// Environment variable for the command (repeatable).
    #[arg(long, short = 'e', value_name = "K=V", value_parser = parse_key_value)]
    pub(super) env: Vec<(String, String)>,
    /// Who runs the command inside the sandbox [default: the image's USER if it names one, else user].
    #[arg(long, value_enum)]
    pub(super) user: Option<UserArg>,
    /// Working directory inside the sandbox (default: the user's home).
    #[arg(long, value_name = "DIR")]
    pub(super) cwd: Option<String>,
    /// Feed our standard input (UTF-8 text, read to its end first) to the command.
    #[arg(long, short = 'i')]
    pub(super) stdin: bool,
    /// Run the command line with /bin/sh -c (the words of CMD are joined with spaces).
    #[arg(long)]
    pub(super) shell: bool,
}

impl CommandArgs {
    /// The exec request for `command` (read stdin now if asked).
    pub(super) fn request(&self, command: &[String]) -> anyhow::Result<ExecRequest> {
        let stdin = if self.stdin {
            let mut bytes = Vec::new();
            io::stdin().lock().read_to_end(&mut bytes).context("reading standard input")?;
            let text = String::from_utf8(bytes).map_err(|_| {
                anyhow::anyhow!(
                    "standard input is not UTF-8 text; copy binary data in with `sandlot sandbox cp` instead"
                )
            })?;
            Some(text)
        } else {
            None
        };
        let (argv, shell) = if self.shell { (None, Some(command.join(" "))) } else { (Some(command.to_vec()), None) };
        Ok(ExecRequest {
            argv,
            shell,
            cwd: self.cwd.clone(),
            env: self.env.iter().cloned().collect::<BTreeMap<_, _>>(),
            user: self.user.map(Into::into),
            stdin,
            timeout_s: self.timeout,
            ..ExecRequest::default()
        })
    }
}

/// `sandlot run`: create, stream the command, delete (unless `--keep`), exit with its code.
pub(super) fn run(args: RunArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    let command = if args.command.is_empty() {
        image_command(&client, args.limits.image.as_deref())?
    } else {
        args.command.clone()
    };
    let request = args.exec.request(&command)?;
    let mut spec = args.limits.spec();
    spec.network = args.net.spec()?;
    if let Some(timeout) = args.exec.timeout {
        if !(timeout.is_finite() && timeout > 0.0) {
            bail!("--timeout must be a positive number of seconds");
        }
        // Truncation is fine: the margin dwarfs the fraction.
        spec.timeout_s = Some(timeout.ceil() as u64 + LIFETIME_MARGIN_S);
    }
    let sandbox = client.create(&spec).doing("creating a sandbox")?;
    let outcome = stream(&sandbox, &request);
    if args.keep {
        eprintln!("sandlot: kept sandbox {}", sandbox.id());
    } else if let Err(err) = sandbox.delete() {
        eprintln!("sandlot: could not delete sandbox {}: {err}", sandbox.id());
    }
    outcome
}

/// What `sandlot run --image I` runs without a command: the image's entrypoint, then its cmd.
fn image_command(client: &sandlot_client::Client, image: Option<&str>) -> anyhow::Result<Vec<String>> {
    let Some(name) = image else {
        bail!("give a command to run (e.g. `sandlot run -- echo hi`), or an --image whose default command to run");
    };
    let info = client.image(name).doing("reading the image's default command")?;
    let mut argv = info.config.entrypoint.unwrap_or_default();
    argv.extend(info.config.cmd.unwrap_or_default());
    if argv.is_empty() {
        bail!("image {name} has no entrypoint or default command; give one after `--`");
    }
    Ok(argv)
}

/// Runs `request` with its output streamed to ours; returns the exit code to leave with.
pub(super) fn stream(sandbox: &Sandbox, request: &ExecRequest) -> anyhow::Result<i32> {
    let events = sandbox.exec_stream(request).doing("starting the command")?;
    match copy_output(events)? {
        Copied::Exited { status, exit_code, signal } => Ok(finish(sandbox, request, status, exit_code, signal)),
        Copied::BrokenPipe => Ok(EXIT_BROKEN_PIPE),
        // The stream always ends with `exited` or `error`, or yields an error item.
        Copied::Ended => bail!("the command's output stream ended without an exit status"),
    }
}

/// Prints a process's log (`sandbox logs`): with `follow`, until it exits, then its exit code is
/// ours; else what it has written so far, and 0.
pub(super) fn print_events(events: EventStream, follow: bool) -> anyhow::Result<i32> {
    match copy_output(events)? {
        Copied::Exited { status, exit_code, signal } if follow => Ok(exit_code_for(status, exit_code, signal)),
        Copied::BrokenPipe => Ok(EXIT_BROKEN_PIPE),
        Copied::Ended if follow => bail!("the process's output stream ended without an exit status"),
        _ => Ok(0),
    }
}

/// How copying a process's output ended.
enum Copied {
    Exited {
        status: ExitStatus,
        exit_code: i32,
        signal: Option<i32>,
    },
    /// The stream ended without an exit (a log read up to now).
    Ended,
    /// Our stdout or stderr was closed.
    BrokenPipe,
}

/// Copies a process's output events to our stdout and stderr, noting truncation at its exit.
fn copy_output(events: EventStream) -> anyhow::Result<Copied> {
    let mut stdout = io::stdout().lock();
    let mut stderr = io::stderr().lock();
    let mut truncated: Vec<String> = Vec::new();
    for event in events {
        let event = event.doing("streaming the command's output")?;
        let written = match event {
            ExecEvent::Started { .. } => Ok(()),
            ExecEvent::Stdout { data } => write_flush(&mut stdout, &data),
            ExecEvent::Stderr { data } => write_flush(&mut stderr, &data),
            ExecEvent::Truncated { stream } => {
                if !truncated.contains(&stream) {
                    truncated.push(stream);
                }
                Ok(())
            }
            ExecEvent::Exited {
                status,
                exit_code,
                signal,
                stdout_bytes,
                stderr_bytes,
                truncated: was_truncated,
                ..
            } => {
                if was_truncated || !truncated.is_empty() {
                    note_truncated(&truncated, stdout_bytes, stderr_bytes);
                }
                return Ok(Copied::Exited { status, exit_code, signal });
            }
            ExecEvent::Error { code, message } => {
                bail!("the server lost track of the command: {message} ({code})")
            }
        };
        if let Err(err) = written {
            if err.kind() == io::ErrorKind::BrokenPipe {
                return Ok(Copied::BrokenPipe);
            }
            return Err(err).context("writing the command's output");
        }
    }
    Ok(Copied::Ended)
}

/// Exit code for a finished command, after a note for the outcomes that are not plain exits.
pub(super) fn finish(
    sandbox: &Sandbox,
    request: &ExecRequest,
    status: ExitStatus,
    exit_code: i32,
    signal: Option<i32>,
) -> i32 {
    match status {
        ExitStatus::Exited => exit_code,
        ExitStatus::Signaled => {
            if let Some(signal) = signal {
                eprintln!("sandlot: command terminated by signal {signal}");
            }
            signal.map_or(exit_code, |s| 128 + s)
        }
        ExitStatus::Timeout => {
            match request.timeout_s {
                Some(s) => eprintln!("sandlot: command timed out after {s}s"),
                None => eprintln!("sandlot: command timed out"),
            }
            EXIT_TIMEOUT
        }
        ExitStatus::Oom => {
            let limit = sandbox
                .created()
                .map(|info| info.limits.memory_mb)
                .or_else(|| sandbox.info().ok().map(|info| info.limits.memory_mb));
            match limit {
                Some(mb) => eprintln!("sandlot: out of memory (limit {mb} MiB)"),
                None => eprintln!("sandlot: out of memory"),
            }
            EXIT_OOM
        }
        ExitStatus::Killed => {
            eprintln!("sandlot: command was killed (by a kill request, or its sandbox ended)");
            signal.map_or(exit_code, |s| 128 + s)
        }
    }
}

/// Exit code for a non-streamed result (`sandbox exec --json`), without notes.
pub(super) fn exit_code_of(result: &ExecResult) -> i32 {
    exit_code_for(result.status, result.exit_code, result.signal)
}

/// Exit code for a process that ended so, without notes.
fn exit_code_for(status: ExitStatus, exit_code: i32, signal: Option<i32>) -> i32 {
    match status {
        ExitStatus::Exited => exit_code,
        ExitStatus::Timeout => EXIT_TIMEOUT,
        ExitStatus::Oom => EXIT_OOM,
        ExitStatus::Signaled | ExitStatus::Killed => signal.map_or(exit_code, |s| 128 + s),
    }
}

fn note_truncated(streams: &[String], stdout_bytes: u64, stderr_bytes: u64) {
    let which = if streams.is_empty() { "output".to_string() } else { streams.join(" and ") };
    eprintln!(
        "sandlot: {which} truncated: the command wrote {stdout_bytes} bytes to stdout and \
         {stderr_bytes} to stderr; the middle was dropped (raise the cap with the API's max_output_bytes)"
    );
}

fn write_flush(out: &mut impl Write, data: &str) -> io::Result<()> {
    out.write_all(data.as_bytes())?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(status: ExitStatus, exit_code: i32, signal: Option<i32>) -> ExecResult {
        ExecResult {
            status,
            exit_code,
            signal,
            stdout: String::new(),
            stderr: String::new(),
            stdout_bytes: 0,
            stderr_bytes: 0,
            truncated: false,
            duration_ms: 0,
        }
    }

    #[test]
    fn exit_codes_follow_shell_conventions() {
        assert_eq!(exit_code_of(&result(ExitStatus::Exited, 3, None)), 3);
        assert_eq!(exit_code_of(&result(ExitStatus::Signaled, 143, Some(15))), 143);
        assert_eq!(exit_code_of(&result(ExitStatus::Timeout, 137, Some(9))), 124);
        assert_eq!(exit_code_of(&result(ExitStatus::Oom, 137, Some(9))), 137);
        assert_eq!(exit_code_of(&result(ExitStatus::Killed, 137, Some(9))), 137);
    }

    #[test]
    fn shell_mode_joins_words() {
        let args = CommandArgs {
            timeout: Some(1.5),
            env: vec![("A".into(), "1".into())],
            user: Some(UserArg::Root),
            cwd: None,
            stdin: false,
            shell: true,
        };
        let request = args.request(&["echo".into(), "a|b".into()]).unwrap();
        assert_eq!(request.shell.as_deref(), Some("echo a|b"));
        assert_eq!(request.argv, None);
        assert_eq!(request.user, Some(sandlot_client::api::User::Root));
        assert_eq!(request.env.get("A").map(String::as_str), Some("1"));
    }
}
