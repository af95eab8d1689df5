//! The MCP surface: sandlot's tools for AI agents, written once and served over two transports,
//! stdio (`sandlot mcp`, through the Rust client) and streamable HTTP (`/mcp` on the API listener,
//! through the control layer). What the tools need is [`SandboxBackend`]; the session rules are
//! [`session::Session`]'s; this module turns arguments into backend calls and results into text a
//! model can read, within a size it can afford.

mod backend;
mod session;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler};
use sandlot_api::{CreateSandbox, ExecRequest, ExecResult, Mode, NetworkSpec, User};
use serde::Deserialize;

pub use backend::{
    parse_interpreter_lines, Connector, FileHead, SandboxBackend, ToolError, ToolResult, INTERPRETER_PORT,
    MAX_INTERPRETER_ANSWER,
};

/// The tag of the process an image's `sandlot.start` command runs as.
pub const START_TAG: &str = "sandlot.start";
pub use session::Session;

/// Default cap of each output stream and of a file read, in bytes: enough to read, little enough not
/// to flood a model's context.
pub const DEFAULT_OUTPUT_BYTES: u64 = 16 << 10;
/// Wall-clock limit of a `run_code` cell when none is given, in seconds.
const DEFAULT_CODE_TIMEOUT_S: f64 = 60.0;
/// How long `run_code` waits for a code interpreter to listen while the image's start command runs.
const INTERPRETER_START_WAIT: Duration = Duration::from_secs(10);
/// Entries `list_files` shows at most.
const MAX_ENTRIES: usize = 500;

const INSTRUCTIONS: &str = "sandlot runs code you do not trust in isolated Linux sandboxes. \
Call run_code or run_command right away: the first call that needs a sandbox creates this session's \
sandbox (default image, default limits, no network) and later calls reuse it, files included. \
Sandboxes this session creates are deleted when the session ends, unless created with keep=true. \
Pass sandbox_id to act on another of your sandboxes (list_sandboxes). Outputs over the cap are cut \
in the middle; the text says how many bytes were left out.";

const LOCAL_FILES_INSTRUCTIONS: &str = "This server runs on the user's machine: upload_file and download_file \
copy files (any size, binary too) between it and a sandbox.";

/// The MCP server of one session: its tools, its state, and how it reaches sandlot.
pub struct SandlotMcp<C: Connector> {
    connector: Arc<C>,
    session: Arc<Session<C::Backend>>,
    tool_router: ToolRouter<Self>,
    /// Whether the transport offers `upload_file` and `download_file` (stdio).
    local_files: bool,
}

impl<C: Connector> Clone for SandlotMcp<C> {
    fn clone(&self) -> Self {
        SandlotMcp {
            connector: Arc::clone(&self.connector),
            session: Arc::clone(&self.session),
            tool_router: self.tool_router.clone(),
            local_files: self.local_files,
        }
    }
}

/// Who a command runs as.
#[derive(Debug, Clone, Copy, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunAs {
    /// uid 1000, home /home/user (the default).
    #[default]
    User,
    /// root of the sandbox's own user namespace (not of the host).
    Root,
}

