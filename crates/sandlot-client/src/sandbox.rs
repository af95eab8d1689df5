//! [`Sandbox`]: a handle to one sandbox, for its commands, processes and files.

use std::io::{self, Read, Write};

use sandlot_api::{
    ExecRequest, ExecResult, FileList, FileStat, KillRequest, MkdirRequest, MoveRequest, ProcessInfo, ProcessList,
    ProcessStarted, PtySize, SandboxInfo, StdinRequest, User, WriteResult, NDJSON,
};

use crate::client::{drain, json, Client};
use crate::error::{Error, ErrorKind, Result};
use crate::stream::{EventStream, WatchEvents};
use crate::url;

/// A handle to one sandbox: its id plus the [`Client`] that reaches it. Making one sends nothing.
///
/// File operations run as the sandbox's `user` unless the handle is switched with
/// [`Sandbox::as_user`]; commands say who runs them in their [`ExecRequest`].
#[derive(Clone, Debug)]
pub struct Sandbox {
    client: Client,
    id: String,
    user: User,
    created: Option<SandboxInfo>,
}

impl Sandbox {
    pub(crate) fn new(client: Client, id: String) -> Sandbox {
        Sandbox { client, id, user: User::User, created: None }
    }

    pub(crate) fn with_info(client: Client, info: SandboxInfo) -> Sandbox {
        Sandbox { client, id: info.id.clone(), user: User::User, created: Some(info) }
    }

    /// The client this handle uses.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The sandbox id (`sb_…`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The server's answer to the create that made this handle (limits, expiry), as of then;
    /// `None` for handles from [`Client::sandbox`]. Use [`Sandbox::info`] for the current state.
    pub fn created(&self) -> Option<&SandboxInfo> {
        self.created.as_ref()
    }

    /// A handle whose file operations run as `user` (e.g. [`User::Root`] to write under `/etc`).
    pub fn as_user(&self, user: User) -> Sandbox {
        Sandbox { user, ..self.clone() }
    }

    /// Fetches the sandbox's current state.
    pub fn info(&self) -> Result<SandboxInfo> {
        self.client.get(&self.id)
    }

    /// Deletes the sandbox: its processes are killed and its files dropped.
    pub fn delete(&self) -> Result<()> {
        let response = self.client.send(self.client.request("DELETE", &self.path("")))?;
        drain(response);
        Ok(())
    }

    fn transition(&self, what: &str) -> Result<SandboxInfo> {
        let response = self.client.send(self.client.request("POST", &self.path(&format!("/{what}"))))?;
        json(response, "the sandbox")
    }

    /// Stops the sandbox: every process ends, the files stay (synced to disk before this returns).
    pub fn stop(&self) -> Result<SandboxInfo> {
        self.transition("stop")
    }

    /// Resumes a stopped sandbox (fresh processes, same files) or a paused one (processes continue).
    pub fn resume(&self) -> Result<SandboxInfo> {
        self.transition("resume")
    }

    /// Pauses the sandbox: every process is frozen in memory and uses no CPU until resumed.
    pub fn pause(&self) -> Result<SandboxInfo> {
        self.transition("pause")
    }

    /// Sets the sandbox's lifetime to `timeout_s` seconds from now.
    pub fn set_timeout(&self, timeout_s: u64) -> Result<SandboxInfo> {
        let http = self.client.request("POST", &self.path("/timeout"));
        let response = self.client.send_json(http, &sandlot_api::SetTimeout { timeout_s })?;
        json(response, "the sandbox")
    }

    /// Takes a read-only snapshot of the sandbox's files; create sandboxes from it with
    /// `CreateSandbox { snapshot: Some(id), .. }`.
    pub fn snapshot(&self, name: Option<&str>) -> Result<sandlot_api::SnapshotInfo> {
        let http = self.client.request("POST", &self.path("/snapshot"));
        let response = self.client.send_json(http, &sandlot_api::CreateSnapshot { name: name.map(str::to_string) })?;
        json(response, "the snapshot")
    }

    /// Makes `count` new running sandboxes, each with a copy-on-write copy of this one's files.
    pub fn fork(&self, count: u32) -> Result<Vec<Sandbox>> {
        let http = self.client.request("POST", &self.path("/fork"));
        let response = self.client.send_json(http, &sandlot_api::ForkRequest { count })?;
        let result: sandlot_api::ForkResult = json(response, "the fork result")?;
        Ok(result.sandboxes.into_iter().map(|info| Sandbox::with_info(self.client.clone(), info)).collect())
    }

    /// Exposes a server listening on `port` inside the sandbox; the answer's `url` reaches it over HTTP
    /// without an API key (a per-port token is in the URL).
    pub fn expose_port(&self, port: u16) -> Result<sandlot_api::PortInfo> {
        let http = self.client.request("POST", &self.path("/ports"));
        let response = self.client.send_json(http, &sandlot_api::ExposePort { port })?;
        json(response, "the exposed port")
    }

