//! `process.Process`: commands as sandlot background processes. A started command lives on when its
//! client goes and keeps its (capped) output, so `Connect` replays what it printed and follows the
//! rest, as envd's does.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Extension;
use sandlot_api::{ExecEvent, ExecRequest, ExitStatus};
use sandlot_control::{Process, RawEvent};
use sandlot_control::{Started, TERMINAL_SCROLLBACK_BYTES};

use super::connect::{self, Codec, Envelopes, ServerStream};
use super::proto::{self, process_event as pe, process_input, process_selector, stream_input_request};
use super::{basic_user, ConnectError, Target};
use crate::server::app::AppState;

type Reply = Result<Response, ConnectError>;

/// The pid envd's messages carry (a `uint32`) of a sandlot process handle.
fn wire_pid(handle: u64) -> Result<u32, ConnectError> {
    u32::try_from(handle).map_err(|_| {
        ConnectError::new("internal", axum::http::StatusCode::INTERNAL_SERVER_ERROR, "process handle past u32")
    })
}

/// The process a selector names.
async fn selected(
    app: &AppState,
    t: &Target,
    sel: Option<proto::ProcessSelector>,
) -> Result<Arc<Process>, ConnectError> {
    match sel.and_then(|s| s.selector) {
        Some(process_selector::Selector::Pid(pid)) => Ok(app.control.process(&t.caller, &t.id, u64::from(pid)).await?),
        Some(process_selector::Selector::Tag(tag)) => Ok(app.control.process_by_tag(&t.caller, &t.id, &tag).await?),
        None => Err(ConnectError::invalid("missing process selector: give `pid`")),
    }
}

/// envd's `status` of an ended process: Go's `ProcessState.String()` (`exit status 1`, `signal: killed`).
fn end_event(status: ExitStatus, exit_code: i32, signal: Option<i32>) -> pe::EndEvent {
    match (status, signal) {
        (ExitStatus::Exited, _) => {
            pe::EndEvent { exit_code, exited: true, status: format!("exit status {exit_code}"), error: None }
        }
        (_, Some(sig)) => {
            let error = match status {
                ExitStatus::Timeout => Some("killed: the command's timeout passed".to_string()),
                ExitStatus::Oom => Some("killed: the sandbox ran out of memory".to_string()),
                _ => None,
            };
            pe::EndEvent { exit_code: -1, exited: false, status: format!("signal: {}", signal_name(sig)), error }
        }
        (_, None) => pe::EndEvent { exit_code, exited: false, status: format!("exit status {exit_code}"), error: None },
    }
}

/// Go's names of the signals (`syscall.Signal.String()`) a process is commonly ended by.
fn signal_name(sig: i32) -> String {
    match sig {
        1 => "hangup".into(),
        2 => "interrupt".into(),
        3 => "quit".into(),
        6 => "aborted".into(),
        9 => "killed".into(),
        11 => "segmentation fault".into(),
        13 => "broken pipe".into(),
        15 => "terminated".into(),
        n => format!("signal {n}"),
    }
}

fn event(e: pe::Event) -> proto::StartResponse {
    proto::StartResponse { event: Some(proto::ProcessEvent { event: Some(e) }) }
}

/// What ended a [`pump`]'s loop.
enum PumpEnd {
    /// The stream ends with this end-of-stream message (`None`: success).
    Finish(Option<ConnectError>),
    /// The client went: nothing more is written.
    Drop,
    /// The client took no message within the send bound: its queue is dropped.
    Abandon,
    /// The sandbox ended under the process: the connection is cut ([`ServerStream::cut`]).
    Cut,
}

/// One turn of a [`pump`]'s loop.
enum Step {
    /// The pending message was taken (`false`: the client has gone).
    Sent(bool),
    /// The client took no message within the send bound.
    Stalled,
    Next(Option<RawEvent>),
    Ping,
    SandboxEnded,
    End(PumpEnd),
}

/// Streams a process's events, from its first (a replay for `Connect`), to `out`, with keepalives,
/// until the end, the client's going or its deadline. A client that takes no message within the
/// stream policy's bound has its stream abandoned. The process (and with it its output reservation)
/// is let go before the end of the stream is written: that write waits for a client that may not read.
async fn pump(
    proc: Arc<Process>,
    out: ServerStream,
    keepalive: Option<std::time::Duration>,
    deadline: Option<std::time::Duration>,
) {
    let end = pump_events(&proc, &out, keepalive, deadline).await;
    drop(proc);
    match end {
        PumpEnd::Finish(error) => out.finish(error).await,
        PumpEnd::Drop => drop(out),
        PumpEnd::Abandon => out.abandon(),
        PumpEnd::Cut => out.cut("the sandbox ended under the process").await,
    }
}

