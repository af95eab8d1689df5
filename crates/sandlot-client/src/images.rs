//! Image routes: pull and import (with their progress), list, inspect, delete.

use std::fmt;
use std::io::{BufRead, BufReader, Read};

use sandlot_api::{ImageInfo, ImageList, PullEvent, PullImage, NDJSON};

use crate::client::{drain, json, Client};
use crate::error::{Error, ErrorKind, Result};
use crate::url;

/// The progress of a pull or import, one [`PullEvent`] per NDJSON line, ending after the last `done`
/// or an `error` (both yielded as `Ok`). A connection that closes before either ends with an error of
/// kind [`ErrorKind::Protocol`].
pub struct PullStream {
    reader: BufReader<Box<dyn Read + Send + Sync + 'static>>,
    line: Vec<u8>,
    done: bool,
    finished: bool,
}

impl PullStream {
    fn new(reader: Box<dyn Read + Send + Sync + 'static>) -> PullStream {
        PullStream { reader: BufReader::new(reader), line: Vec::new(), done: false, finished: false }
    }

    /// Reads the stream to its end and returns the images stored, or the error it ended with.
    pub fn wait(self) -> Result<Vec<ImageInfo>> {
        let mut images = Vec::new();
        for ev in self {
            match ev? {
                PullEvent::Done { image } => images.push(*image),
                PullEvent::Error { error } => return Err(Error::from_detail(error)),
                _ => {}
            }
        }
        Ok(images)
    }
}

impl Iterator for PullStream {
    type Item = Result<PullEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.finished {
            return None;
        }
        loop {
            self.line.clear();
            match self.reader.read_until(b'\n', &mut self.line) {
                Err(e) => {
                    self.finished = true;
                    return Some(Err(Error::io("reading the pull's progress", e)));
                }
                Ok(0) => {
                    self.finished = true;
                    if self.done {
                        return None;
                    }
                    return Some(Err(Error::new(
                        ErrorKind::Protocol,
                        "the progress stream ended before the image was stored",
                    )));
                }
                Ok(_) => {}
            }
            let line = self.line.trim_ascii();
            if line.is_empty() {
                continue;
            }
            let ev = serde_json::from_slice::<PullEvent>(line).map_err(|e| Error::decode("a pull event", e));
            match &ev {
                Ok(PullEvent::Done { .. }) => self.done = true,
                Ok(PullEvent::Error { .. }) | Err(_) => self.finished = true,
                Ok(_) => {}
            }
            return Some(ev);
        }
    }
}

impl fmt::Debug for PullStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PullStream").field("done", &self.done).finish_non_exhaustive()
    }
}

/// An image name as a URL path: `/` kept (the route takes the rest of the path), the rest escaped.
fn image_path(name: &str) -> String {
    name.split('/').map(url::segment).collect::<Vec<_>>().join("/")
}

impl Client {
    /// Pulls an image (`POST /v1/images/pull`); iterate the stream for progress, or call
    /// [`PullStream::wait`].
    pub fn pull_image(&self, request: &PullImage) -> Result<PullStream> {
        let response = self.send_json(self.request("POST", "/v1/images/pull").set("Accept", NDJSON), request)?;
        Ok(PullStream::new(Box::new(response.into_reader())))
    }

    /// Imports an archive (`docker save` tar, OCI archive, or a root filesystem tar) read from
    /// `archive`, stored as `name` (default: the name the archive carries).
    pub fn import_image(&self, archive: impl Read, name: Option<&str>, public: bool) -> Result<PullStream> {
        let mut pairs = Vec::new();
        if let Some(n) = name {
            pairs.push(("name", n));
        }
        if public {
            pairs.push(("public", "true"));
        }
        let path = format!("/v1/images/import{}", url::query(&pairs));
        let request = self.request("POST", &path).set("Accept", NDJSON);
        let response = self.send_reader(request, "application/x-tar", archive)?;
        Ok(PullStream::new(Box::new(response.into_reader())))
    }

    /// The images the caller may boot (`GET /v1/images`): its own, the public ones and `host`.
    pub fn images(&self) -> Result<Vec<ImageInfo>> {
        let list: ImageList = json(self.send(self.request("GET", "/v1/images"))?, "the image list")?;
        Ok(list.images)
    }

    /// One image (`GET /v1/images/{name}`).
    pub fn image(&self, name: &str) -> Result<ImageInfo> {
        json(self.send(self.request("GET", &format!("/v1/images/{}", image_path(name))))?, "an image")
    }

    /// Deletes the caller's image `name` (`DELETE /v1/images/{name}`).
    pub fn delete_image(&self, name: &str) -> Result<()> {
        drain(self.send(self.request("DELETE", &format!("/v1/images/{}", image_path(name))))?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_keep_their_slashes_in_the_path() {
        assert_eq!(image_path("127.0.0.1:5000/team/app:1"), "127.0.0.1%3A5000/team/app%3A1");
    }

    #[test]
    fn a_stream_ends_after_done_and_reports_an_early_end() {
        let text = "{\"type\":\"unpacking\",\"index\":0}\n{\"type\":\"error\",\"error\":{\"code\":\"not_found\",\"message\":\"no\"}}\n";
        let err = PullStream::new(Box::new(std::io::Cursor::new(text.as_bytes()))).wait().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
        let cut =
            PullStream::new(Box::new(std::io::Cursor::new(&b"{\"type\":\"unpacking\",\"index\":0}\n"[..]))).wait();
        assert_eq!(cut.unwrap_err().kind(), ErrorKind::Protocol);
    }
}
