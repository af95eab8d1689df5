//! `sandlot keys create`, `sandlot tenants network` and `sandlot audit`.

use sandlot_client::api::AuditList;

use super::output::{print_json, print_table, utc_time};
use super::{Conn, Doing};

const KEYS_CREATE_LONG: &str = "\
Create an API key for a tenant (the tenant is created if new) and print it on stdout. The key is \
shown once; the server keeps only its hash. Needs the admin key: run with sudo to use \
/var/lib/sandlot/admin.key, or set SANDLOT_API_KEY to it.

Example:
  export SANDLOT_API_KEY=$(sudo sandlot keys create --tenant alice)";

/// `sandlot keys …` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum KeysCmd {
    /// Create an API key for a tenant and print it.
    #[command(long_about = KEYS_CREATE_LONG)]
    Create(KeyCreateArgs),
    /// List API keys: id, prefix, tenant, created, expires, last used, revoked (never the secret).
    #[command(long_about = "List API keys, of one tenant (--tenant) or all: id, the secret's first 8 \
characters, tenant, creation time, expiry, last use (to the minute) and revocation. The secret is never \
shown again. Needs the admin key.\n\nExample:\n  sudo sandlot keys ls --tenant alice")]
    Ls(KeyListArgs),
    /// Revoke an API key by id: requests with it get 401 from now on.
    #[command(long_about = "Revoke an API key by its id (from `sandlot keys ls`): every request with it \
gets 401 from now on, with a message saying it was revoked. The bootstrap admin key cannot be revoked. \
Needs the admin key.\n\nExample:\n  sudo sandlot keys rm key_3f2a9c0d1e4b5a67")]
    Rm(KeyRmArgs),
}

impl KeysCmd {
    pub(super) fn conn(&self) -> &Conn {
        match self {
            KeysCmd::Create(args) => &args.conn,
            KeysCmd::Ls(args) => &args.conn,
            KeysCmd::Rm(args) => &args.conn,
        }
    }
}