async fn pump_events(
    proc: &Arc<Process>,
    out: &ServerStream,
    keepalive: Option<std::time::Duration>,
    deadline: Option<std::time::Duration>,
) -> PumpEnd {
    let mut follow = proc.follow();
    // A terminal's output is one stream, which envd sends as `pty` data.
    let pty = proc.pty;
    let pid = match wire_pid(proc.handle) {
        Ok(p) => p,
        Err(e) => return PumpEnd::Finish(Some(e)),
    };
    let deadline = deadline.map(|d| tokio::time::Instant::now() + d);
    let mut ping = keepalive.map(|k| tokio::time::interval_at(tokio::time::Instant::now() + k, k));
    let mut pending: Option<proto::StartResponse> = None;
    let mut pace = out.pace();
    loop {
        // While a message waits for room only the send, or an end, can fire, so its bound is not
        // restarted by other arms.
        let step = tokio::select! {
            // (select! evaluates a disabled branch's expression too: the send is made inside its future.)
            sent = async { pace.send(out.send(pending.as_ref().expect("pending"))).await }, if pending.is_some() => {
                sent.map_or(Step::Stalled, Step::Sent)
            }
            ev = follow.next_raw(), if pending.is_none() => Step::Next(ev),
            _ = async { ping.as_mut().expect("keepalive").tick().await }, if ping.is_some() && pending.is_none() => Step::Ping,
            _ = async { tokio::time::sleep_until(deadline.expect("deadline")).await }, if deadline.is_some() => {
                Step::End(PumpEnd::Finish(Some(ConnectError::deadline_exceeded())))
            }
            _ = out.gone() => Step::End(PumpEnd::Drop),
            _ = proc.sandbox_ended(), if !pace.knows_sandbox_ended() => Step::SandboxEnded,
        };
        let msg = match step {
            Step::Sent(true) => {
                pending = None;
                continue;
            }
            Step::Sent(false) => return PumpEnd::Drop,
            Step::Stalled => return PumpEnd::Abandon,
            Step::SandboxEnded => {
                pace.sandbox_ended();
                continue;
            }
            Step::End(end) => return end,
            Step::Ping => pe::Event::Keepalive(pe::KeepAlive {}),
            // The process ended with its sandbox (killed, stopped, timed out): under E2B the
            // connection goes with the machine, and the SDKs tell the client so only from that.
            Step::Next(Some(RawEvent::Event(ExecEvent::Exited { status: ExitStatus::Killed, .. }))) => {
                return PumpEnd::Cut
            }
            Step::Next(None) => return PumpEnd::Finish(None),
            Step::Next(Some(RawEvent::Stdout(data))) if pty => {
                pe::Event::Data(pe::DataEvent { output: Some(pe::Output::Pty(data)) })
            }
            Step::Next(Some(RawEvent::Stdout(data))) => {
                pe::Event::Data(pe::DataEvent { output: Some(pe::Output::Stdout(data)) })
            }
            Step::Next(Some(RawEvent::Stderr(data))) => {
                pe::Event::Data(pe::DataEvent { output: Some(pe::Output::Stderr(data)) })
            }
            Step::Next(Some(RawEvent::Event(ExecEvent::Started { .. }))) => pe::Event::Start(pe::StartEvent { pid }),
            Step::Next(Some(RawEvent::Event(ExecEvent::Exited { status, exit_code, signal, .. }))) => {
                pe::Event::End(end_event(status, exit_code, signal))
            }
            // Output past the cap is dropped (head and tail kept); envd's stream has no word for it.
            Step::Next(Some(RawEvent::Event(
                ExecEvent::Truncated { .. } | ExecEvent::Stdout { .. } | ExecEvent::Stderr { .. },
            ))) => continue,
            Step::Next(Some(RawEvent::Event(ExecEvent::Error { message, .. }))) => {
                return PumpEnd::Finish(Some(ConnectError::new(
                    "unavailable",
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    message,
                )))
            }
        };
        pending = Some(event(msg));
    }
}

/// The first message of a server-streaming call's body.
async fn stream_request<T: connect::Message>(headers: &HeaderMap, body: Body) -> Result<(Codec, T), ConnectError> {
    let mut envs = Envelopes::new(headers, body)?;
    let msg = envs.next::<T>().await?.ok_or_else(|| ConnectError::invalid("the call's request message is missing"))?;
    Ok((envs.codec(), msg))
}