    /// Replaces the sandbox's network policy; new connections and DNS lookups follow it at once
    /// (open connections are left alone). Header values of `rules` are write-only: the returned
    /// description names the headers, never their values.
    pub fn set_network(&self, network: &sandlot_api::NetworkSpec) -> Result<SandboxInfo> {
        let http = self.client.request("PATCH", &self.path("/network"));
        let response = self.client.send_json(http, network)?;
        json(response, "the sandbox")
    }

    /// Sends a JSON `body` with `POST` to `path` (e.g. `/execute`) of the server listening on `port`
    /// inside the sandbox, through the server's port proxy (`/v1/sandboxes/{id}/ports/{port}/…`, with
    /// this client's key), and answers the response body as it arrives. Nothing listening there is
    /// an error with code `port_unreachable` (502), answered at once.
    pub fn port_post_json<T: serde::Serialize + ?Sized>(
        &self,
        port: u16,
        path: &str,
        body: &T,
    ) -> Result<impl Read + Send + 'static> {
        let path = format!("/ports/{port}/{}", path.trim_start_matches('/'));
        let response = self.client.send_json(self.client.request("POST", &self.path(&path)), body)?;
        Ok(response.into_reader())
    }

    /// Same as [`Sandbox::delete`] (the name other sandbox SDKs use).
    pub fn kill(&self) -> Result<()> {
        self.delete()
    }

    /// Runs a command to its end and returns its status and (capped) output.
    ///
    /// `request.background` must be false; use [`Sandbox::spawn`] for background processes.
    pub fn exec(&self, request: &ExecRequest) -> Result<ExecResult> {
        if request.background {
            return Err(Error::new(
                ErrorKind::Config,
                "exec waits for the command; use Sandbox::spawn for background: true",
            ));
        }
        let response = self.client.send_json(self.client.request("POST", &self.path("/exec")), request)?;
        json(response, "the exec result")
    }

    /// Runs `argv` (no shell) as the sandbox user and waits for it.
    pub fn run(&self, argv: &[&str]) -> Result<ExecResult> {
        self.exec(&ExecRequest { argv: Some(argv.iter().map(|s| s.to_string()).collect()), ..ExecRequest::default() })
    }

    /// Runs a command line with `/bin/sh -c` as the sandbox user and waits for it.
    pub fn shell(&self, command: &str) -> Result<ExecResult> {
        self.exec(&ExecRequest { shell: Some(command.to_string()), ..ExecRequest::default() })
    }

    /// Runs a command and streams its events (output chunks as they are written, then its exit).
    ///
    /// `request.background` must be false.
    pub fn exec_stream(&self, request: &ExecRequest) -> Result<EventStream> {
        if request.background {
            return Err(Error::new(
                ErrorKind::Config,
                "exec_stream follows the command; use Sandbox::spawn then Sandbox::logs for background: true",
            ));
        }
        let http = self.client.request("POST", &self.path("/exec")).set("Accept", NDJSON);
        let response = self.client.send_json(http, request)?;
        Ok(EventStream::new(response.into_reader()))
    }

    /// Starts a command in the background and returns its process id at once.
    pub fn spawn(&self, request: &ExecRequest) -> Result<u64> {
        let request = ExecRequest { background: true, ..request.clone() };
        let response = self.client.send_json(self.client.request("POST", &self.path("/exec")), &request)?;
        let started: ProcessStarted = json(response, "the started process")?;
        Ok(started.pid)
    }

    /// The sandbox's recent metrics samples (CPU, memory, processes, disk, network) taken after
    /// `since_ms` (Unix milliseconds; every kept sample with `None`), with its limits. The server
    /// samples every running sandbox on an interval and keeps a bounded window.
    pub fn metrics(&self, since_ms: Option<i64>) -> Result<sandlot_api::SandboxSamples> {
        let since = since_ms.map(|ms| ms.to_string());
        let query = since.as_deref().map(|s| url::query(&[("since", s)])).unwrap_or_default();
        let response = self.client.send(self.client.request("GET", &self.path(&format!("/metrics{query}"))))?;
        json(response, "the metrics samples")
    }

    /// Lists the processes started through the API, oldest first.
    pub fn processes(&self) -> Result<Vec<ProcessInfo>> {
        let response = self.client.send(self.client.request("GET", &self.path("/processes")))?;
        let list: ProcessList = json(response, "the process list")?;
        Ok(list.processes)
    }

    /// The processes started with `tag`, oldest first.
    pub fn processes_tagged(&self, tag: &str) -> Result<Vec<ProcessInfo>> {
        let path = self.path(&format!("/processes{}", url::query(&[("tag", tag)])));
        let response = self.client.send(self.client.request("GET", &path))?;
        let list: ProcessList = json(response, "the process list")?;
        Ok(list.processes)
    }

    /// Sets the terminal size of pty process `pid` (it gets SIGWINCH).
    pub fn resize(&self, pid: u64, rows: u16, cols: u16) -> Result<()> {
        let path = self.path(&format!("/processes/{pid}/resize"));
        let response = self.client.send_json(self.client.request("POST", &path), &PtySize { rows, cols })?;
        drain(response);
        Ok(())
    }

    /// Waits for background process `pid` to end and returns its result.
    pub fn wait(&self, pid: u64) -> Result<ExecResult> {
        let path = self.path(&format!("/processes/{pid}/wait"));
        let response = self.client.send(self.client.request("POST", &path))?;
        json(response, "the exec result")
    }

    /// Sends `signal` (default 9, SIGKILL) to process `pid`'s whole process group.
    pub fn kill_process(&self, pid: u64, signal: Option<i32>) -> Result<()> {
        let path = self.path(&format!("/processes/{pid}/kill"));
        let response = self.client.send_json(self.client.request("POST", &path), &KillRequest { signal })?;
        drain(response);
        Ok(())
    }

    /// Writes `data` to process `pid`'s standard input, then closes it if `eof`.
    pub fn write_stdin(&self, pid: u64, data: &str, eof: bool) -> Result<()> {
        let path = self.path(&format!("/processes/{pid}/stdin"));
        let body = StdinRequest { data: data.to_string(), eof };
        let response = self.client.send_json(self.client.request("POST", &path), &body)?;
        drain(response);
        Ok(())
    }

    /// Streams process `pid`'s events from its start, following it until it exits.
    pub fn logs(&self, pid: u64) -> Result<EventStream> {
        self.logs_from(pid, true)
    }

    /// Process `pid`'s events so far: its log, ending where the process is now (with `exited` only
    /// if it has ended).
    pub fn logs_so_far(&self, pid: u64) -> Result<EventStream> {
        self.logs_from(pid, false)
    }

    fn logs_from(&self, pid: u64, follow: bool) -> Result<EventStream> {
        let path = self.path(&format!("/processes/{pid}/logs{}", if follow { "" } else { "?follow=false" }));
        let http = self.client.request("GET", &path).set("Accept", NDJSON);
        let response = self.client.send(http)?;
        Ok(EventStream::new(response.into_reader()))
    }

    /// Writes `contents` to the file at `path` (created with mode 0644, or replaced).
    pub fn write_file(&self, path: &str, contents: &[u8]) -> Result<WriteResult> {
        self.write_file_from(path, contents, None)
    }

    /// Streams `reader` into the file at `path`; `mode` (e.g. `0o755`) defaults to the server's, 0644.
    pub fn write_file_from(&self, path: &str, reader: impl Read, mode: Option<u32>) -> Result<WriteResult> {
        let mode = mode.map(|m| format!("{m:04o}"));
        let mut pairs = vec![("path", path)];
        if let Some(mode) = &mode {
            pairs.push(("mode", mode.as_str()));
        }
        self.push_user(&mut pairs);
        let path = self.path(&format!("/files{}", url::query(&pairs)));
        let http = self.client.request("PUT", &path);
        let response = self.client.send_reader(http, "application/octet-stream", reader)?;
        json(response, "the write result")
    }

    /// Reads the whole file at `path` into memory.
    pub fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let mut contents = Vec::new();
        self.read_file_to(path, &mut contents)?;
        Ok(contents)
    }

    /// Streams the file at `path` into `writer`; returns the number of bytes copied.
    pub fn read_file_to(&self, path: &str, mut writer: impl Write) -> Result<u64> {
        let mut pairs = vec![("path", path)];
        self.push_user(&mut pairs);
        let path = self.path(&format!("/files{}", url::query(&pairs)));
        let response = self.client.send(self.client.request("GET", &path))?;
        copy(response, &mut writer, "the file")
    }

    /// Watches directory `path` (its whole tree with `recursive`) as this handle's user: its changes as
    /// they happen, until the iterator is dropped.
    pub fn watch(&self, path: &str, recursive: bool) -> Result<WatchEvents> {
        let mut pairs = vec![("path", path), ("recursive", if recursive { "true" } else { "false" })];
        self.push_user(&mut pairs);
        let path = self.path(&format!("/files/watch{}", url::query(&pairs)));
        let response = self.client.send(self.client.request("GET", &path).set("Accept", NDJSON))?;
        Ok(WatchEvents::new(response.into_reader()))
    }

    /// Lists the entries under directory `path`, `depth` levels down (1: direct children).
    pub fn list(&self, path: &str, depth: u32) -> Result<Vec<FileStat>> {
        let depth = depth.to_string();
        let mut pairs = vec![("path", path), ("depth", depth.as_str())];
        self.push_user(&mut pairs);
        let query = url::query(&pairs);
        let path = self.path(&format!("/files/list{query}"));
        let response = self.client.send(self.client.request("GET", &path))?;
        let list: FileList = json(response, "the file list")?;
        Ok(list.entries)
    }

    /// Metadata of `path` (symlinks are not followed).
    pub fn stat(&self, path: &str) -> Result<FileStat> {
        let mut pairs = vec![("path", path)];
        self.push_user(&mut pairs);
        let path = self.path(&format!("/files/stat{}", url::query(&pairs)));
        let response = self.client.send(self.client.request("GET", &path))?;
        json(response, "the file metadata")
    }

    /// Creates directory `path` and any missing parents; an existing directory is fine.
    pub fn mkdir(&self, path: &str) -> Result<()> {
        let body = MkdirRequest { path: path.to_string(), parents: true, user: self.user };
        let http = self.client.request("POST", &self.path("/files/mkdir"));
        drain(self.client.send_json(http, &body)?);
        Ok(())
    }

    /// Removes the file or empty directory at `path`; with `recursive`, a directory and its contents.
    pub fn remove(&self, path: &str, recursive: bool) -> Result<()> {
        let mut pairs = vec![("path", path)];
        if recursive {
            pairs.push(("recursive", "true"));
        }
        self.push_user(&mut pairs);
        let path = self.path(&format!("/files{}", url::query(&pairs)));
        drain(self.client.send(self.client.request("DELETE", &path))?);
        Ok(())
    }

    /// Moves `from` to `to`; an existing `to` is replaced only with `overwrite`.
    pub fn rename(&self, from: &str, to: &str, overwrite: bool) -> Result<()> {
        let body = MoveRequest { from: from.to_string(), to: to.to_string(), overwrite, user: self.user };
        let http = self.client.request("POST", &self.path("/files/move"));
        drain(self.client.send_json(http, &body)?);
        Ok(())
    }

    /// Unpacks the tar archive read from `reader` into directory `dir` (streamed, not buffered).
    pub fn upload_tar(&self, dir: &str, reader: impl Read) -> Result<WriteResult> {
        let mut pairs = vec![("path", dir)];
        self.push_user(&mut pairs);
        let path = self.path(&format!("/files/tar{}", url::query(&pairs)));
        let http = self.client.request("PUT", &path);
        let response = self.client.send_reader(http, "application/x-tar", reader)?;
        json(response, "the write result")
    }

    /// Streams directory `dir` as a tar archive into `writer`; returns the archive's size in bytes.
    pub fn download_tar(&self, dir: &str, mut writer: impl Write) -> Result<u64> {
        let mut pairs = vec![("path", dir)];
        self.push_user(&mut pairs);
        let path = self.path(&format!("/files/tar{}", url::query(&pairs)));
        let response = self.client.send(self.client.request("GET", &path))?;
        copy(response, &mut writer, "the tar archive")
    }

    /// `/v1/sandboxes/{id}{rest}`.
    fn path(&self, rest: &str) -> String {
        format!("/v1/sandboxes/{}{rest}", url::segment(&self.id))
    }

    fn push_user(&self, pairs: &mut Vec<(&str, &str)>) {
        if self.user != User::default() {
            pairs.push(("user", self.user.name()));
        }
    }
}

