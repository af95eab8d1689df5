//! `sandlot mcp`: the MCP tools (`crate::mcp`) over stdio, for desktop agents and IDEs, acting through
//! the Rust client with the CLI's server and key.

use std::io::Write;
use std::sync::Arc;

use anyhow::Context;
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServiceExt};
use sandlot_client::api::{
    CreateSandbox, ExecRequest, ExecResult, FileStat, NetworkSpec, PortInfo, SandboxInfo, SnapshotInfo, WriteResult,
};
use sandlot_client::{Client, ErrorKind};

use super::Conn;
use crate::mcp::{
    parse_interpreter_lines, Connector, FileHead, SandboxBackend, SandlotMcp, ToolError, ToolResult, INTERPRETER_PORT,
    MAX_INTERPRETER_ANSWER, START_TAG,
};

pub const LONG_ABOUT: &str = "\
Serve sandlot's tools to an AI agent over MCP (the Model Context Protocol) on stdin/stdout: the \
transport desktop agents and IDEs (Claude Desktop, Cursor, VS Code, …) start as a child process. \
The agent gets tools to create sandboxes, run commands and code (python or bash; in the code \
interpreter, with state kept between calls, where the sandbox's image runs it), read, write and list \
files, copy files between this machine and a sandbox (upload_file, download_file: stdio only), change \
a sandbox's network, snapshot it and expose a port.

The first tool call that needs a sandbox creates this session's sandbox (default image and limits, no \
network) and later calls reuse it. Sandboxes the session creates are deleted when it ends (stdin \
closed, SIGTERM, SIGINT) unless created with keep=true. Outputs are cut to 16 KiB per stream by \
default, saying how many bytes were left out. The same tools are served over streamable HTTP at \
/mcp on the server (`Authorization: Bearer KEY`).

Environment:
  SANDLOT_URL       the server (default http://127.0.0.1:7423)
  SANDLOT_API_KEY   the API key the tools act with (a tenant's key: sandlot keys create --tenant NAME)
  SANDLOT_LOG       what to log on stderr (default warn)

An MCP client's configuration (claude_desktop_config.json, .cursor/mcp.json, …):
  {
    \"mcpServers\": {
      \"sandlot\": {
        \"command\": \"sandlot\",
        \"args\": [\"mcp\"],
        \"env\": {\"SANDLOT_URL\": \"http://127.0.0.1:7423\", \"SANDLOT_API_KEY\": \"sk_...\"}
      }
    }
  }";

/// Options of `sandlot mcp`.
#[derive(clap::Args, Debug)]
pub struct McpArgs {
    #[command(flatten)]
    pub conn: Conn,
}

/// The tools' backend in the CLI: the blocking Rust client, on tokio's blocking threads.
#[derive(Clone)]
pub struct ClientBackend {
    client: Client,
}

fn tool_error(e: sandlot_client::Error) -> ToolError {
    ToolError {
        code: e.code().map(str::to_string).unwrap_or_else(|| format!("{:?}", e.kind()).to_lowercase()),
        retryable: e.is_retryable(),
        message: e.to_string(),
    }
}

impl ClientBackend {
    /// Runs a blocking client call off the runtime's threads.
    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Client) -> sandlot_client::Result<T> + Send + 'static,
    ) -> ToolResult<T> {
        let client = self.client.clone();
        match tokio::task::spawn_blocking(move || f(&client)).await {
            Ok(r) => r.map_err(tool_error),
            Err(e) => Err(ToolError::new("internal", format!("the client call failed: {e}"))),
        }
    }
}

impl SandboxBackend for ClientBackend {
    fn owner(&self) -> &str {
        // One process, one key.
        "stdio"
    }

    async fn create(&self, req: CreateSandbox) -> ToolResult<SandboxInfo> {
        self.call(move |c| {
            let sb = c.create(&req)?;
            match sb.created() {
                Some(info) => Ok(info.clone()),
                None => sb.info(),
            }
        })
        .await
    }

