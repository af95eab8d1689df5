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
}

/// Gives the backend that acts for the caller of one MCP request: on HTTP, the one its own
/// `Authorization` key stands for; on stdio, always the same.
pub trait Connector: Send + Sync + 'static {
    type Backend: SandboxBackend;
    fn connect(&self, ctx: &RequestContext<RoleServer>) -> ToolResult<Self::Backend>;
}
