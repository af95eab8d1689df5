//! Image builds (`POST /v1/images/build`) and publishing a snapshot as an image.

use std::fmt;
use std::io::{BufRead, BufReader, Read};

use sandlot_api::{BuildEvent, BuildImage, ImageInfo, SnapshotImage, NDJSON};

use crate::client::{json, Client};
use crate::error::{Error, ErrorKind, Result};
use crate::url;

/// The events of a build, one [`BuildEvent`] per NDJSON line, ending after `done` or `error` (both
/// yielded as `Ok`). A connection that closes before either ends with an error of kind
/// [`ErrorKind::Protocol`].
pub struct BuildStream {
    reader: BufReader<Box<dyn Read + Send + Sync + 'static>>,
    line: Vec<u8>,
    finished: bool,
}

impl BuildStream {
    /// Reads the stream to its end and returns the image built, or the error the build ended with
    /// (its message names the failed line; the output tail is in the `error` event).
    pub fn wait(self) -> Result<ImageInfo> {
        for ev in self {
            match ev? {
                BuildEvent::Done { image } => return Ok(*image),
                BuildEvent::Error { error, .. } => return Err(Error::from_detail(error)),
                _ => {}
            }
        }
        Err(Error::new(ErrorKind::Protocol, "the build's stream ended without a result"))
    }
}

impl Iterator for BuildStream {
    type Item = Result<BuildEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.finished {
            return None;
        }
        loop {
            self.line.clear();
            match self.reader.read_until(b'\n', &mut self.line) {
                Err(e) => {
                    self.finished = true;
                    return Some(Err(Error::io("reading the build's events", e)));
                }
                Ok(0) => {
                    self.finished = true;
                    return Some(Err(Error::new(ErrorKind::Protocol, "the build's stream ended before its result")));
                }
                Ok(_) => {}
            }
            let line = self.line.trim_ascii();
            if line.is_empty() {
                continue;
            }
            return Some(match serde_json::from_slice::<BuildEvent>(line) {
                Ok(ev) => {
                    self.finished = matches!(ev, BuildEvent::Done { .. } | BuildEvent::Error { .. });
                    Ok(ev)
                }
                Err(e) => {
                    self.finished = true;
                    Err(Error::new(ErrorKind::Protocol, format!("a build event the client does not understand: {e}")))
                }
            });
        }
    }
}

impl fmt::Debug for BuildStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BuildStream").field("finished", &self.finished).finish_non_exhaustive()
    }
}

impl Client {
    /// Builds an image from `context`, a tar of the build context holding the Dockerfile
    /// (`POST /v1/images/build`); follow the returned stream or call [`BuildStream::wait`].
    pub fn build_image(&self, context: impl Read, request: &BuildImage) -> Result<BuildStream> {
        let mut pairs: Vec<(&str, String)> = vec![("name", request.name.clone())];
        if let Some(f) = &request.file {
            pairs.push(("file", f.clone()));
        }
        if request.public {
            pairs.push(("public", "true".into()));
        }
        if request.no_cache {
            pairs.push(("no_cache", "true".into()));
        }
        pairs.extend(request.allow.iter().map(|a| ("allow", a.clone())));
        pairs.extend(request.build_args.iter().map(|(k, v)| ("build_arg", format!("{k}={v}"))));
        if let Some(m) = request.memory_mb {
            pairs.push(("memory_mb", m.to_string()));
        }
        if let Some(c) = request.cpu {
            pairs.push(("cpu", c.to_string()));
        }
        if let Some(t) = request.timeout_s {
            pairs.push(("timeout_s", t.to_string()));
        }
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let path = format!("/v1/images/build{}", url::query(&pairs));
        let http = self.request("POST", &path).set("Accept", NDJSON);
        let response = self.send_reader(http, "application/x-tar", context)?;
        Ok(BuildStream { reader: BufReader::new(Box::new(response.into_reader())), line: Vec::new(), finished: false })
    }

    /// Publishes the caller's snapshot `snapshot` (id or name) as the image `name`: the image its
    /// sandbox booted with the snapshot's files on top (`POST /v1/snapshots/{id}/image`).
    pub fn snapshot_image(&self, snapshot: &str, name: &str) -> Result<ImageInfo> {
        let http = self.request("POST", &format!("/v1/snapshots/{}/image", url::segment(snapshot)));
        let response = self.send_json(http, &SnapshotImage { name: name.to_string() })?;
        json(response, "the image")
    }
}
