//! File transfers with a sandbox's supervisor: one-answer operations, downloads as a credited
//! [`FileStream`], uploads fed from a reader. The typed file methods (`crate::files`) run on these.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use sandlot_protocol::{encode, FileAnswer, FileErrorKind, FileOp, Request, MAX_PAYLOAD};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

use super::link::{credit, Inbound, Pending, Stream};
use super::Sandbox;
use crate::{lock, EngineError};

pub(super) enum FileMsg {
    Chunk(Vec<u8>),
    Done(FileAnswer),
    Failed(FileErrorKind, String),
}

/// Bytes of a file (or tar stream) coming out of the sandbox, as fast as the caller takes them: the
/// supervisor sends only what this stream gives credit for. Dropped before its end, it tells the
/// supervisor to stop reading.
pub struct FileStream {
    req: u64,
    rx: mpsc::UnboundedReceiver<FileMsg>,
    held: Arc<AtomicUsize>,
    out: mpsc::Sender<Vec<u8>>,
    first: Option<Vec<u8>>,
    ended: bool,
}

impl FileStream {
    /// The next chunk; `Ok(None)` at the end.
    pub async fn next(&mut self) -> Result<Option<Bytes>, EngineError> {
        let msg = match self.first.take() {
            Some(b) => Some(FileMsg::Chunk(b)),
            None if self.ended => return Ok(None),
            None => self.rx.recv().await,
        };
        match msg {
            Some(FileMsg::Chunk(b)) => {
                credit(&self.out, &self.held, self.req, b.len()).await;
                Ok(Some(Bytes::from(b)))
            }
            Some(FileMsg::Done(_)) => {
                self.ended = true;
                Ok(None)
            }
            Some(FileMsg::Failed(kind, message)) => {
                self.ended = true;
                Err(EngineError::File { kind, message })
            }
            None => {
                self.ended = true;
                Err(EngineError::Gone("file transfer interrupted".into()))
            }
        }
    }
}

impl Drop for FileStream {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // The client went away: the supervisor's reader, waiting for credit, stops and frees its slot.
        let (out, req) = (self.out.clone(), self.req);
        if let (Ok(rt), Ok(frame)) = (tokio::runtime::Handle::try_current(), encode(&Request::Abort { req }, &[])) {
            rt.spawn(async move {
                let _ = out.send(frame).await;
            });
        }
    }
}

impl Sandbox {
    fn open_file_req(&self) -> (u64, mpsc::UnboundedReceiver<FileMsg>, Arc<AtomicUsize>) {
        let req = self.link.next_id.fetch_add(1, Ordering::SeqCst);
        let (inbound, rx, held) = Inbound::new();
        lock(&self.link.files).insert(req, inbound);
        (req, rx, held)
    }

    /// A file operation answered in one message (stat, list, mkdir, remove, move).
    pub(crate) async fn file_op(&self, uid: u32, op: FileOp) -> Result<FileAnswer, EngineError> {
        let (req, mut rx, _) = self.open_file_req();
        self.send(&Request::File { req, uid, op }, &[]).await?;
        loop {
            match rx.recv().await {
                Some(FileMsg::Done(v)) => return Ok(v),
                Some(FileMsg::Failed(kind, message)) => return Err(EngineError::File { kind, message }),
                Some(FileMsg::Chunk(_)) => continue,
                None => return Err(EngineError::Gone(self.id.clone())),
            }
        }
    }

    /// Starts a download (`Read` or `Tar`); errors that happen before the first byte are returned here.
    pub(crate) async fn download(&self, uid: u32, op: FileOp) -> Result<FileStream, EngineError> {
        let (req, mut rx, held) = self.open_file_req();
        let mut pending = Pending { link: &self.link, stream: Some(Stream::File(req)) };
        self.send(&Request::File { req, uid, op }, &[]).await?;
        let first = rx.recv().await;
        // From here the FileStream (or the answer) takes care of the end.
        pending.disarm();
        let stream = |rx, first, ended| FileStream { req, rx, held, out: self.out.clone(), first, ended };
        match first {
            Some(FileMsg::Chunk(b)) => Ok(stream(rx, Some(b), false)),
            // An empty file: a stream that ends at once.
            Some(FileMsg::Done(_)) => Ok(stream(rx, None, true)),
            Some(FileMsg::Failed(kind, message)) => Err(EngineError::File { kind, message }),
            None => Err(EngineError::Gone(self.id.clone())),
        }
    }

    /// Runs an upload (`Write` or `Untar`), feeding it from `body` (chunks of any size).
    pub(crate) async fn upload<R: AsyncRead + Unpin>(
        &self,
        uid: u32,
        op: FileOp,
        body: &mut R,
    ) -> Result<FileAnswer, EngineError> {
        let (req, mut rx, _) = self.open_file_req();
        // A caller dropped mid-upload would leave pid 1's writer waiting for data that never comes.
        let mut pending = Pending { link: &self.link, stream: Some(Stream::File(req)) };
        self.send(&Request::File { req, uid, op }, &[]).await?;
        let mut buf = vec![0u8; MAX_PAYLOAD];
        loop {
            // A failure reported mid-upload (too large, disk full) ends it at once.
            if let Ok(msg) = rx.try_recv() {
                pending.disarm();
                return finish_upload(msg);
            }
            let n = match body.read(&mut buf).await {
                Ok(n) => n,
                Err(e) => {
                    let _ = self.send(&Request::Abort { req }, &[]).await;
                    return Err(EngineError::File {
                        kind: FileErrorKind::Invalid,
                        message: format!("reading the request body failed: {e}"),
                    });
                }
            };
            if n == 0 {
                break;
            }
            self.send(&Request::Data { req }, &buf[..n]).await?;
        }
        self.send(&Request::End { req }, &[]).await?;
        let answer = rx.recv().await;
        pending.disarm();
        match answer {
            Some(msg) => finish_upload(msg),
            None => Err(EngineError::Gone(self.id.clone())),
        }
    }
}

fn finish_upload(msg: FileMsg) -> Result<FileAnswer, EngineError> {
    match msg {
        FileMsg::Done(v) => Ok(v),
        FileMsg::Failed(kind, message) => Err(EngineError::File { kind, message }),
        FileMsg::Chunk(_) => Err(EngineError::Gone("unexpected data during an upload".into())),
    }
}