/// `Start`: runs a command (`user` from the Basic authorization) and streams its events.
pub async fn start(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let codec = Codec::of(&headers, true)?;
    Ok(start_stream(app, t, headers, body).await.unwrap_or_else(|e| connect::stream_error(codec, e)))
}

async fn start_stream(app: AppState, t: Target, headers: HeaderMap, body: Body) -> Reply {
    let (codec, req) = stream_request::<proto::StartRequest>(&headers, body).await?;
    let deadline = connect::timeout(&headers)?;
    let user = basic_user(&headers)?;
    let cfg = req.process.ok_or_else(|| ConnectError::invalid("missing `process`: give its `cmd`"))?;
    let argv = std::iter::once(cfg.cmd).chain(cfg.args).collect();
    let exec = ExecRequest {
        argv: Some(argv),
        shell: None,
        // envd takes a relative cwd from the user's home, as a login shell's `cd` would.
        cwd: cfg.cwd.filter(|c| !c.is_empty()).map(|c| match c.starts_with('/') {
            true => c,
            false => format!("{}/{c}", user.home().trim_end_matches('/')),
        }),
        env: cfg.envs.into_iter().collect(),
        user: Some(user),
        stdin: None,
        // Absent means open (what older SDKs expect); closed, the process reads end of file at once.
        stdin_open: Some(req.stdin.unwrap_or(true)),
        pty: req.pty.map(|p| pty_size(p.size)).transpose()?,
        tag: req.tag,
        timeout_s: None,
        // A background process: it outlives this call, as envd's do.
        background: true,
        max_output_bytes: None,
    };
    // A terminal is a session, not a command: its output streams however much is printed, with a
    // scrollback kept for `Connect` (a command's head-and-tail capture stops streaming at its cap).
    let terminal = exec.pty.is_some();
    let exec = ExecRequest { max_output_bytes: terminal.then_some(TERMINAL_SCROLLBACK_BYTES), ..exec };
    let Started::Background { process: proc, .. } =
        app.control.exec_as(&t.caller, &t.id, exec, false, terminal).await?
    else {
        unreachable!("a background exec answers with its process")
    };
    // `Start`'s deadline is the command's `timeout`: it ends the process too, whether or not the
    // client is still there to see it.
    if let Some(d) = deadline {
        let (app, t, proc) = (app.clone(), t.clone(), Arc::clone(&proc));
        tokio::spawn(async move {
            if tokio::time::timeout(d, proc.wait()).await.is_err() {
                let _ = app.control.kill(&t.caller, &t.id, proc.handle, None).await;
            }
        });
    }
    let (out, resp) = ServerStream::open(codec, app.streams);
    tokio::spawn(pump(proc, out, connect::keepalive(&headers), deadline));
    Ok(resp)
}

/// `Connect`: replays a process's events from its start and follows it.
pub async fn connect(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let codec = Codec::of(&headers, true)?;
    Ok(connect_stream(app, t, headers, body).await.unwrap_or_else(|e| connect::stream_error(codec, e)))
}

async fn connect_stream(app: AppState, t: Target, headers: HeaderMap, body: Body) -> Reply {
    let (codec, req) = stream_request::<proto::SelectRequest>(&headers, body).await?;
    let deadline = connect::timeout(&headers)?;
    let proc = selected(&app, &t, req.process).await?;
    let (out, resp) = ServerStream::open(codec, app.streams);
    tokio::spawn(pump(proc, out, connect::keepalive(&headers), deadline));
    Ok(resp)
}

/// `List`: the running processes.
pub async fn list(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let (codec, _req) = connect::read_unary::<proto::ListRequest>(&headers, body).await?;
    let mut processes = Vec::new();
    // envd lists the processes it started; what a finished command left behind it does not know.
    for p in app.control.processes(&t.caller, &t.id, true).await?.processes.into_iter().filter(|p| p.left_by.is_none())
    {
        let mut argv = p.argv.into_iter();
        let config = proto::ProcessConfig {
            cmd: argv.next().unwrap_or_default(),
            args: argv.collect(),
            envs: p.env.into_iter().collect(),
            cwd: Some(p.cwd),
        };
        processes.push(proto::ProcessInfo { config: Some(config), pid: wire_pid(p.pid)?, tag: p.tag });
    }
    Ok(connect::unary(codec, &proto::ListResponse { processes }))
}