    async fn list(&self) -> ToolResult<Vec<SandboxInfo>> {
        self.call(|c| c.list()).await
    }

    async fn delete(&self, id: String) -> ToolResult<()> {
        self.call(move |c| c.sandbox(id).delete()).await
    }

    async fn info(&self, id: String) -> ToolResult<SandboxInfo> {
        self.call(move |c| c.sandbox(id).info()).await
    }

    async fn exec(&self, id: String, req: ExecRequest) -> ToolResult<ExecResult> {
        self.call(move |c| c.sandbox(id).exec(&req)).await
    }

    async fn read_file(&self, id: String, path: String, limit: usize) -> ToolResult<FileHead> {
        self.call(move |c| {
            let mut head = Head { head: Vec::new(), limit };
            let total = c.sandbox(id).read_file_to(&path, &mut head)?;
            Ok(FileHead { head: head.head, total })
        })
        .await
    }

    async fn write_file(&self, id: String, path: String, contents: Vec<u8>) -> ToolResult<WriteResult> {
        self.call(move |c| c.sandbox(id).write_file(&path, &contents)).await
    }

    async fn list_files(&self, id: String, path: String, depth: u32) -> ToolResult<Vec<FileStat>> {
        self.call(move |c| c.sandbox(id).list(&path, depth)).await
    }

    async fn set_network(&self, id: String, spec: NetworkSpec) -> ToolResult<SandboxInfo> {
        self.call(move |c| c.sandbox(id).set_network(&spec)).await
    }

    async fn snapshot(&self, id: String, name: Option<String>) -> ToolResult<SnapshotInfo> {
        self.call(move |c| c.sandbox(id).snapshot(name.as_deref())).await
    }

    async fn expose_port(&self, id: String, port: u16) -> ToolResult<PortInfo> {
        self.call(move |c| c.sandbox(id).expose_port(port)).await
    }

    async fn interpreter_execute(
        &self,
        id: String,
        body: serde_json::Value,
    ) -> ToolResult<Option<Vec<serde_json::Value>>> {
        let client = self.client.clone();
        let read = tokio::task::spawn_blocking(move || -> ToolResult<Option<Vec<u8>>> {
            let reader = match client.sandbox(id).port_post_json(INTERPRETER_PORT, "/execute", &body) {
                Ok(r) => r,
                Err(e) if e.code() == Some(sandlot_client::api::codes::PORT_UNREACHABLE) => return Ok(None),
                Err(e) => return Err(tool_error(e)),
            };
            let mut bytes = Vec::new();
            // The interpreter bounds a cell's output; this bounds what is read whatever answers there.
            std::io::Read::read_to_end(&mut std::io::Read::take(reader, MAX_INTERPRETER_ANSWER as u64), &mut bytes)
                .map_err(|e| ToolError::new("internal", format!("reading the code interpreter's answer: {e}")))?;
            Ok(Some(bytes))
        })
        .await
        .map_err(|e| ToolError::new("internal", format!("the client call failed: {e}")))??;
        match read {
            Some(bytes) => parse_interpreter_lines(&bytes).map(Some),
            None => Ok(None),
        }
    }

    async fn upload_local(&self, id: String, local: String, path: String) -> ToolResult<WriteResult> {
        let file = std::fs::File::open(&local).map_err(|e| local_error(&local, "reading", &e))?;
        if file.metadata().map(|m| m.is_dir()).unwrap_or(false) {
            return Err(ToolError::new(
                "invalid_request",
                format!("{local} is a directory on this machine; give a file"),
            ));
        }
        self.call(move |c| c.sandbox(id).write_file_from(&path, std::io::BufReader::new(file), None)).await
    }