impl From<RunAs> for User {
    fn from(r: RunAs) -> User {
        match r {
            RunAs::User => User::User,
            RunAs::Root => User::Root,
        }
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    /// Image to boot (default: the server's default image, e.g. `host`, which has python3 and bash).
    #[serde(default)]
    pub image: Option<String>,
    /// CPU limit in cores (fractions allowed, e.g. 0.5).
    #[serde(default)]
    pub cpu: Option<f64>,
    /// Memory limit in MiB.
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// Lifetime in seconds (default: the server's, 300).
    #[serde(default)]
    pub timeout_s: Option<u64>,
    /// Hosts the sandbox may reach, e.g. ["pypi.org", "*.pythonhosted.org"]. Absent or empty: no
    /// network at all (the default).
    #[serde(default)]
    pub allow: Vec<String>,
    /// Keep the sandbox after this session ends (default false: it is deleted with the session).
    #[serde(default)]
    pub keep: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxArg {
    /// The sandbox (default: this session's sandbox).
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCommandArgs {
    /// A shell command line, run with `/bin/sh -c`. Give this or `argv`.
    #[serde(default)]
    pub command: Option<String>,
    /// Program and arguments, run without a shell. Give this or `command`.
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    /// Working directory (default: the user's home, /home/user).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Who runs it: `user` (default) or `root` (the sandbox's own root, not the host's).
    #[serde(default)]
    pub user: Option<RunAs>,
    /// Text fed to standard input.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Wall-clock limit in seconds (default 60); the command is killed when it passes.
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// Bytes of each of stdout and stderr to return (default 16384, at least 1024); longer output
    /// keeps its head and tail.
    #[serde(default)]
    pub max_output_bytes: Option<u64>,
    /// The sandbox (default: this session's sandbox).
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

/// Language of `run_code`.
#[derive(Debug, Clone, Copy, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Language {
    /// Python (the default): the code interpreter's kernel, else `python3 -c CODE`.
    #[default]
    Python,
    /// bash: the code interpreter's bash, else `bash -c CODE`.
    Bash,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCodeArgs {
    /// The program's source.
    pub code: String,
    /// `python` (default) or `bash`.
    #[serde(default)]
    pub language: Language,
    /// Wall-clock limit in seconds (default 60).
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// Bytes of each of stdout and stderr to return (default 16384, at least 1024).
    #[serde(default)]
    pub max_output_bytes: Option<u64>,
    /// The sandbox (default: this session's sandbox).
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// Path in the sandbox; relative paths are under /home/user.
    pub path: String,
    /// Bytes to return at most (default 16384); the text says how many more the file has.
    #[serde(default)]
    pub max_bytes: Option<u64>,
    /// The sandbox (default: this session's sandbox).
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// Path in the sandbox; relative paths are under /home/user. Missing parent directories are made.
    pub path: String,
    /// The file's text (UTF-8); an existing file is replaced.
    pub content: String,
    /// The sandbox (default: this session's sandbox).
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFilesArgs {
    /// Directory in the sandbox (default: /home/user).
    #[serde(default)]
    pub path: Option<String>,
    /// Levels to descend (default 1: the directory's own entries).
    #[serde(default)]
    pub depth: Option<u32>,
    /// The sandbox (default: this session's sandbox).
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

/// Network mode of `set_network`.
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NetMode {
    /// No network (the default of every sandbox).
    Deny,
    /// Only the hosts in `allow`.
    Allowlist,
    /// Every public address (private and metadata ranges stay refused).
    AllowAll,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetNetworkArgs {
    /// `deny`, `allowlist` or `allow_all`.
    pub mode: NetMode,
    /// With `allowlist`: host names (`pypi.org`, `*.pythonhosted.org`) and CIDRs.
    #[serde(default)]
    pub allow: Vec<String>,
    /// The sandbox (default: this session's sandbox).
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotArgs {
    /// A name for the snapshot (letters, digits, `-_.`).
    #[serde(default)]
    pub name: Option<String>,
    /// The sandbox (default: this session's sandbox).
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExposePortArgs {
    /// Port a server listens on inside the sandbox (start it in the background first, e.g.
    /// `nohup python3 -m http.server 8000 >/dev/null 2>&1 &`).
    pub port: u16,
    /// The sandbox (default: this session's sandbox).
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadArgs {
    /// The file on your machine (where `sandlot mcp` runs); a relative path is from its working directory.
    pub local_path: String,
    /// Where it goes in the sandbox (replaced if it exists; parent directories are made). Relative
    /// paths are under /home/user.
    pub path: String,
    /// The sandbox (default: this session's sandbox).
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DownloadArgs {
    /// The file in the sandbox. Relative paths are under /home/user.
    pub path: String,
    /// Where it goes on your machine (where `sandlot mcp` runs; replaced if it exists, parent
    /// directories are made); a relative path is from its working directory.
    pub local_path: String,
    /// The sandbox (default: this session's sandbox).
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

fn ok(text: impl Into<String>) -> Result<CallToolResult, ErrorData> {
    Ok(CallToolResult::success(vec![ContentBlock::text(text.into())]))
}

/// A failure as a tool result the model reads (`is_error`), not a protocol error.
fn answer(r: ToolResult<String>) -> Result<CallToolResult, ErrorData> {
    match r {
        Ok(text) => ok(text),
        Err(e) => Ok(CallToolResult::error(vec![ContentBlock::text(e.text())])),
    }
}

impl<C: Connector> SandlotMcp<C> {
    /// The backend of this request's caller, bound to the session.
    fn backend(&self, ctx: &RequestContext<RoleServer>) -> ToolResult<C::Backend> {
        let backend = self.connector.connect(ctx)?;
        self.session.check_owner(&backend)?;
        Ok(backend)
    }

    /// The session, for closing it when a transport ends.
    pub fn session(&self) -> Arc<Session<C::Backend>> {
        Arc::clone(&self.session)
    }

    async fn exec(&self, ctx: &RequestContext<RoleServer>, id: Option<String>, req: ExecRequest) -> ToolResult<String> {
        let b = self.backend(ctx)?;
        let id = self.session.sandbox(&b, id).await?;
        let r = b.exec(id.clone(), req).await?;
        Ok(format_exec(&id, &r))
    }

    /// Runs a cell in `id`'s code interpreter: its lines, or `None` when the sandbox has none (then
    /// remembered for the session, so later calls go straight to the fallback). Nothing listening is
    /// waited for only while the image's start command runs (the interpreter may be starting right
    /// after a boot), at most [`INTERPRETER_START_WAIT`].
    async fn interpreter(
        &self,
        b: &C::Backend,
        id: &str,
        body: serde_json::Value,
        timeout_s: f64,
    ) -> ToolResult<Option<Vec<serde_json::Value>>> {
        if self.session.interpreter(id) == Some(false) {
            return Ok(None);
        }
        let give_up = tokio::time::Instant::now() + INTERPRETER_START_WAIT;
        // The interpreter ends the cell at `timeout`; this is for one that never answers at all.
        let limit = Duration::from_secs_f64(timeout_s.clamp(0.0, 86_400.0)) + Duration::from_secs(30);
        let mut starting = None;
        loop {
            match tokio::time::timeout(limit, b.interpreter_execute(id.to_string(), body.clone())).await {
                Err(_) => {
                    return Err(ToolError::new(
                        "timeout",
                        format!("the code interpreter of sandbox {id} did not answer in {} s", limit.as_secs()),
                    ))
                }
                Ok(r) => {
                    if let Some(lines) = r? {
                        self.session.set_interpreter(id, true);
                        return Ok(Some(lines));
                    }
                }
            }
            if starting.is_none() {
                starting = Some(b.start_command_running(id.to_string()).await.unwrap_or(false));
            }
            if starting == Some(false) || tokio::time::Instant::now() >= give_up {
                self.session.set_interpreter(id, false);
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[tool_router]
impl<C: Connector> SandlotMcp<C> {
    pub fn new(connector: Arc<C>) -> Self {
        let local_files = connector.local_files();
        let mut tool_router = Self::tool_router();
        if local_files {
            tool_router += Self::local_files_router();
        }
        SandlotMcp { connector, session: Arc::default(), tool_router, local_files }
    }

    #[tool(description = "Create a sandbox and make it this session's sandbox (later calls without sandbox_id use \
                          it). It has no network unless `allow` lists hosts. It is deleted when this session ends \
                          unless keep=true. You rarely need this: run_code and run_command create a default \
                          sandbox on first use. Returns the sandbox id.")]
    async fn create_sandbox(
        &self,
        Parameters(a): Parameters<CreateArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let b = self.backend(&ctx)?;
                let network = (!a.allow.is_empty()).then(|| NetworkSpec {
                    mode: Mode::Allowlist,
                    allow: a.allow.clone(),
                    ..Default::default()
                });
                let req = CreateSandbox {
                    image: a.image,
                    cpu: a.cpu,
                    memory_mb: a.memory_mb,
                    timeout_s: a.timeout_s,
                    network,
                    metadata: [("sandlot.mcp".to_string(), "created".to_string())].into(),
                    ..Default::default()
                };
                let info = b.create(req).await?;
                self.session.made(&b, &info.id, a.keep);
                self.session.set_current(&info.id).await;
                let lim = &info.limits;
                Ok(format!(
                    "created sandbox {} (image {}, {} cpu, {} MiB memory, network: {}); it is now this session's \
                     sandbox{}",
                    info.id,
                    info.image,
                    lim.cpu,
                    lim.memory_mb,
                    if a.allow.is_empty() { "none".to_string() } else { a.allow.join(", ") },
                    if a.keep { " and is kept after the session" } else { " and is deleted when the session ends" }
                ))
            }
            .await,
        )
    }

    #[tool(description = "List your sandboxes that are not deleted: id, state, image. The one marked `*` is this \
                          session's sandbox.")]
    async fn list_sandboxes(&self, ctx: RequestContext<RoleServer>) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let b = self.backend(&ctx)?;
                let list = b.list().await?;
                let current = self.session.current().await;
                if list.is_empty() {
                    return Ok("no sandboxes".to_string());
                }
                let lines: Vec<String> = list
                    .iter()
                    .map(|s| {
                        let mark = if current.as_deref() == Some(s.id.as_str()) { "* " } else { "  " };
                        let name = s.name.as_deref().map(|n| format!(" name={n}")).unwrap_or_default();
                        format!("{mark}{} {} image={}{name}", s.id, s.state.as_str(), s.image)
                    })
                    .collect();
                Ok(lines.join("\n"))
            }
            .await,
        )
    }

    #[tool(description = "Delete a sandbox and everything in it (default: this session's sandbox; the next call \
                          that needs one creates a fresh sandbox).")]
    async fn delete_sandbox(
        &self,
        Parameters(a): Parameters<SandboxArg>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let b = self.backend(&ctx)?;
                let id = match a.sandbox_id.filter(|s| !s.is_empty()) {
                    Some(id) => id,
                    None => self.session.current().await.ok_or_else(|| {
                        ToolError::new("invalid_request", "this session has no sandbox; give sandbox_id")
                    })?,
                };
                b.delete(id.clone()).await?;
                self.session.forget(&id).await;
                Ok(format!("deleted sandbox {id}"))
            }
            .await,
        )
    }

    #[tool(description = "Run a command in a sandbox and return its exit code, stdout and stderr. Give `command` \
                          (a shell line, e.g. \"ls -la | head\") or `argv`. Runs as an unprivileged user in \
                          /home/user by default; set user=root for package installs. Output over max_output_bytes \
                          per stream keeps its head and tail and says how many bytes were omitted.")]
    async fn run_command(
        &self,
        Parameters(a): Parameters<RunCommandArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let req = match (a.command, a.argv) {
            (Some(c), None) => ExecRequest { shell: Some(c), ..Default::default() },
            (None, Some(argv)) if !argv.is_empty() => ExecRequest { argv: Some(argv), ..Default::default() },
            _ => {
                return answer(Err(ToolError::new(
                    "invalid_request",
                    "give exactly one of `command` (a shell line) and `argv` (a non-empty list)",
                )))
            }
        };
        let req = ExecRequest {
            cwd: a.cwd,
            env: a.env,
            user: a.user.map(User::from),
            stdin: a.stdin,
            timeout_s: a.timeout_s,
            max_output_bytes: Some(a.max_output_bytes.unwrap_or(DEFAULT_OUTPUT_BYTES)),
            ..req
        };
        answer(self.exec(&ctx, a.sandbox_id, req).await)
    }

    #[tool(description = "Run code in a sandbox: Python by default, or bash. Where the sandbox's image runs \
                          sandlot's code interpreter (image `code-interpreter`), the cell runs there and state is \
                          kept between calls (variables, imports, functions; a Jupyter kernel for Python): the \
                          answer has stdout, stderr, the cell's results (its last expression's value; figures as \
                          `[image/png: N bytes]`) and an exception's traceback. Elsewhere each call is a fresh \
                          process (`python3 -c CODE`, `bash -c CODE`) and the answer has its exit code, stdout and \
                          stderr (print what you want to see). Files persist in the sandbox between calls either way.")]
    async fn run_code(
        &self,
        Parameters(a): Parameters<RunCodeArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let b = self.backend(&ctx)?;
                let id = self.session.sandbox(&b, a.sandbox_id).await?;
                let cap = a.max_output_bytes.unwrap_or(DEFAULT_OUTPUT_BYTES).max(1024);
                let timeout_s = a.timeout_s.filter(|t| *t > 0.0).unwrap_or(DEFAULT_CODE_TIMEOUT_S);
                let language = match a.language {
                    Language::Python => "python",
                    Language::Bash => "bash",
                };
                let body = serde_json::json!({"code": &a.code, "language": language, "timeout": timeout_s});
                let started = std::time::Instant::now();
                if let Some(lines) = self.interpreter(&b, &id, body, timeout_s).await? {
                    return Ok(format_cell(&id, &lines, cap as usize, started.elapsed()));
                }
                let argv = match a.language {
                    Language::Python => vec!["python3".to_string(), "-c".to_string(), a.code],
                    Language::Bash => vec!["bash".to_string(), "-c".to_string(), a.code],
                };
                let req = ExecRequest {
                    argv: Some(argv),
                    timeout_s: a.timeout_s,
                    max_output_bytes: Some(cap),
                    ..Default::default()
                };
                let r = b.exec(id.clone(), req).await?;
                Ok(format_exec(&id, &r))
            }
            .await,
        )
    }

    #[tool(description = "Read a text file from a sandbox. Returns at most max_bytes (default 16384) from the \
                          start and says how many bytes were left out; read further with run_command (e.g. \
                          `tail -c 4000 FILE`, `sed -n 100,200p FILE`).")]
    async fn read_file(
        &self,
        Parameters(a): Parameters<ReadFileArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let b = self.backend(&ctx)?;
                let id = self.session.sandbox(&b, a.sandbox_id).await?;
                let limit = a.max_bytes.unwrap_or(DEFAULT_OUTPUT_BYTES).clamp(1, 1 << 20) as usize;
                let f = b.read_file(id, a.path.clone(), limit).await?;
                let mut text = String::from_utf8_lossy(&f.head).into_owned();
                let omitted = f.total.saturating_sub(f.head.len() as u64);
                if omitted > 0 {
                    text.push_str(&format!(
                        "\n[sandlot: {} of {} bytes shown, {omitted} bytes omitted]",
                        f.head.len(),
                        f.total
                    ));
                }
                Ok(text)
            }
            .await,
        )
    }

    #[tool(description = "Write a text file in a sandbox (replacing an existing one; parent directories are \
                          made). Relative paths are under /home/user.")]
    async fn write_file(
        &self,
        Parameters(a): Parameters<WriteFileArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let b = self.backend(&ctx)?;
                let id = self.session.sandbox(&b, a.sandbox_id).await?;
                let w = b.write_file(id.clone(), a.path, a.content.into_bytes()).await?;
                Ok(format!("wrote {} bytes to {} in sandbox {id}", w.bytes, w.path))
            }
            .await,
        )
    }

