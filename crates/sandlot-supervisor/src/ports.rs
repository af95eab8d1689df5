//! Inbound connections: the daemon asks for a TCP connection to a server listening on the sandbox's
//! loopback, and the bytes travel as frames on the control socket. The supervisor is inside the
//! sandbox's network namespace, so `127.0.0.1` here is the sandbox's own.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use sandlot_protocol::{Event, MAX_PAYLOAD};

use crate::Outbox;

enum Msg {
    Data(Vec<u8>),
    Close,
}

/// Open connections, keyed by the daemon's connection id.
#[derive(Default, Clone)]
pub(crate) struct Ports {
    open: Arc<Mutex<HashMap<u64, mpsc::Sender<Msg>>>>,
}

impl Ports {
    pub(crate) fn connect(&self, out: &Outbox, conn: u64, port: u16) {
        let (out, ports) = (out.clone(), self.clone());
        thread::spawn(move || {
            let stream = match TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(5)) {
                Ok(s) => s,
                Err(e) => {
                    let message = format!("nothing accepts connections on port {port} in the sandbox ({e})");
                    out.send(&Event::ConnectFailed { conn, message }, &[]);
                    return;
                }
            };
            let _ = stream.set_nodelay(true);
            let Ok(mut writer) = stream.try_clone() else { return };
            let (tx, rx) = mpsc::channel::<Msg>();
            ports.open.lock().unwrap_or_else(|p| p.into_inner()).insert(conn, tx);
            out.send(&Event::Connected { conn }, &[]);
            // Daemon → sandbox server, on its own thread so a slow server never stalls the control loop.
            thread::spawn(move || {
                while let Ok(msg) = rx.recv() {
                    match msg {
                        Msg::Data(b) => {
                            if writer.write_all(&b).is_err() {
                                break;
                            }
                        }
                        Msg::Close => break,
                    }
                }
                let _ = writer.shutdown(Shutdown::Write);
            });
            // Sandbox server → daemon.
            let mut reader = stream;
            let mut buf = vec![0u8; MAX_PAYLOAD];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => out.send(&Event::StreamData { conn }, &buf[..n]),
                }
            }
            out.send(&Event::StreamClose { conn }, &[]);
        });
    }

    pub(crate) fn data(&self, conn: u64, bytes: Vec<u8>) {
        if let Some(tx) = self.open.lock().unwrap_or_else(|p| p.into_inner()).get(&conn) {
            let _ = tx.send(Msg::Data(bytes));
        }
    }

    pub(crate) fn close(&self, conn: u64) {
        if let Some(tx) = self.open.lock().unwrap_or_else(|p| p.into_inner()).remove(&conn) {
            let _ = tx.send(Msg::Close);
        }
    }
}
