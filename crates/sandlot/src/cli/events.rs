//! `sandlot events` and `sandlot webhooks …`.

use std::io::Write;

use sandlot_client::api::{CreateWebhook, EventKind, EventList, WebhookList};
use sandlot_client::EventsQuery;

use super::output::{print_json, print_table, utc_time};
use super::{Conn, Doing};

pub const EVENTS_LONG: &str = "\
Show the lifecycle events of the key's tenant, oldest first: created, started, paused, resumed, \
stopped, deleted, expired, oom, failed. Each has an id that only grows: pass the last one seen as \
--since to read what came after it. Events are kept for the server's retention window (7 days by \
default). The admin key sees every tenant's (or one's, with --tenant).

Examples:
  sandlot events --limit 20
  sandlot events --follow --kind expired,oom,failed
  sandlot events --since 1234 --json | jq -c '.events[]'";

pub const WEBHOOKS_LONG: &str = "\
Webhooks receive the tenant's lifecycle events as they happen: each event is POSTed as JSON to the URL, \
signed with the webhook's secret (header Sandlot-Signature: v1=<hex HMAC-SHA256(secret, \
\"<Sandlot-Timestamp>.<body>\")>), retried with backoff while the receiver fails. The server refuses \
loopback and private targets unless its admin allows them (--webhook-allow-private).

Examples:
  sandlot webhooks create https://hooks.example.com/sandlot --events created,deleted
  sandlot webhooks ls
  sandlot webhooks deliveries wh_0123456789abcdef
  sandlot webhooks rm wh_0123456789abcdef";

fn kinds(list: Option<&str>) -> anyhow::Result<Vec<EventKind>> {
    let Some(list) = list else { return Ok(Vec::new()) };
    list.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(|k| {
            EventKind::parse(k).ok_or_else(|| {
                let all: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
                anyhow::anyhow!("unknown event kind {k:?}; the kinds are {}", all.join(", "))
            })
        })
        .collect()
}

/// Arguments of `sandlot events`.
#[derive(clap::Args, Debug)]
pub struct EventsArgs {
    /// Only events after this id (the last one seen).
    #[arg(long, value_name = "ID", default_value_t = 0)]
    since: i64,
    /// Keep reading: print events as they happen until interrupted.
    #[arg(long, short = 'f')]
    follow: bool,
    /// Only this sandbox's events.
    #[arg(long, value_name = "ID")]
    sandbox: Option<String>,
    /// Only these kinds, comma-separated (created,started,paused,resumed,stopped,deleted,expired,oom,failed).
    #[arg(long, value_name = "KINDS")]
    kind: Option<String>,
    /// The admin key: only this tenant's events.
    #[arg(long)]
    tenant: Option<String>,
    /// At most this many events per read (default: the server's).
    #[arg(long, value_name = "N")]
    limit: Option<u32>,
    /// Print JSON: `{"events": [...], "next": N}`, or with --follow one event per line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(super) conn: Conn,
}

pub(super) fn events(args: EventsArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    let mut q = EventsQuery {
        since: args.since,
        limit: args.limit,
        sandbox_id: args.sandbox.clone(),
        kinds: kinds(args.kind.as_deref())?,
        tenant: args.tenant.clone(),
        wait_s: None,
    };
    if !args.follow {
        let list = client.events(&q).doing("reading events")?;
        if args.json {
            print_json(&list)?;
        } else {
            print_rows(&list)?;
            eprintln!("sandlot: next cursor {} (pass it as --since)", list.next);
        }
        return Ok(0);
    }
    // Long polls: the server answers as soon as an event comes, or after 30 s with none.
    q.wait_s = Some(30);
    let mut out = std::io::stdout().lock();
    loop {
        let list = client.events(&q).doing("reading events")?;
        for e in &list.events {
            if args.json {
                writeln!(out, "{}", serde_json::to_string(e)?)?;
            } else {
                writeln!(
                    out,
                    "{}  {:>8}  {:<8}  {}  {}  {}",
                    utc_time(e.at_ms),
                    e.id,
                    e.kind,
                    e.sandbox_id,
                    e.tenant,
                    e.detail
                )?;
            }
        }
        out.flush()?;
        q.since = list.next;
    }
}

fn print_rows(list: &EventList) -> anyhow::Result<()> {
    let rows: Vec<Vec<String>> = list
        .events
        .iter()
        .map(|e| {
            vec![
                e.id.to_string(),
                utc_time(e.at_ms),
                e.kind.to_string(),
                e.sandbox_id.clone(),
                e.tenant.clone(),
                e.detail.to_string(),
            ]
        })
        .collect();
    print_table(&["ID", "TIME", "KIND", "SANDBOX", "TENANT", "DETAIL"], &rows)
}

/// `sandlot webhooks …` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum WebhooksCmd {
    /// Register a webhook; prints its id (and the secret, when the server made it: shown once).
    Create(CreateArgs),
    /// List webhooks (never their secrets).
    Ls(JsonArgs),
    /// Delete a webhook and its delivery log.
    Rm(IdArgs),
    /// Show a webhook's delivery attempts, newest first.
    Deliveries(DeliveriesArgs),
}