    #[tool(description = "List a directory in a sandbox (default /home/user): kind, size and path of each entry, \
                          to `depth` levels (default 1).")]
    async fn list_files(
        &self,
        Parameters(a): Parameters<ListFilesArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let b = self.backend(&ctx)?;
                let id = self.session.sandbox(&b, a.sandbox_id).await?;
                let path = a.path.filter(|p| !p.is_empty()).unwrap_or_else(|| "/home/user".to_string());
                let entries = b.list_files(id, path.clone(), a.depth.unwrap_or(1).max(1)).await?;
                if entries.is_empty() {
                    return Ok(format!("{path} is empty"));
                }
                let mut lines: Vec<String> = entries
                    .iter()
                    .take(MAX_ENTRIES)
                    .map(|e| {
                        let kind = match e.kind {
                            sandlot_api::FileKind::File => "file",
                            sandlot_api::FileKind::Dir => "dir ",
                            sandlot_api::FileKind::Symlink => "link",
                            sandlot_api::FileKind::Other => "othr",
                        };
                        let target = e.link_target.as_deref().map(|t| format!(" -> {t}")).unwrap_or_default();
                        format!("{kind} {:>10} {}{target}", e.size, e.path)
                    })
                    .collect();
                if entries.len() > MAX_ENTRIES {
                    lines.push(format!(
                        "[sandlot: {} more entries omitted; list a subdirectory]",
                        entries.len() - MAX_ENTRIES
                    ));
                }
                Ok(lines.join("\n"))
            }
            .await,
        )
    }

    #[tool(description = "Change a sandbox's outbound network at run time: `deny` (nothing, the default), \
                          `allowlist` (only the hosts in `allow`, e.g. [\"pypi.org\", \"*.pythonhosted.org\"]) or \
                          `allow_all` (public internet). New connections follow the new policy.")]
    async fn set_network(
        &self,
        Parameters(a): Parameters<SetNetworkArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let b = self.backend(&ctx)?;
                let id = self.session.sandbox(&b, a.sandbox_id).await?;
                let mode = match a.mode {
                    NetMode::Deny => Mode::Deny,
                    NetMode::Allowlist => Mode::Allowlist,
                    NetMode::AllowAll => Mode::AllowAll,
                };
                let info =
                    b.set_network(id.clone(), NetworkSpec { mode, allow: a.allow, ..Default::default() }).await?;
                let net = &info.network;
                Ok(format!(
                    "sandbox {id} network: {}{}",
                    serde_json::to_value(net.mode).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
                    if net.allow.is_empty() { String::new() } else { format!(" (allow {})", net.allow.join(", ")) }
                ))
            }
            .await,
        )
    }

    #[tool(description = "Snapshot a sandbox's files (copy-on-write, fast). Returns the snapshot id; a new \
                          sandbox can start from it through sandlot's API.")]
    async fn snapshot(
        &self,
        Parameters(a): Parameters<SnapshotArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let b = self.backend(&ctx)?;
                let id = self.session.sandbox(&b, a.sandbox_id).await?;
                let s = b.snapshot(id.clone(), a.name).await?;
                Ok(format!(
                    "snapshot {} of sandbox {id}{} ({} bytes)",
                    s.id,
                    s.name.as_deref().map(|n| format!(" named {n}")).unwrap_or_default(),
                    s.bytes
                ))
            }
            .await,
        )
    }

    #[tool(description = "Expose a port a server listens on inside a sandbox and return its preview URL (HTTP \
                          and WebSocket), reachable from outside the sandbox. Start the server first, in the \
                          background.")]
    async fn expose_port(
        &self,
        Parameters(a): Parameters<ExposePortArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let b = self.backend(&ctx)?;
                let id = self.session.sandbox(&b, a.sandbox_id).await?;
                let p = b.expose_port(id.clone(), a.port).await?;
                Ok(format!("port {} of sandbox {id}: {}", p.port, p.url))
            }
            .await,
        )
    }
}