/// Copies an answer's body into `writer`, telling a broken download from a failed local write.
fn copy(response: ureq::Response, writer: &mut impl Write, what: &str) -> Result<u64> {
    let mut reader = response.into_reader();
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io(&format!("downloading {what}"), e)),
        };
        writer.write_all(&buf[..n]).map_err(|e| Error::io(&format!("writing {what}"), e))?;
        total += n as u64;
    }
    writer.flush().map_err(|e| Error::io(&format!("writing {what}"), e))?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_encode_the_id() {
        let sandbox = Client::new("http://h", "k").sandbox("sb/../x");
        assert_eq!(sandbox.path("/exec"), "/v1/sandboxes/sb%2F..%2Fx/exec");
    }

    #[test]
    fn background_exec_is_refused_locally() {
        let sandbox = Client::new("http://127.0.0.1:1", "k").sandbox("sb_x");
        let request = ExecRequest { background: true, ..ExecRequest::default() };
        assert_eq!(sandbox.exec(&request).unwrap_err().kind(), ErrorKind::Config);
    }

    #[test]
    fn as_user_keeps_the_id() {
        let sandbox = Client::new("http://h", "k").sandbox("sb_x").as_user(User::Root);
        assert_eq!(sandbox.id(), "sb_x");
        let mut pairs = Vec::new();
        sandbox.push_user(&mut pairs);
        assert_eq!(pairs, [("user", "root")]);
    }
}