/// Arguments of `sandlot keys ls`.
#[derive(clap::Args, Debug)]
pub struct KeyListArgs {
    /// Only this tenant's keys.
    #[arg(long, value_name = "T")]
    tenant: Option<String>,
    /// Print JSON (`{"keys": [...]}`) instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot keys rm`.
#[derive(clap::Args, Debug)]
pub struct KeyRmArgs {
    /// Id of the key (`key_…`, from `sandlot keys ls`).
    id: String,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot keys create`.
#[derive(clap::Args, Debug)]
pub struct KeyCreateArgs {
    /// Tenant the key acts for.
    #[arg(long, value_name = "T")]
    tenant: String,
    /// The key stops working this many seconds from now (default: never).
    #[arg(long, value_name = "SECONDS")]
    expires_in: Option<u64>,
    /// Print `{"tenant": …, "key": …, "id": …}` instead of the bare key.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// `sandlot tenants …` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum TenantsCmd {
    /// Show or set the always-denied ranges a tenant's sandboxes may reach.
    #[command(long_about = "Show the always-denied ranges (private networks, cloud metadata, this host's \
addresses) a tenant's sandboxes are opted into, or replace them with --exempt (repeatable) or --clear. \
Running sandboxes follow at once. An exemption only lifts the always-deny list: each sandbox's own \
policy must still allow the destination (an --allow CIDR, or --allow-all).\n\nExample:\n  \
sudo sandlot tenants network alice --exempt 10.20.0.0/16")]
    Network(TenantNetworkArgs),
}

impl TenantsCmd {
    pub(super) fn conn(&self) -> &Conn {
        match self {
            TenantsCmd::Network(args) => &args.conn,
        }
    }
}

/// Arguments of `sandlot tenants network`.
#[derive(clap::Args, Debug)]
pub struct TenantNetworkArgs {
    /// Tenant name.
    tenant: String,
    /// CIDR the tenant's sandboxes may reach although it is always denied otherwise (repeatable).
    #[arg(long, value_name = "CIDR")]
    exempt: Vec<String>,
    /// Withdraw every exemption.
    #[arg(long, conflicts_with = "exempt")]
    clear: bool,
    /// Print JSON (`{"exempt": [...]}`).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot audit`.
#[derive(clap::Args, Debug)]
pub struct AuditArgs {
    /// Only records about this sandbox.
    #[arg(long, value_name = "ID")]
    sandbox: Option<String>,
    /// At most this many records (default: the server's).
    #[arg(long, value_name = "N")]
    limit: Option<u32>,
    /// Print JSON (`{"entries": [...]}`) instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(super) conn: Conn,
}

pub(super) fn keys(cmd: KeysCmd) -> anyhow::Result<i32> {
    match cmd {
        KeysCmd::Create(args) => {
            let client = args.conn.client()?;
            let request = sandlot_client::api::CreateKey {
                tenant: args.tenant.clone(),
                expires_in_s: args.expires_in,
                expires_at_ms: None,
            };
            let created =
                client.create_key_with(&request).doing(&format!("creating a key for tenant {}", args.tenant))?;
            if args.json {
                print_json(&created)?;
            } else {
                println!("{}", created.key);
                let until = created.expires_at_ms.map(|t| format!(", valid until {}", utc_time(t))).unwrap_or_default();
                eprintln!(
                    "sandlot: key {} for tenant {}{until} (shown once; store it now)",
                    created.id, created.tenant
                );
            }
            Ok(0)
        }
        KeysCmd::Ls(args) => {
            let client = args.conn.client()?;
            let keys = client.list_keys(args.tenant.as_deref()).doing("listing API keys")?;
            if args.json {
                print_json(&sandlot_client::api::KeyList { keys })?;
                return Ok(0);
            }
            let time = |t: Option<i64>| t.map_or_else(|| "-".to_string(), utc_time);
            let rows: Vec<Vec<String>> = keys
                .iter()
                .map(|k| {
                    vec![
                        k.id.clone(),
                        format!("{}…", k.prefix),
                        k.tenant.clone(),
                        utc_time(k.created_at_ms),
                        time(k.expires_at_ms),
                        time(k.last_used_at_ms),
                        time(k.revoked_at_ms),
                    ]
                })
                .collect();
            print_table(&["ID", "PREFIX", "TENANT", "CREATED", "EXPIRES", "LAST USED", "REVOKED"], &rows)?;
            Ok(0)
        }
        KeysCmd::Rm(args) => {
            let client = args.conn.client()?;
            client.revoke_key(&args.id).doing(&format!("revoking key {}", args.id))?;
            eprintln!("sandlot: key {} revoked", args.id);
            Ok(0)
        }
    }
}

pub(super) fn tenants(cmd: TenantsCmd) -> anyhow::Result<i32> {
    match cmd {
        TenantsCmd::Network(args) => {
            let client = args.conn.client()?;
            let doing = format!("the network exemptions of tenant {}", args.tenant);
            let current = if args.clear || !args.exempt.is_empty() {
                let new = sandlot_client::api::TenantNetwork { exempt: args.exempt.clone() };
                client.set_tenant_network(&args.tenant, &new).doing(&format!("setting {doing}"))?
            } else {
                client.tenant_network(&args.tenant).doing(&format!("reading {doing}"))?
            };
            if args.json {
                print_json(&current)?;
            } else if current.exempt.is_empty() {
                println!("no exemptions: tenant {}'s sandboxes never reach always-denied ranges", args.tenant);
            } else {
                for cidr in &current.exempt {
                    println!("{cidr}");
                }
            }
            Ok(0)
        }
    }
}

pub(super) fn audit(args: AuditArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    let entries = client.audit(args.sandbox.as_deref(), args.limit).doing("reading the audit log")?;
    if args.json {
        print_json(&AuditList { entries })?;
        return Ok(0);
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|entry| {
            vec![
                entry.seq.to_string(),
                utc_time(entry.at_ms),
                entry.tenant.clone(),
                entry.sandbox_id.clone().unwrap_or_else(|| "-".to_string()),
                entry.action.clone(),
                entry.detail.to_string(),
            ]
        })
        .collect();
    print_table(&["SEQ", "TIME", "TENANT", "SANDBOX", "ACTION", "DETAIL"], &rows)?;
    Ok(0)
}