/// The tools that move files between the user's machine and a sandbox: offered only where the MCP
/// server runs on that machine (stdio).
#[tool_router(router = local_files_router)]
impl<C: Connector> SandlotMcp<C> {
    #[tool(description = "Copy a file from your machine into a sandbox (any size, any bytes; streamed). Only \
                          offered over stdio (`sandlot mcp` runs on your machine and reads the file there). \
                          Returns the bytes copied.")]
    async fn upload_file(
        &self,
        Parameters(a): Parameters<UploadArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let b = self.backend(&ctx)?;
                let id = self.session.sandbox(&b, a.sandbox_id).await?;
                let w = b.upload_local(id.clone(), a.local_path.clone(), a.path).await?;
                Ok(format!("uploaded {} bytes from {} to {} in sandbox {id}", w.bytes, a.local_path, w.path))
            }
            .await,
        )
    }

    #[tool(description = "Copy a file from a sandbox to your machine (any size, any bytes; streamed). Only \
                          offered over stdio (`sandlot mcp` runs on your machine and writes the file there). \
                          Returns the bytes copied.")]
    async fn download_file(
        &self,
        Parameters(a): Parameters<DownloadArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(
            async {
                let b = self.backend(&ctx)?;
                let id = self.session.sandbox(&b, a.sandbox_id).await?;
                let n = b.download_local(id.clone(), a.path.clone(), a.local_path.clone()).await?;
                Ok(format!("downloaded {n} bytes from {} in sandbox {id} to {}", a.path, a.local_path))
            }
            .await,
        )
    }
}