impl WebhooksCmd {
    pub(super) fn conn(&self) -> &Conn {
        match self {
            WebhooksCmd::Create(a) => &a.conn,
            WebhooksCmd::Ls(a) => &a.conn,
            WebhooksCmd::Rm(a) => &a.conn,
            WebhooksCmd::Deliveries(a) => &a.conn,
        }
    }
}

/// Arguments of `sandlot webhooks create`.
#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    /// Where events are POSTed (http:// or https://).
    #[arg(value_name = "URL")]
    target: String,
    /// Only these kinds, comma-separated (default: every kind).
    #[arg(long, value_name = "KINDS")]
    events: Option<String>,
    /// The signing secret (16-256 bytes), read from this environment variable; default: the server
    /// makes one and it is printed once.
    #[arg(long, value_name = "VAR")]
    secret_env: Option<String>,
    /// Print the webhook as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments with `--json` only.
#[derive(clap::Args, Debug)]
pub struct JsonArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// A webhook id.
#[derive(clap::Args, Debug)]
pub struct IdArgs {
    /// Webhook id (`wh_…`).
    id: String,
    #[command(flatten)]
    conn: Conn,
}

/// Arguments of `sandlot webhooks deliveries`.
#[derive(clap::Args, Debug)]
pub struct DeliveriesArgs {
    /// Webhook id (`wh_…`).
    id: String,
    /// At most this many attempts (default 100).
    #[arg(long, value_name = "N")]
    limit: Option<u32>,
    /// Print JSON (`{"deliveries": [...]}`).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

pub(super) fn webhooks(cmd: WebhooksCmd) -> anyhow::Result<i32> {
    match cmd {
        WebhooksCmd::Create(a) => {
            let client = a.conn.client()?;
            let secret = match &a.secret_env {
                Some(var) => Some(
                    std::env::var(var).map_err(|_| anyhow::anyhow!("--secret-env {var}: the variable is not set"))?,
                ),
                None => None,
            };
            let req = CreateWebhook { url: a.target.clone(), events: kinds(a.events.as_deref())?, secret };
            let hook = client.create_webhook(&req).doing(&format!("registering webhook {}", a.target))?;
            if a.json {
                print_json(&hook)?;
            } else {
                println!("{}", hook.id);
                match &hook.secret {
                    Some(s) => eprintln!("sandlot: webhook {} created; its signing secret (shown once): {s}", hook.id),
                    None => eprintln!("sandlot: webhook {} created", hook.id),
                }
            }
            Ok(0)
        }
        WebhooksCmd::Ls(a) => {
            let webhooks = a.conn.client()?.webhooks().doing("listing webhooks")?;
            if a.json {
                return print_json(&WebhookList { webhooks }).map(|_| 0);
            }
            let rows: Vec<Vec<String>> = webhooks
                .iter()
                .map(|w| {
                    let kinds = if w.events.is_empty() {
                        "all".to_string()
                    } else {
                        w.events.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(",")
                    };
                    vec![
                        w.id.clone(),
                        w.tenant.clone(),
                        w.url.clone(),
                        kinds,
                        w.cursor.to_string(),
                        utc_time(w.created_at_ms),
                    ]
                })
                .collect();
            print_table(&["ID", "TENANT", "URL", "EVENTS", "CURSOR", "CREATED"], &rows)?;
            Ok(0)
        }
        WebhooksCmd::Rm(a) => {
            a.conn.client()?.delete_webhook(&a.id).doing(&format!("deleting webhook {}", a.id))?;
            eprintln!("sandlot: webhook {} deleted", a.id);
            Ok(0)
        }
        WebhooksCmd::Deliveries(a) => {
            let deliveries = a
                .conn
                .client()?
                .webhook_deliveries(&a.id, a.limit)
                .doing(&format!("reading the deliveries of {}", a.id))?;
            if a.json {
                return print_json(&sandlot_client::api::DeliveryList { deliveries }).map(|_| 0);
            }
            let rows: Vec<Vec<String>> = deliveries
                .iter()
                .map(|d| {
                    vec![
                        utc_time(d.at_ms),
                        d.event_id.to_string(),
                        d.kind.to_string(),
                        d.attempt.to_string(),
                        d.status.map_or_else(|| "-".into(), |s| s.to_string()),
                        format!("{} ms", d.duration_ms),
                        if d.ok {
                            "delivered"
                        } else if d.will_retry {
                            "will retry"
                        } else {
                            "failed"
                        }
                        .to_string(),
                        d.error.clone().unwrap_or_default(),
                    ]
                })
                .collect();
            print_table(&["TIME", "EVENT", "KIND", "ATTEMPT", "STATUS", "TOOK", "OUTCOME", "ERROR"], &rows)?;
            Ok(0)
        }
    }
}
