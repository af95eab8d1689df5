//! The client side of the `sandlot` binary: `run`, `sandbox …`, `keys …`, `audit`.
//!
//! Each command talks to a server through `sandlot-client`. Results a script wants (ids, keys, file
//! bytes, JSON with `--json`) go to stdout; notes go to stderr.

mod admin;
mod build;
mod cp;
mod e2b;
mod events;
mod image;
mod mcp;
mod metrics;
mod network;
mod output;
pub(crate) use output::sanitize_text;
mod run;
mod sandbox;
mod screen;
mod shell;

use std::fs;
use std::io;

use anyhow::{bail, Context};
use sandlot_client::{Client, ErrorKind};

use admin::{AuditArgs, KeysCmd, TenantsCmd};
use image::ImageCmd;
use run::RunArgs;
use sandbox::SandboxCmd;

/// Where `sandlot serve` writes the admin key by default; read when no key is given.
const ADMIN_KEY_PATH: &str = "/var/lib/sandlot/admin.key";

/// Exit status when no server answers.
const EXIT_NO_SERVER: i32 = 2;

const RUN_LONG: &str = "\
Run one command in a fresh sandbox and delete the sandbox afterwards.

The command's output is streamed as it is written: its stdout to ours, its stderr to ours. sandlot \
exits with the command's exit code; 128+N when signal N ended it; 124 when --timeout passed (like \
coreutils `timeout`); 137 when the sandbox ran out of memory; 2 when no server answers; 1 when sandlot \
itself failed.

Examples:
  sandlot run -- python3 -c 'print(6 * 7)'
  sandlot run --memory 256 --timeout 10 -- sh -c 'make test'
  echo hello | sandlot run --stdin -- wc -c
  sandlot run --shell -- 'ls /usr/bin | wc -l'";

const SANDBOX_LONG: &str = "\
Manage long-lived sandboxes: create one, run commands in it, copy files in and out, remove it.

Example:
  id=$(sandlot sandbox create --memory 512)
  sandlot sandbox cp ./app.py $id:/home/user/app.py
  sandlot sandbox exec $id -- python3 app.py
  sandlot sandbox rm $id";

const IMAGE_LONG: &str = "\
Images are what sandboxes boot: `host` (the host's /usr, read-only; no download) or an OCI image pulled \
from a registry or imported from an archive. Each image is unpacked once on the server and shared, \
copy-on-write, by every sandbox of it. Your images are yours: other tenants do not see them.

Examples:
  sandlot image pull python:3.12-slim
  sandlot run --image python:3.12-slim -- python3 -c 'import sys; print(sys.version)'
  sandlot image ls
  sandlot image rm python:3.12-slim";

const KEYS_LONG: &str = "\
Manage API keys. Keys belong to a tenant and see only that tenant's sandboxes. Creating keys needs \
the admin key that `sandlot serve` writes to <state-dir>/admin.key.

Example:
  sudo sandlot keys create --tenant alice";

const TENANTS_LONG: &str = "\
Admin settings of a tenant. `network` opts a tenant's sandboxes into reaching ranges that are \
otherwise always denied (private networks, cloud metadata, this host's addresses): an internal \
database at 10.20.0.5, say. Each sandbox must still allow the destination itself. Needs the admin key.

Examples:
  sudo sandlot tenants network alice --exempt 10.20.0.0/16
  sudo sandlot tenants network alice
  sudo sandlot tenants network alice --clear";

const AUDIT_LONG: &str = "\
Show the audit log of the key's tenant, newest first: sandbox creation and deletion, commands, file \
writes.

Examples:
  sandlot audit --limit 20
  sandlot audit --sandbox sb_123 --json | jq '.entries[].action'";

