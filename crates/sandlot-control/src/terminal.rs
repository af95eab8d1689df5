//! Terminals: a command on a pseudo-terminal that outlives the connection that opened it, keeps a
//! scrollback of its recent output for whoever attaches next, and is followed by a bounded number of
//! connections at once.
//!
//! A terminal is a background pty process (`exec.start` with `terminal: true` in the audit log): it
//! ends only by exiting, by a signal (`/processes/{pid}/kill`), or with its sandbox (stop, delete,
//! timeout). Its output is kept as a scrollback ([`TERMINAL_SCROLLBACK_BYTES`]) rather than an
//! exec's head and tail, so it streams live however much it prints.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sandlot_api::ExecRequest;
use sandlot_engine::Process;
use serde_json::json;

use crate::audit::Class;
use crate::entries::Entry;
use crate::exec::Started;
use crate::{Caller, Control, Error, Kind, Result};

/// Bytes of recent output a terminal keeps (its stdout; a pty has no separate stderr) and replays to a
/// connection that attaches to it. Its sandbox's output budget is charged twice this (both streams'
/// captures) while it runs.
pub const TERMINAL_SCROLLBACK_BYTES: u64 = 256 << 10;
/// Connections following terminals of one sandbox at once.
pub const MAX_TERMINALS_PER_SANDBOX: usize = 8;
/// Connections following terminals on the whole server at once.
pub const MAX_TERMINALS: usize = 1024;

/// One connection's place among a sandbox's terminal connections; given back when dropped.
pub struct TerminalSlot {
    sandbox: Arc<Entry>,
    total: Arc<AtomicUsize>,
}

impl Drop for TerminalSlot {
    fn drop(&mut self) {
        self.sandbox.terminals.fetch_sub(1, Ordering::SeqCst);
        self.total.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Adds one to `n` unless it is at `cap`.
fn take(n: &AtomicUsize, cap: usize) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| (v < cap).then_some(v + 1)).is_ok()
}

impl Control {
    /// A place for one more terminal connection on sandbox `id` (the caller's, checked before).
    fn terminal_slot(&self, id: &str) -> Result<TerminalSlot> {
        let entry = self
            .entries
            .existing(id)
            .ok_or_else(|| Error::conflict(format!("sandbox {id} is not running; resume it first")))?;
        let total = Arc::clone(&self.entries.terminals);
        if !take(&entry.terminals, MAX_TERMINALS_PER_SANDBOX) {
            return Err(Error::new(
                Kind::LimitReached,
                format!(
                    "sandbox {id} has {MAX_TERMINALS_PER_SANDBOX} terminal connections open, the most it may have; \
                     close one and retry"
                ),
            ));
        }
        if !take(&total, MAX_TERMINALS) {
            entry.terminals.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::new(
                Kind::LimitReached,
                format!("the server has {MAX_TERMINALS} terminal connections open, the most it may have; retry later"),
            ));
        }
        Ok(TerminalSlot { sandbox: entry, total })
    }

    /// Starts `req` (which must name a `pty` size) as a terminal in the caller's sandbox `id` (resumed
    /// first if it auto-resumes) and takes a connection place for it. The process runs in the
    /// background with its standard input open and a scrollback of [`TERMINAL_SCROLLBACK_BYTES`]; the
    /// request's `background`, `stdin_open` and `max_output_bytes` are set accordingly.
    pub async fn open_terminal(
        self: &Arc<Self>,
        caller: &Caller,
        id: &str,
        mut req: ExecRequest,
    ) -> Result<(Arc<Process>, TerminalSlot)> {
        if req.pty.is_none() {
            return Err(Error::invalid("a terminal needs a size: give `pty` (rows and cols)"));
        }
        // Another tenant's sandbox is not found before any place is taken.
        self.record(caller, id)?;
        self.ensure_running(caller, id).await?;
        let slot = self.terminal_slot(id)?;
        req.background = true;
        req.stdin_open = Some(true);
        req.max_output_bytes = Some(TERMINAL_SCROLLBACK_BYTES);
        let Started::Background { pid } = self.exec_as(caller, id, req, false, true).await? else {
            unreachable!("a background exec answers with its pid")
        };
        Ok((self.process(caller, id, pid).await?, slot))
    }

    /// Attaches to terminal `pid` of the caller's sandbox `id` (a process started with a pty, running
    /// or not: one that has ended replays its output and its end) and takes a connection place for it.
    /// Audited as `terminal.attach`: whoever attaches can type into the terminal.
    pub async fn attach_terminal(&self, caller: &Caller, id: &str, pid: u64) -> Result<(Arc<Process>, TerminalSlot)> {
        let rec = self.record(caller, id)?;
        let proc = self.process(caller, id, pid).await?;
        if !proc.pty {
            return Err(Error::invalid(format!(
                "process {pid} has no terminal: only a process started with a pty can be attached to; read its \
                 output with GET /v1/sandboxes/{id}/processes/{pid}/logs"
            )));
        }
        let slot = self.terminal_slot(id)?;
        self.audit_limited(Class::Exec, &rec.tenant, Some(id), "terminal.attach", &json!({"pid": pid}));
        Ok((proc, slot))
    }
}
