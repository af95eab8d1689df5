//! Inbound connections: the daemon asks for a TCP connection to a server listening on the sandbox's
//! loopback, and the bytes travel as frames on the control socket. The supervisor is inside the
//! sandbox's network namespace, so `127.0.0.1` here is the sandbox's own.
//!
//! Each connection costs two threads of pid 1 (one per direction), and threads count against the
//! sandbox's pids limit: connections are capped at [`MAX_CONNECTIONS`]. The daemon sends at most
//! [`STREAM_WINDOW`] bytes per connection ahead of what the sandbox server has read (each write is
//! acknowledged with `StreamAck`), so a server that does not read pushes back on its client instead of
//! filling pid 1's memory; a daemon that overruns the window gets the connection reset.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandlot_protocol::{Event, MAX_PAYLOAD, STREAM_WINDOW};

use crate::credit::Credits;
use crate::{lock, spawn_thread, Outbox, Permit};

/// Inbound connections open (or being opened) at once into one sandbox. A browser opens about six per
/// origin, so a preview page with dozens of parallel fetches fits; 64 connections are 128 supervisor
/// threads, well inside the pids headroom a sandbox is created with plus its default pids limit.
const MAX_CONNECTIONS: usize = 64;

enum Msg {
    Data(Queued),
    Close,
}

/// Bytes on their way to a sandbox server, counted in their connection's queue until dropped (written,
/// or discarded with the queue).
struct Queued {
    bytes: Vec<u8>,
    count: Arc<AtomicUsize>,
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.count.fetch_sub(self.bytes.len(), Ordering::SeqCst);
    }
}

struct Open {
    tx: mpsc::Sender<Msg>,
    /// Bytes sent to the writer thread and not yet written to the socket.
    queued: Arc<AtomicUsize>,
    /// A handle on the socket, to reset it when the queue overflows (that wakes both threads).
    stream: TcpStream,
}

/// Open connections, keyed by the daemon's connection id.
#[derive(Clone)]
pub(crate) struct Ports {
    open: Arc<Mutex<HashMap<u64, Open>>>,
    /// Connections counted from `Connect` to the end of both their threads.
    active: Arc<AtomicUsize>,
    /// Windows of what each connection's server sends back (see `credit`).
    credits: Credits,
}

impl Ports {
    pub(crate) fn new(credits: Credits) -> Self {
        Ports { open: Arc::default(), active: Arc::default(), credits }
    }

    pub(crate) fn connect(&self, out: &Outbox, conn: u64, port: u16) {
        // Held until both threads of the connection have ended.
        let Some(permit) = Permit::take(&self.active, MAX_CONNECTIONS) else {
            let message = format!(
                "the sandbox already has {MAX_CONNECTIONS} inbound connections open (the limit per sandbox); \
                 retry when some have closed"
            );
            out.send(&Event::ConnectFailed { conn, message, busy: true }, &[]);
            return;
        };
        let permit = Arc::new(permit);
        let (out2, ports) = (out.clone(), self.clone());
        if let Err(e) = spawn_thread("conn-read", move || ports.run(&out2, conn, port, permit)) {
            out.send(&Event::ConnectFailed { conn, message: e.to_string(), busy: true }, &[]);
        }
    }

    fn run(&self, out: &Outbox, conn: u64, port: u16, permit: Arc<Permit>) {
        let stream = match TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(5)) {
            Ok(s) => s,
            Err(e) => {
                let message = format!("nothing accepts connections on port {port} in the sandbox ({e})");
                out.send(&Event::ConnectFailed { conn, message, busy: false }, &[]);
                return;
            }
        };
        let _ = stream.set_nodelay(true);
        let (Ok(mut writer), Ok(handle)) = (stream.try_clone(), stream.try_clone()) else {
            let message = format!("cannot duplicate the connection to port {port}: out of descriptors");
            out.send(&Event::ConnectFailed { conn, message, busy: true }, &[]);
            return;
        };
        let (tx, rx) = mpsc::channel::<Msg>();
        let queued = Arc::new(AtomicUsize::new(0));
        // Daemon → sandbox server, on its own thread so a slow server never stalls the control loop.
        let writer_permit = Arc::clone(&permit);
        let acks = out.clone();
        let started = spawn_thread("conn-write", move || {
            let _permit = writer_permit;
            while let Ok(msg) = rx.recv() {
                match msg {
                    Msg::Data(q) => {
                        if writer.write_all(&q.bytes).is_err() {
                            break;
                        }
                        let bytes = q.bytes.len() as u64;
                        drop(q);
                        acks.send(&Event::StreamAck { conn, bytes }, &[]);
                    }
                    Msg::Close => break,
                }
            }
            let _ = writer.shutdown(Shutdown::Write);
        });
        if let Err(e) = started {
            out.send(&Event::ConnectFailed { conn, message: e.to_string(), busy: true }, &[]);
            return;
        }
        // Before `Connected`: the daemon may close (and so close this window) as soon as it has that.
        let window = self.credits.open(conn);
        lock(&self.open).insert(conn, Open { tx, queued, stream: handle });
        out.send(&Event::Connected { conn }, &[]);
        // Sandbox server → daemon, as fast as the daemon's client reads: one that stops reading stops
        // this thread (and its server), nothing else.
        let mut reader = stream;
        let mut buf = vec![0u8; MAX_PAYLOAD];
        loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) if window.take(n) => out.send(&Event::StreamData { conn }, &buf[..n]),
                Ok(_) => break,
            }
        }
        self.credits.forget(conn);
        // The writer ends when the daemon closes its side or the socket is reset; forgetting the entry
        // here drops its sender, so it ends too when the daemon never closes.
        lock(&self.open).remove(&conn);
        out.send(&Event::StreamClose { conn }, &[]);
        drop(permit);
    }

    pub(crate) fn data(&self, conn: u64, bytes: Vec<u8>) {
        let mut open = lock(&self.open);
        let Some(o) = open.get(&conn) else { return };
        let n = bytes.len();
        let queued = o.queued.fetch_add(n, Ordering::SeqCst);
        // Counted from here; dropping it (written, discarded, or refused just below) uncounts it.
        let q = Queued { bytes, count: Arc::clone(&o.queued) };
        if queued + n > STREAM_WINDOW {
            // The daemon sent past the window: reset rather than buffer. Both threads wake (the reader
            // sees EOF and reports StreamClose).
            let _ = o.stream.shutdown(Shutdown::Both);
            open.remove(&conn);
            return;
        }
        let _ = o.tx.send(Msg::Data(q));
    }

    pub(crate) fn close(&self, conn: u64) {
        if let Some(o) = lock(&self.open).remove(&conn) {
            let _ = o.tx.send(Msg::Close);
        }
    }
}