#[tool_handler(router = self.tool_router)]
impl<C: Connector> ServerHandler for SandlotMcp<C> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("sandlot", env!("CARGO_PKG_VERSION")))
            .with_instructions(if self.local_files {
                format!("{INSTRUCTIONS} {LOCAL_FILES_INSTRUCTIONS}")
            } else {
                INSTRUCTIONS.to_string()
            })
    }
}

/// A command's result as text: how it ended, then each stream with its size and what was omitted.
pub fn format_exec(id: &str, r: &ExecResult) -> String {
    let mut text = match r.status {
        sandlot_api::ExitStatus::Exited => format!("exit code {}", r.exit_code),
        sandlot_api::ExitStatus::Timeout => format!("timed out (exit code {}); raise timeout_s", r.exit_code),
        sandlot_api::ExitStatus::Oom => {
            format!("killed: out of memory (exit code {}); create a sandbox with more memory_mb", r.exit_code)
        }
        s => format!(
            "{} (exit code {}{})",
            s.as_str(),
            r.exit_code,
            r.signal.map(|n| format!(", signal {n}")).unwrap_or_default()
        ),
    };
    text.push_str(&format!(" in {} ms, sandbox {id}\n", r.duration_ms));
    for (name, out, total) in [("stdout", &r.stdout, r.stdout_bytes), ("stderr", &r.stderr, r.stderr_bytes)] {
        if total == 0 {
            continue;
        }
        let omitted = omitted_bytes(out);
        let note = if omitted > 0 { format!(", {omitted} omitted from the middle") } else { String::new() };
        text.push_str(&format!("--- {name} ({total} bytes{note}) ---\n{out}"));
        if !out.ends_with('\n') {
            text.push('\n');
        }
    }
    if r.stdout_bytes == 0 && r.stderr_bytes == 0 {
        text.push_str("(no output)\n");
    }
    text
}

