//! Terminals: a command on a pseudo-terminal that outlives the connection that opened it, keeps a
//! scrollback of its recent output for whoever attaches next, and is followed by a bounded number of
//! connections at once.
//!
//! A terminal is a background pty process (`exec.start` with `terminal: true` in the audit log): it
//! ends only by exiting, by a signal (`/processes/{pid}/kill`), or with its sandbox (stop, delete,
//! timeout). Its output is kept as a scrollback ([`TERMINAL_SCROLLBACK_BYTES`]) rather than an
//! exec's head and tail, so it streams live however much it prints.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use sandlot_api::ExecRequest;
use sandlot_engine::{Process, Sandbox};
use sandlot_store::now_ms;
use serde_json::json;

use crate::audit::Class;
use crate::entries::Entry;
use crate::exec::{check_pty_size, Started};
use crate::{lock, Caller, Control, Error, Kind, Result};

/// Bytes of recent output a terminal keeps (its stdout; a pty has no separate stderr) and replays to a
/// connection that attaches to it. Its sandbox's output budget is charged twice this (both streams'
/// captures) while it runs.
pub const TERMINAL_SCROLLBACK_BYTES: u64 = 256 << 10;
/// Connections following terminals of one sandbox at once.
pub const MAX_TERMINALS_PER_SANDBOX: usize = 8;
/// Connections following terminals of one tenant's sandboxes at once: no tenant can take every
/// server-wide place.
pub const MAX_TERMINALS_PER_TENANT: usize = 64;
/// Connections following terminals on the whole server at once.
pub const MAX_TERMINALS: usize = 1024;

/// One connection's hold on a terminal: its place among the sandbox's, the tenant's and the server's
/// terminal connections (given back when dropped), and the sandbox and process it was resolved to
/// once, when it opened, so that what is typed costs no store read ([`Control::terminal_input`]).
pub struct TerminalSlot {
    place: Place,
    id: String,
    sb: Arc<Sandbox>,
    proc: Arc<Process>,
}

/// A place among the sandbox's, the tenant's and the server's terminal connections.
struct Place {
    sandbox: Arc<Entry>,
    total: Arc<AtomicUsize>,
    tenants: Arc<Mutex<HashMap<String, usize>>>,
    tenant: String,
}

impl TerminalSlot {
    /// The process this connection follows.
    pub fn process(&self) -> &Arc<Process> {
        &self.proc
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.sandbox.terminals.fetch_sub(1, Ordering::SeqCst);
        self.total.fetch_sub(1, Ordering::SeqCst);
        let mut tenants = lock(&self.tenants);
        if let Some(n) = tenants.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                tenants.remove(&self.tenant);
            }
        }
    }
}

/// Adds one to `n` unless it is at `cap`.
fn take(n: &AtomicUsize, cap: usize) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| (v < cap).then_some(v + 1)).is_ok()
}

fn limit(message: String) -> Error {
    Error::new(Kind::LimitReached, message)
}

impl Control {
    /// A place for one more terminal connection on `tenant`'s sandbox `id` (checked before).
    fn terminal_place(&self, tenant: &str, id: &str) -> Result<Place> {
        let entry = self
            .entries
            .existing(id)
            .ok_or_else(|| Error::conflict(format!("sandbox {id} is not running; resume it first")))?;
        let total = Arc::clone(&self.entries.terminals);
        let tenants = Arc::clone(&self.entries.tenant_terminals);
        if !take(&entry.terminals, MAX_TERMINALS_PER_SANDBOX) {
            return Err(limit(format!(
                "sandbox {id} has {MAX_TERMINALS_PER_SANDBOX} terminal connections open, the most it may have; close \
                 one and retry"
            )));
        }
        {
            let mut open = lock(&tenants);
            let n = open.entry(tenant.to_string()).or_default();
            if *n >= MAX_TERMINALS_PER_TENANT {
                if *n == 0 {
                    open.remove(tenant);
                }
                drop(open);
                entry.terminals.fetch_sub(1, Ordering::SeqCst);
                return Err(limit(format!(
                    "tenant {tenant} has {MAX_TERMINALS_PER_TENANT} terminal connections open, the most it may \
                     have; close one and retry"
                )));
            }
            *n += 1;
        }
        let place = Place { sandbox: entry, total, tenants, tenant: tenant.to_string() };
        if !take(&place.total, MAX_TERMINALS) {
            // The place gives back what it holds when dropped: first the server-wide count it did not take.
            place.total.fetch_add(1, Ordering::SeqCst);
            return Err(limit(format!(
                "the server has {MAX_TERMINALS} terminal connections open, the most it may have; retry later"
            )));
        }
        Ok(place)
    }