    async fn download_local(&self, id: String, path: String, local: String) -> ToolResult<u64> {
        let target = std::path::PathBuf::from(&local);
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).ok_or_else(|| {
            ToolError::new("invalid_request", format!("{local} names no file on this machine; give a file path"))
        })?;
        if target.is_dir() {
            return Err(ToolError::new(
                "invalid_request",
                format!("{local} is a directory on this machine; give a file path"),
            ));
        }
        let dir = target.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| local_error(&dir.to_string_lossy(), "making", &e))?;
        // Written beside the target and renamed over it once complete: a failed copy leaves no half file.
        let part = dir.join(format!(".{name}.sandlot-part-{}", std::process::id()));
        let file = std::fs::File::create(&part).map_err(|e| local_error(&part.to_string_lossy(), "writing", &e))?;
        let copied = self
            .call(move |c| {
                let mut out = std::io::BufWriter::new(file);
                let n = c.sandbox(id).read_file_to(&path, &mut out)?;
                // The local write's own failure (a full disk) is told apart from the download's.
                Ok((n, std::io::Write::flush(&mut out)))
            })
            .await;
        let renamed = copied.and_then(|(n, flushed)| {
            flushed.map_err(|e| local_error(&local, "writing", &e))?;
            std::fs::rename(&part, &target).map_err(|e| local_error(&local, "writing", &e))?;
            Ok(n)
        });
        if renamed.is_err() {
            let _ = std::fs::remove_file(&part);
        }
        renamed
    }

    async fn start_command_running(&self, id: String) -> ToolResult<bool> {
        let list = self.call(move |c| c.sandbox(id).processes_tagged(START_TAG)).await?;
        Ok(list.iter().any(|p| p.running))
    }
}

/// A failure with a file of this machine, said as the model needs it: which file, on which side.
fn local_error(path: &str, doing: &str, e: &std::io::Error) -> ToolError {
    let code = match e.kind() {
        std::io::ErrorKind::NotFound => "file_not_found",
        std::io::ErrorKind::PermissionDenied => "permission_denied",
        _ => "invalid_request",
    };
    ToolError::new(code, format!("{doing} {path} on this machine (where `sandlot mcp` runs): {e}"))
}

/// Keeps the first `limit` bytes written to it and takes (and drops) the rest.
struct Head {
    head: Vec<u8>,
    limit: usize,
}

impl Write for Head {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = self.limit.saturating_sub(self.head.len());
        self.head.extend_from_slice(&buf[..room.min(buf.len())]);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// On stdio every call acts with the process's key.
struct ClientConnector {
    backend: ClientBackend,
}

impl Connector for ClientConnector {
    type Backend = ClientBackend;

    fn connect(&self, _ctx: &RequestContext<RoleServer>) -> ToolResult<ClientBackend> {
        Ok(self.backend.clone())
    }

    fn local_files(&self) -> bool {
        true
    }
}

/// Serves MCP on stdin/stdout until stdin ends or a signal comes, then deletes the session's
/// sandboxes. A key the server refuses ends it at once (exit 1, the reason on stderr); a server that
/// does not answer yet is only a warning: each tool call says so.
pub fn run(args: McpArgs) -> anyhow::Result<i32> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SANDLOT_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let client = args.conn.client()?;
    match client.list() {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::Connect => {
            tracing::warn!("no sandlot server answers at {} yet: {e}", args.conn.url);
        }
        Err(e) => return Err(anyhow::Error::new(e).context(format!("checking the API key with {}", args.conn.url))),
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let served = rt.block_on(serve(ClientBackend { client }));
    // stdin's reader may still be blocked in a read on one of the runtime's threads (after SIGTERM):
    // the session's sandboxes are gone already, so nothing is left to wait for.
    rt.shutdown_background();
    served?;
    Ok(0)
}

async fn serve(backend: ClientBackend) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let handler = SandlotMcp::new(Arc::new(ClientConnector { backend }));
    let session = handler.session();
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let running = handler.serve(rmcp::transport::stdio()).await.context("the MCP handshake on stdio")?;
    tokio::select! {
        r = running.waiting() => {
            if let Err(e) = r {
                tracing::warn!("the MCP session ended: {e}");
            }
        }
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    session.close().await;
    Ok(())
}