/// A code interpreter cell's lines as text, in `format_exec`'s shape: how it ended, then stdout,
/// stderr, each result and the error, each cut to `cap` bytes (head and tail kept).
pub fn format_cell(id: &str, lines: &[serde_json::Value], cap: usize, took: Duration) -> String {
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let mut results = Vec::new();
    let mut error = None;
    let mut count = None;
    for l in lines {
        let text = || l.get("text").and_then(|t| t.as_str()).unwrap_or_default();
        match l.get("type").and_then(|t| t.as_str()).unwrap_or_default() {
            "stdout" => stdout.push_str(text()),
            "stderr" => stderr.push_str(text()),
            "result" => results.push(describe_result(l)),
            "error" => error = Some(l),
            "number_of_executions" => count = l.get("execution_count").and_then(|n| n.as_u64()),
            _ => {}
        }
    }
    let field = |v: &serde_json::Value, k: &str| v.get(k).and_then(|t| t.as_str()).unwrap_or_default().to_string();
    let ended = match error {
        Some(e) => format!("error {}", field(e, "name")),
        None => "ok".to_string(),
    };
    let count = count.map(|n| format!(", execution {n}")).unwrap_or_default();
    let mut text = format!(
        "{ended} in {} ms, sandbox {id} (code interpreter{count}; state is kept between calls)\n",
        took.as_millis()
    );
    let mut sections: Vec<(String, String)> = vec![("stdout".into(), stdout), ("stderr".into(), stderr)];
    sections.extend(results.into_iter().map(|r| ("result".to_string(), r)));
    if let Some(e) = error {
        let head = format!("error: {}: {}", field(e, "name"), field(e, "value"));
        sections.push((head, field(e, "traceback")));
    }
    let mut any = false;
    for (name, body) in sections {
        if body.is_empty() && name != "stdout" && name != "stderr" {
            text.push_str(&format!("--- {name} ---\n"));
            any = true;
            continue;
        }
        if body.is_empty() {
            continue;
        }
        any = true;
        let (kept, omitted) = cut_middle(&body, cap);
        let note = if omitted > 0 { format!(", {omitted} omitted from the middle") } else { String::new() };
        text.push_str(&format!("--- {name} ({} bytes{note}) ---\n{kept}", body.len()));
        if !kept.ends_with('\n') {
            text.push('\n');
        }
    }
    if !any {
        text.push_str("(no output)\n");
    }
    text
}