    /// The running sandbox a terminal connection writes to. While the sandbox stays as it was when the
    /// connection opened, this reads nothing from the store (it records activity for the idle timeout
    /// in memory). Once it was paused, it is checked as every request is: it is resumed if it
    /// auto-resumes, or the write is refused (`conflict`) while it stays paused. A sandbox that
    /// stopped has lost the process: the connection ends with it (its process's end, or the
    /// sandbox's).
    async fn terminal_sandbox(&self, caller: &Caller, t: &TerminalSlot) -> Result<Arc<Sandbox>> {
        if t.sb.alive() && !t.place.sandbox.paused.load(Ordering::SeqCst) {
            t.place.sandbox.last_activity.store(now_ms(), Ordering::Relaxed);
            return Ok(Arc::clone(&t.sb));
        }
        let (_, sb) = self.ensure_running(caller, &t.id).await?;
        if !Arc::ptr_eq(&sb, &t.sb) {
            return Err(Error::conflict(format!(
                "sandbox {} was stopped and started again: terminal {} ended with it; open a new one",
                t.id, t.proc.handle
            )));
        }
        Ok(sb)
    }

    /// Writes `data` to the standard input of the terminal `t` follows (as [`Control::stdin`], but
    /// with the sandbox and process resolved when the connection opened).
    pub async fn terminal_input(&self, caller: &Caller, t: &TerminalSlot, data: &[u8]) -> Result<()> {
        let pid = t.proc.handle;
        if let Some(why) = t.proc.stdin_closed_reason() {
            return Err(Error::conflict(format!("process {pid} has no open standard input: {why}")));
        }
        if !t.proc.stdin_open() {
            return Err(Error::conflict(format!("process {pid} has no open standard input (it has exited)")));
        }
        let sb = self.terminal_sandbox(caller, t).await?;
        sb.stdin(pid, data, false).await?;
        Ok(())
    }

    /// Resizes the terminal `t` follows (as [`Control::resize`], resolved when the connection opened).
    pub async fn terminal_resize(&self, caller: &Caller, t: &TerminalSlot, rows: u16, cols: u16) -> Result<()> {
        check_pty_size(rows, cols)?;
        let pid = t.proc.handle;
        if t.proc.finished() {
            return Err(Error::conflict(format!("process {pid} has already exited")));
        }
        let sb = self.terminal_sandbox(caller, t).await?;
        sb.resize(pid, rows, cols).await?;
        Ok(())
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
        let rec = self.record(caller, id)?;
        self.ensure_running(caller, id).await?;
        let place = self.terminal_place(&rec.tenant, id)?;
        req.background = true;
        req.stdin_open = Some(true);
        req.max_output_bytes = Some(TERMINAL_SCROLLBACK_BYTES);
        let Started::Background { process: proc, .. } = self.exec_as(caller, id, req, false, true).await? else {
            unreachable!("a background exec answers with its process")
        };
        // The process's own sandbox, without another read of the record: gone only if it just ended.
        let sb = self
            .engine
            .get(id)
            .ok_or_else(|| Error::conflict(format!("sandbox {id} ended as its terminal started")))?;
        Ok((Arc::clone(&proc), TerminalSlot { place, id: id.into(), sb, proc }))
    }

    /// Attaches to terminal `pid` of the caller's sandbox `id` (a process started with a pty, running
    /// or not: one that has ended replays its output and its end) and takes a connection place for it.
    /// Audited as `terminal.attach`: whoever attaches can type into the terminal.
    pub async fn attach_terminal(&self, caller: &Caller, id: &str, pid: u64) -> Result<(Arc<Process>, TerminalSlot)> {
        let rec = self.record(caller, id)?;
        let (_, sb, proc) = self.running_process(caller, id, pid).await?;
        if !proc.pty {
            return Err(Error::invalid(format!(
                "process {pid} has no terminal: only a process started with a pty can be attached to; read its \
                 output with GET /v1/sandboxes/{id}/processes/{pid}/logs"
            )));
        }
        let place = self.terminal_place(&rec.tenant, id)?;
        self.audit_limited(Class::Exec, &rec.tenant, Some(id), "terminal.attach", &json!({"pid": pid}));
        Ok((Arc::clone(&proc), TerminalSlot { place, id: id.into(), sb, proc }))
    }
}