/// Writes one input message to a process's standard input.
async fn write_input(
    app: &AppState,
    t: &Target,
    pid: u64,
    input: Option<proto::ProcessInput>,
) -> Result<(), ConnectError> {
    match input.and_then(|i| i.input) {
        // A terminal's input is its stdin: the supervisor writes both to what the process reads.
        Some(process_input::Input::Stdin(data) | process_input::Input::Pty(data)) => {
            Ok(app.control.stdin(&t.caller, &t.id, pid, &data, false).await?)
        }
        None => Ok(()),
    }
}

/// `SendInput`.
pub async fn send_input(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let (codec, req) = connect::read_unary::<proto::SendInputRequest>(&headers, body).await?;
    let proc = selected(&app, &t, req.process).await?;
    write_input(&app, &t, proc.handle, req.input).await?;
    Ok(connect::unary(codec, &proto::Empty {}))
}

/// `StreamInput`: a client stream whose first message names the process, then its input in order.
pub async fn stream_input(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let mut envs = Envelopes::new(&headers, body)?;
    let codec = envs.codec();
    let result = async {
        let mut target: Option<u64> = None;
        while let Some(msg) = envs.next::<proto::StreamInputRequest>().await? {
            match msg.event {
                Some(stream_input_request::Event::Start(s)) => {
                    target = Some(selected(&app, &t, s.process).await?.handle);
                }
                Some(stream_input_request::Event::Data(d)) => {
                    let pid = target
                        .ok_or_else(|| ConnectError::invalid("input before the `start` message naming the process"))?;
                    write_input(&app, &t, pid, d.input).await?;
                }
                Some(stream_input_request::Event::Keepalive(_)) | None => {}
            }
        }
        Ok::<_, ConnectError>(())
    };
    // A client stream is answered like a streaming call: one message, then the end of the stream.
    let (out, resp) = ServerStream::open(codec, app.streams);
    match result.await {
        Ok(()) => {
            out.send(&proto::Empty {}).await;
            out.finish(None).await;
        }
        Err(e) => out.finish(Some(e)).await,
    }
    Ok(resp)
}

/// `CloseStdin`.
pub async fn close_stdin(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let (codec, req) = connect::read_unary::<proto::SelectRequest>(&headers, body).await?;
    let proc = selected(&app, &t, req.process).await?;
    app.control.stdin(&t.caller, &t.id, proc.handle, &[], true).await?;
    Ok(connect::unary(codec, &proto::Empty {}))
}

/// `SendSignal`: SIGTERM or SIGKILL. An ended process is `not_found`, as envd (which forgets it) says.
pub async fn send_signal(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let (codec, req) = connect::read_unary::<proto::SendSignalRequest>(&headers, body).await?;
    let signal = match proto::Signal::try_from(req.signal) {
        Ok(proto::Signal::Sigterm) => 15,
        Ok(proto::Signal::Sigkill) => 9,
        _ => return Err(ConnectError::invalid("signal must be SIGNAL_SIGTERM or SIGNAL_SIGKILL")),
    };
    let proc = selected(&app, &t, req.process).await?;
    if proc.finished() {
        return Err(ConnectError::not_found(format!("process {} has already exited", proc.handle)));
    }
    app.control.kill(&t.caller, &t.id, proc.handle, Some(signal)).await?;
    Ok(connect::unary(codec, &proto::Empty {}))
}

/// `Update`: a pty's size.
pub async fn update(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let (codec, req) = connect::read_unary::<proto::UpdateRequest>(&headers, body).await?;
    let proc = selected(&app, &t, req.process).await?;
    if let Some(pty) = req.pty {
        let size = pty_size(pty.size)?;
        app.control.resize(&t.caller, &t.id, proc.handle, size.rows, size.cols).await?;
    }
    Ok(connect::unary(codec, &proto::Empty {}))
}

/// A terminal size from envd's; the control layer checks its range.
fn pty_size(size: Option<proto::PtySize>) -> Result<sandlot_api::PtySize, ConnectError> {
    let s = size.ok_or_else(|| ConnectError::invalid("a pty needs its `size` (rows and cols)"))?;
    let cell = |n: u32, what: &str| {
        u16::try_from(n).map_err(|_| ConnectError::invalid(format!("pty {what} {n} is out of range (1-1000)")))
    };
    Ok(sandlot_api::PtySize { rows: cell(s.rows, "rows")?, cols: cell(s.cols, "cols")? })
}