/// A result line as text: its `text`, and each other format it has by kind and size (a figure's
/// base64 is never shown).
fn describe_result(r: &serde_json::Value) -> String {
    let mut parts = Vec::new();
    if let Some(t) = r.get("text").and_then(|t| t.as_str()) {
        parts.push(t.to_string());
    }
    for (field, mime, base64) in [
        ("png", "image/png", true),
        ("jpeg", "image/jpeg", true),
        ("pdf", "application/pdf", true),
        ("svg", "image/svg+xml", false),
        ("html", "text/html", false),
        ("markdown", "text/markdown", false),
        ("latex", "text/latex", false),
        ("json", "application/json", false),
        ("javascript", "application/javascript", false),
        ("chart", "e2b/chart", false),
        ("data", "e2b/data", false),
    ] {
        let Some(v) = r.get(field) else { continue };
        let size = match v.as_str() {
            Some(s) if base64 => {
                let s = s.trim_end();
                (s.len() / 4 * 3).saturating_sub(s.len() - s.trim_end_matches('=').len())
            }
            Some(s) => s.len(),
            None => v.to_string().len(),
        };
        parts.push(format!("[{mime}: {size} bytes]"));
    }
    parts.join("\n")
}

/// `s` cut to about `cap` bytes, head and tail kept around `[sandlot: N bytes omitted]` (as the
/// server cuts a command's output), and the number of bytes left out.
fn cut_middle(s: &str, cap: usize) -> (String, usize) {
    if s.len() <= cap {
        return (s.to_string(), 0);
    }
    let mut head = cap / 2;
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = s.len() - (cap - cap / 2);
    while !s.is_char_boundary(tail) {
        tail += 1;
    }
    let omitted = tail - head;
    (format!("{}\n[sandlot: {omitted} bytes omitted]\n{}", &s[..head], &s[tail..]), omitted)
}