/// Commands that talk to a sandlot server.
#[derive(clap::Subcommand, Debug)]
pub enum ClientCommand {
    /// Run one command in a fresh sandbox, then delete the sandbox.
    #[command(long_about = RUN_LONG)]
    Run(RunArgs),
    /// Create, list, inspect, use and remove sandboxes.
    #[command(subcommand, long_about = SANDBOX_LONG)]
    Sandbox(SandboxCmd),
    /// Pull, import, list, inspect and delete images.
    #[command(subcommand, long_about = IMAGE_LONG)]
    Image(ImageCmd),
    /// Create API keys (needs the admin key).
    #[command(subcommand, long_about = KEYS_LONG)]
    Keys(KeysCmd),
    /// Admin settings of tenants (needs the admin key).
    #[command(subcommand, long_about = TENANTS_LONG)]
    Tenants(TenantsCmd),
    /// Show the audit log.
    #[command(long_about = AUDIT_LONG)]
    Audit(AuditArgs),
    /// Show lifecycle events (created, stopped, deleted, expired, oom…), or follow them.
    #[command(long_about = events::EVENTS_LONG)]
    Events(events::EventsArgs),
    /// Register, list and remove webhooks that receive lifecycle events; read their delivery logs.
    #[command(subcommand, long_about = events::WEBHOOKS_LONG)]
    Webhooks(events::WebhooksCmd),
    /// Use the E2B SDKs with this server (`sandlot e2b env`).
    #[command(subcommand)]
    E2b(e2b::E2bCmd),
    /// Serve sandlot's tools to an AI agent over MCP on stdin/stdout (desktop agents, IDEs).
    #[command(long_about = mcp::LONG_ABOUT)]
    Mcp(mcp::McpArgs),
}

impl ClientCommand {
    fn conn(&self) -> &Conn {
        match self {
            ClientCommand::Run(args) => &args.conn,
            ClientCommand::Sandbox(cmd) => cmd.conn(),
            ClientCommand::Image(cmd) => cmd.conn(),
            ClientCommand::Keys(cmd) => cmd.conn(),
            ClientCommand::Tenants(cmd) => cmd.conn(),
            ClientCommand::Audit(args) => &args.conn,
            ClientCommand::Events(args) => &args.conn,
            ClientCommand::Webhooks(cmd) => cmd.conn(),
            ClientCommand::E2b(cmd) => cmd.conn(),
            ClientCommand::Mcp(args) => &args.conn,
        }
    }
}

/// How to reach the server; flattened into every command.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Connection")]
pub struct Conn {
    /// URL of the sandlot server.
    #[arg(long, env = "SANDLOT_URL", default_value = "http://127.0.0.1:7423")]
    pub url: String,
    /// API key. When neither this nor SANDLOT_API_KEY is set, the admin key in
    /// /var/lib/sandlot/admin.key is used if it is readable (e.g. under sudo).
    #[arg(long, env = "SANDLOT_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

impl Conn {
    /// A client for this server, with the given key or the admin key file.
    fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::new(&self.url, &self.key()?))
    }

    /// The API key: the given one, else the admin key file's.
    fn key(&self) -> anyhow::Result<String> {
        if let Some(key) = self.api_key.as_deref().map(str::trim).filter(|k| !k.is_empty()) {
            return Ok(key.to_string());
        }
        match fs::read_to_string(ADMIN_KEY_PATH) {
            Ok(key) if !key.trim().is_empty() => Ok(key.trim().to_string()),
            Ok(_) => bail!("no API key: {ADMIN_KEY_PATH} is empty. {}", key_help()),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => bail!(
                "no API key: SANDLOT_API_KEY is not set and {ADMIN_KEY_PATH} is not readable by you \
                 (run with sudo, or export SANDLOT_API_KEY=$(sudo cat {ADMIN_KEY_PATH}))"
            ),
            Err(_) => bail!("no API key. {}", key_help()),
        }
    }
}

fn key_help() -> String {
    format!(
        "Set SANDLOT_API_KEY or pass --api-key. `sandlot serve` writes the admin key to \
         <state-dir>/admin.key ({ADMIN_KEY_PATH} by default, read automatically when readable); \
         with it, make a key for a tenant: sandlot keys create --tenant NAME"
    )
}

