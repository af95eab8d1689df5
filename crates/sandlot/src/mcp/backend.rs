//! What the MCP tools ask of sandlot: a small trait with two implementations, the server's
//! (`Control` and the request's `Caller`, in `server/mcp.rs`) and the CLI's (the Rust client, in
//! `cli/mcp.rs`). The tools are written once against it.

use std::future::Future;

use rmcp::service::RequestContext;
use rmcp::RoleServer;
use sandlot_api::{
    CreateSandbox, ExecRequest, ExecResult, FileStat, NetworkSpec, PortInfo, SandboxInfo, SnapshotInfo, WriteResult,
};

/// A failed call, as the model reads it: the server's message (what went wrong and what to do), its
/// stable code and whether trying again may work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    /// The API's error code (`not_found`, `invalid_request`, …).
    pub code: String,
    /// What went wrong and what to do.
    pub message: String,
    /// Whether the same call may succeed later.
    pub retryable: bool,
}

impl ToolError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ToolError { code: code.into(), message: message.into(), retryable: false }
    }

    /// The text of the tool result.
    pub fn text(&self) -> String {
        let retry = if self.retryable { "; retrying later may work" } else { "" };
        format!("error ({}{retry}): {}", self.code, self.message)
    }
}

pub type ToolResult<T> = std::result::Result<T, ToolError>;

/// The port the code interpreter (`resources/code-interpreter/server.py`) listens on in a sandbox.
pub const INTERPRETER_PORT: u16 = 49999;
/// The most of a cell's NDJSON answer read (the interpreter itself stops a cell's output at 16 MiB).
pub const MAX_INTERPRETER_ANSWER: usize = 24 << 20;

/// A cell's NDJSON answer as values; a line that is not JSON is an error (not the interpreter).
pub fn parse_interpreter_lines(body: &[u8]) -> ToolResult<Vec<serde_json::Value>> {
    body.split(|b| *b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .map(|l| {
            serde_json::from_slice(l).map_err(|e| {
                ToolError::new(
                    "internal",
                    format!("port {INTERPRETER_PORT} answered something other than the code interpreter's lines: {e}"),
                )
            })
        })
        .collect()
}

/// A file's first bytes and its whole size.
#[derive(Debug, Default)]
pub struct FileHead {
    /// At most the asked number of bytes from the start.
    pub head: Vec<u8>,
    /// The file's size in bytes.
    pub total: u64,
}

/// sandlot's operations, acting for one tenant.
pub trait SandboxBackend: Clone + Send + Sync + 'static {
    /// Whom this backend acts for (the tenant on HTTP); a session is bound to its first caller's.
    fn owner(&self) -> &str;
    fn create(&self, req: CreateSandbox) -> impl Future<Output = ToolResult<SandboxInfo>> + Send;
    fn list(&self) -> impl Future<Output = ToolResult<Vec<SandboxInfo>>> + Send;
    fn delete(&self, id: String) -> impl Future<Output = ToolResult<()>> + Send;
    /// The sandbox's record (a deleted one's too: state `deleted`).
    fn info(&self, id: String) -> impl Future<Output = ToolResult<SandboxInfo>> + Send;
    /// A foreground command, to its end.
    fn exec(&self, id: String, req: ExecRequest) -> impl Future<Output = ToolResult<ExecResult>> + Send;
    /// The first `limit` bytes of a file and its size.
    fn read_file(&self, id: String, path: String, limit: usize) -> impl Future<Output = ToolResult<FileHead>> + Send;
    fn write_file(
        &self,
        id: String,
        path: String,
        contents: Vec<u8>,
    ) -> impl Future<Output = ToolResult<WriteResult>> + Send;
    fn list_files(
        &self,
        id: String,
        path: String,
        depth: u32,
    ) -> impl Future<Output = ToolResult<Vec<FileStat>>> + Send;
    fn set_network(&self, id: String, spec: NetworkSpec) -> impl Future<Output = ToolResult<SandboxInfo>> + Send;
    fn snapshot(&self, id: String, name: Option<String>) -> impl Future<Output = ToolResult<SnapshotInfo>> + Send;
    /// The port's preview URL.
    fn expose_port(&self, id: String, port: u16) -> impl Future<Output = ToolResult<PortInfo>> + Send;
    /// Runs one cell in the sandbox's code interpreter (`POST /execute` with `body` on port
    /// [`INTERPRETER_PORT`]) and answers its NDJSON lines, or `None` when nothing listens on that
    /// port (answered at once, without waiting for one to start).
    fn interpreter_execute(
        &self,
        id: String,
        body: serde_json::Value,
    ) -> impl Future<Output = ToolResult<Option<Vec<serde_json::Value>>>> + Send;
    /// Whether the image's start command (`sandlot.start`) runs in the sandbox now: what starts a code
    /// interpreter, which may not listen yet right after a boot.
    fn start_command_running(&self, id: String) -> impl Future<Output = ToolResult<bool>> + Send;
    /// Streams the file `local` of the machine this backend runs on into `path` of the sandbox. Only
    /// a backend on the user's machine (stdio) has one; the server's refuses.
    fn upload_local(
        &self,
        id: String,
        local: String,
        path: String,
    ) -> impl Future<Output = ToolResult<WriteResult>> + Send {
        let _ = (id, local, path);
        async { Err(no_local_files()) }
    }
    /// Streams the sandbox's file `path` into the file `local` of the machine this backend runs on
    /// (replaced whole once complete); answers its size. Only on the user's machine (stdio).
    fn download_local(&self, id: String, path: String, local: String) -> impl Future<Output = ToolResult<u64>> + Send {
        let _ = (id, path, local);
        async { Err(no_local_files()) }
    }
}

fn no_local_files() -> ToolError {
    ToolError::new(
        "invalid_request",
        "this MCP transport has no client filesystem: upload_file and download_file are stdio's",
    )
}

/// Gives the backend that acts for the caller of one MCP request: on HTTP, the one its own
/// `Authorization` key stands for; on stdio, always the same.
pub trait Connector: Send + Sync + 'static {
    type Backend: SandboxBackend;
    fn connect(&self, ctx: &RequestContext<RoleServer>) -> ToolResult<Self::Backend>;
    /// Whether the backend runs on the user's own machine (stdio), so files move between it and a
    /// sandbox (`upload_file`, `download_file`). The HTTP server has no client filesystem.
    fn local_files(&self) -> bool {
        false
    }
}