/// The bytes the server's cap left out of a stream, from its marker (`[sandlot: N bytes omitted]`).
fn omitted_bytes(out: &str) -> u64 {
    let Some(start) = out.find("\n[sandlot: ") else { return 0 };
    let rest = &out[start + "\n[sandlot: ".len()..];
    rest.split_once(" bytes omitted]").and_then(|(n, _)| n.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_omitted_count_is_read_from_the_marker() {
        assert_eq!(omitted_bytes("abc\n[sandlot: 90 bytes omitted]\nxyz"), 90);
        assert_eq!(omitted_bytes("no marker"), 0);
    }

    #[test]
    fn an_exec_result_reads_as_text_with_its_counts() {
        let r = ExecResult {
            status: sandlot_api::ExitStatus::Exited,
            exit_code: 3,
            signal: None,
            stdout: "ab\n[sandlot: 10 bytes omitted]\ncd".into(),
            stderr: String::new(),
            stdout_bytes: 14,
            stderr_bytes: 0,
            truncated: true,
            duration_ms: 5,
        };
        let t = format_exec("sb_1", &r);
        assert!(t.starts_with("exit code 3 in 5 ms, sandbox sb_1\n"), "{t}");
        assert!(t.contains("--- stdout (14 bytes, 10 omitted from the middle) ---\nab\n"), "{t}");
        assert!(!t.contains("stderr"), "{t}");
    }

    #[test]
    fn a_cell_reads_as_text_with_results_and_the_error() {
        let lines: Vec<serde_json::Value> = [
            r#"{"type":"number_of_executions","execution_count":3}"#,
            r#"{"type":"stdout","text":"a\n","timestamp":"t"}"#,
            r#"{"type":"stdout","text":"b\n","timestamp":"t"}"#,
            r#"{"type":"result","is_main_result":false,"text":"<Figure>","png":"iVBORw0KGgo="}"#,
            r#"{"type":"error","name":"ZeroDivisionError","value":"division by zero","traceback":"Traceback\n  1/0"}"#,
            r#"{"type":"end_of_execution"}"#,
        ]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
        let t = format_cell("sb_1", &lines, 1024, Duration::from_millis(7));
        assert!(t.starts_with("error ZeroDivisionError in 7 ms, sandbox sb_1 (code interpreter, execution 3;"), "{t}");
        assert!(t.contains("--- stdout (4 bytes) ---\na\nb\n"), "{t}");
        assert!(t.contains("--- result (29 bytes) ---\n<Figure>\n[image/png: 8 bytes]\n"), "{t}");
        assert!(t.contains("--- error: ZeroDivisionError: division by zero (15 bytes) ---\nTraceback\n  1/0\n"), "{t}");
        assert!(!t.contains("iVBOR"), "{t}");
    }

    #[test]
    fn long_text_keeps_its_head_and_tail() {
        let s = format!("{}{}", "a".repeat(3000), "b".repeat(3000));
        let (kept, omitted) = cut_middle(&s, 1024);
        assert_eq!(omitted, 6000 - 1024);
        assert!(kept.starts_with(&"a".repeat(512)) && kept.ends_with(&"b".repeat(512)), "{kept}");
        assert!(kept.contains("\n[sandlot: 4976 bytes omitted]\n"));
        assert_eq!(cut_middle("short", 1024), ("short".to_string(), 0));
    }
}