/// Runs a client command and returns the process exit code.
///
/// Errors are returned for the caller to print (`sandlot: ` and [`crate::error_text`], exit 1), except "no server
/// answers", which is printed here and gives exit code 2.
pub fn execute(cmd: ClientCommand) -> anyhow::Result<i32> {
    let url = cmd.conn().url.clone();
    let result = match cmd {
        ClientCommand::Run(args) => run::run(args),
        ClientCommand::Sandbox(cmd) => sandbox::execute(cmd),
        ClientCommand::Image(cmd) => image::execute(cmd),
        ClientCommand::Keys(cmd) => admin::keys(cmd),
        ClientCommand::Tenants(cmd) => admin::tenants(cmd),
        ClientCommand::Audit(args) => admin::audit(args),
        ClientCommand::Events(args) => events::events(args),
        ClientCommand::Webhooks(cmd) => events::webhooks(cmd),
        ClientCommand::E2b(cmd) => e2b::execute(cmd),
        ClientCommand::Mcp(args) => mcp::run(args),
    };
    match result {
        Err(err) => match client_error_kind(&err) {
            Some(ErrorKind::Connect) => {
                eprintln!("sandlot: no server at {url}. Start one with: sudo sandlot serve   (or set SANDLOT_URL)");
                Ok(EXIT_NO_SERVER)
            }
            Some(ErrorKind::Unauthenticated) => Err(anyhow::anyhow!(
                "{} (the server at {url} rejected the API key; check SANDLOT_API_KEY or --api-key)",
                crate::error_text(&err)
            )),
            _ => Err(err),
        },
        ok => ok,
    }
}

/// The kind of the SDK error in `err`'s chain, if any.
fn client_error_kind(err: &anyhow::Error) -> Option<ErrorKind> {
    err.chain().find_map(|e| e.downcast_ref::<sandlot_client::Error>()).map(|e| e.kind())
}

/// Parses `KEY=VALUE` (for `--env` and `--meta`).
fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, got `{s}`")),
    }
}

/// Identity a command runs as, for `--user`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
enum UserArg {
    /// uid 1000, home /home/user.
    #[default]
    User,
    /// root of the sandbox's own user namespace (not of the host).
    Root,
}

impl From<UserArg> for sandlot_client::api::User {
    fn from(user: UserArg) -> Self {
        match user {
            UserArg::User => sandlot_client::api::User::User,
            UserArg::Root => sandlot_client::api::User::Root,
        }
    }
}

/// Adds what we were doing to an SDK error.
trait Doing<T> {
    fn doing(self, what: &str) -> anyhow::Result<T>;
}

impl<T> Doing<T> for sandlot_client::Result<T> {
    fn doing(self, what: &str) -> anyhow::Result<T> {
        self.map_err(anyhow::Error::new).with_context(|| what.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(clap::Parser, Debug)]
    #[command(name = "sandlot")]
    struct TestCli {
        #[command(subcommand)]
        cmd: ClientCommand,
    }

    #[test]
    fn cli_definition_is_valid() {
        TestCli::command().debug_assert();
    }

    #[test]
    fn env_names_match_the_api() {
        assert_eq!(sandlot_client::api::ENV_URL, "SANDLOT_URL");
        assert_eq!(sandlot_client::api::ENV_API_KEY, "SANDLOT_API_KEY");
        assert_eq!(format!("http://{}", sandlot_client::api::DEFAULT_LISTEN), "http://127.0.0.1:7423");
    }

    #[test]
    fn key_value_parsing() {
        assert_eq!(parse_key_value("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert_eq!(parse_key_value("A="), Ok(("A".into(), String::new())));
        assert!(parse_key_value("=x").is_err());
        assert!(parse_key_value("novalue").is_err());
    }

    #[test]
    fn run_takes_the_command_after_the_flags() {
        let cli = TestCli::try_parse_from(["sandlot", "run", "--memory", "64", "ls", "-la", "/"]).unwrap();
        let ClientCommand::Run(args) = cli.cmd else { panic!() };
        assert_eq!(args.command, ["ls", "-la", "/"]);
        let cli = TestCli::try_parse_from(["sandlot", "run", "--", "echo", "--memory"]).unwrap();
        let ClientCommand::Run(args) = cli.cmd else { panic!() };
        assert_eq!(args.command, ["echo", "--memory"]);
        // No command: the image's entrypoint and cmd run, which needs an image to read them from.
        let cli = TestCli::try_parse_from(["sandlot", "run", "--api-key", "k"]).unwrap();
        let ClientCommand::Run(args) = cli.cmd else { panic!() };
        assert!(args.command.is_empty());
        let err = run::run(args).unwrap_err().to_string();
        assert!(err.contains("give a command to run"), "{err}");
    }

    #[test]
    fn connect_errors_become_exit_code_2() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}");
        let cli = TestCli::try_parse_from(["sandlot", "sandbox", "ls", "--url", &url, "--api-key", "k"]).unwrap();
        assert_eq!(execute(cli.cmd).unwrap(), EXIT_NO_SERVER);
    }
}
