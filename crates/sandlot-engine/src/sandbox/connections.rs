//! Inbound TCP connections to servers inside a sandbox, carried over the supervisor link: each way is
//! flow-controlled, so a side that stops reading stalls only its own connection.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use sandlot_protocol::{encode, Request, MAX_PAYLOAD, STREAM_WINDOW};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use super::link::{credit, Inbound, Pending, Stream};
use super::Sandbox;
use crate::{lock, EngineError};

/// An inbound connection being set up or open.
pub(super) struct Conn {
    pub(super) ready: Option<oneshot::Sender<Result<(), EngineError>>>,
    pub(super) data: Inbound<Option<Vec<u8>>>,
    /// Bytes we may still send before the supervisor acknowledges some ([`STREAM_WINDOW`]).
    pub(super) window: Arc<tokio::sync::Semaphore>,
}

impl Sandbox {
    /// Opens a TCP connection to a server listening on `port` of the sandbox's loopback; the returned
    /// stream carries its bytes (through the supervisor, over the control socket).
    pub async fn connect(&self, port: u16) -> Result<tokio::io::DuplexStream, EngineError> {
        let conn = self.link.next_id.fetch_add(1, Ordering::SeqCst);
        let (ready_tx, ready_rx) = oneshot::channel();
        let (data_tx, mut data_rx, held) = Inbound::new();
        let window = Arc::new(tokio::sync::Semaphore::new(STREAM_WINDOW));
        lock(&self.link.conns).insert(conn, Conn { ready: Some(ready_tx), data: data_tx, window: Arc::clone(&window) });
        // A caller dropped before `Connected` would leave pid 1 holding the connection (and a slot).
        let mut pending = Pending { link: &self.link, stream: Some(Stream::Conn(conn)) };
        self.send(&Request::Connect { conn, port }, &[]).await?;
        match ready_rx.await {
            Ok(Ok(())) => pending.disarm(),
            Ok(Err(e)) => {
                pending.disarm();
                return Err(e);
            }
            Err(_) => return Err(EngineError::Gone(self.id.clone())),
        }
        let (ours, theirs) = tokio::io::duplex(256 << 10);
        let (mut rd, mut wr) = tokio::io::split(theirs);
        // Sandbox server → client, credited as the client takes it: a client that stops reading stops
        // the supervisor's reader of this connection, nothing else.
        let credits = self.out.clone();
        tokio::spawn(async move {
            while let Some(Some(chunk)) = data_rx.recv().await {
                if wr.write_all(&chunk).await.is_err() {
                    break;
                }
                credit(&credits, &held, conn, chunk.len()).await;
            }
            let _ = wr.shutdown().await;
        });
        let out = self.out.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; MAX_PAYLOAD];
            loop {
                let n = match rd.read(&mut buf).await {
                    Ok(0) | Err(_) => 0,
                    Ok(n) => n,
                };
                let frame = if n == 0 {
                    encode(&Request::StreamClose { conn }, &[])
                } else {
                    // Wait until the sandbox server has read enough of what went before: a server that
                    // does not read stalls its client here, not the supervisor's memory. Closed when the
                    // connection ends.
                    match window.acquire_many(n as u32).await {
                        Ok(permit) => permit.forget(),
                        Err(_) => break,
                    }
                    encode(&Request::StreamData { conn }, &buf[..n])
                };
                let Ok(frame) = frame else { break };
                if out.send(frame).await.is_err() || n == 0 {
                    break;
                }
            }
        });
        Ok(ours)
    }
}
