//! NDJSON event streams (`exec` with `Accept: application/x-ndjson`, process logs, directory watches).

use std::fmt;
use std::io::{BufRead, BufReader, Read};

use sandlot_api::{ExecEvent, WatchEvent};

use crate::error::{Error, ErrorKind, Result};

/// Iterator over the [`ExecEvent`]s of a streamed exec or a process's logs, one per NDJSON line.
///
/// Events arrive as the server sends them (the iterator blocks while the command is silent). The stream
/// ends after an [`ExecEvent::Exited`] or [`ExecEvent::Error`] event, which are yielded as `Ok` like any
/// other event. If the connection closes before either, the last item is an error of kind
/// [`ErrorKind::Protocol`]; a broken connection gives [`ErrorKind::Io`].
pub struct EventStream {
    reader: BufReader<Box<dyn Read + Send + Sync + 'static>>,
    line: Vec<u8>,
    done: bool,
}

impl EventStream {
    pub(crate) fn new(reader: Box<dyn Read + Send + Sync + 'static>) -> EventStream {
        EventStream { reader: BufReader::new(reader), line: Vec::new(), done: false }
    }

    fn next_event(&mut self) -> Option<Result<ExecEvent>> {
        loop {
            self.line.clear();
            match self.reader.read_until(b'\n', &mut self.line) {
                Err(err) => return Some(Err(Error::io("reading the event stream", err))),
                Ok(0) => {
                    return Some(Err(Error::new(
                        ErrorKind::Protocol,
                        "the event stream ended before the process exited",
                    )))
                }
                Ok(_) => {}
            }
            let line = self.line.trim_ascii();
            if line.is_empty() {
                continue;
            }
            return Some(serde_json::from_slice::<ExecEvent>(line).map_err(|e| Error::decode("an exec event", e)));
        }
    }
}

impl Iterator for EventStream {
    type Item = Result<ExecEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.next_event();
        self.done = match &item {
            Some(Ok(ExecEvent::Exited { .. } | ExecEvent::Error { .. })) | Some(Err(_)) | None => true,
            Some(Ok(_)) => false,
        };
        item
    }
}

/// Iterator over the changes of a watched directory, one per NDJSON line, blocking while nothing
/// changes. It ends (`None`) when the server ends the watch (the directory was removed, the sandbox
/// stopped); dropping it closes the connection, which stops the watch in the sandbox.
pub struct WatchEvents {
    reader: BufReader<Box<dyn Read + Send + Sync + 'static>>,
    line: Vec<u8>,
    done: bool,
}

impl WatchEvents {
    pub(crate) fn new(reader: Box<dyn Read + Send + Sync + 'static>) -> WatchEvents {
        WatchEvents { reader: BufReader::new(reader), line: Vec::new(), done: false }
    }
}

impl Iterator for WatchEvents {
    type Item = Result<WatchEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.line.clear();
            match self.reader.read_until(b'\n', &mut self.line) {
                Err(err) => {
                    self.done = true;
                    return Some(Err(Error::io("reading the watch stream", err)));
                }
                Ok(0) => self.done = true,
                Ok(_) => {
                    let line = self.line.trim_ascii();
                    if !line.is_empty() {
                        return Some(serde_json::from_slice(line).map_err(|e| Error::decode("a watch event", e)));
                    }
                }
            }
        }
        None
    }
}

impl fmt::Debug for WatchEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchEvents").field("done", &self.done).finish_non_exhaustive()
    }
}

impl fmt::Debug for EventStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStream").field("done", &self.done).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn stream(text: &'static str) -> EventStream {
        EventStream::new(Box::new(Cursor::new(text.as_bytes())))
    }

    #[test]
    fn yields_events_until_exited() {
        let events: Vec<_> = stream(concat!(
            r#"{"type":"started","pid":1}"#,
            "\n\n",
            r#"{"type":"stdout","data":"hi\n"}"#,
            "\n",
            r#"{"type":"exited","status":"exited","exit_code":0,"stdout_bytes":3,"stderr_bytes":0,"truncated":false,"duration_ms":5}"#,
            "\n",
            r#"{"type":"stdout","data":"never"}"#,
            "\n",
        ))
        .collect();
        assert_eq!(events.len(), 3);
        assert_eq!(events[1].as_ref().unwrap(), &ExecEvent::Stdout { data: "hi\n".into() });
        assert!(matches!(events[2], Ok(ExecEvent::Exited { exit_code: 0, .. })));
    }

    #[test]
    fn early_end_is_a_protocol_error() {
        let events: Vec<_> = stream("{\"type\":\"started\",\"pid\":1}\n").collect();
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].as_ref().unwrap_err().kind(), ErrorKind::Protocol);
    }

    #[test]
    fn garbage_line_is_a_protocol_error_and_ends_the_stream() {
        let events: Vec<_> = stream("nope\n{\"type\":\"started\",\"pid\":1}\n").collect();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].as_ref().unwrap_err().kind(), ErrorKind::Protocol);
    }

    #[test]
    fn last_line_without_newline_is_read() {
        let events: Vec<_> = stream(r#"{"type":"error","code":"internal","message":"boom"}"#).collect();
        assert_eq!(events.len(), 1);
        assert!(matches!(events[0], Ok(ExecEvent::Error { .. })));
    }
}
