//! Network flags of `sandlot run` and `sandlot sandbox create`, and `sandlot sandbox network`.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use sandlot_client::api::{HostRule, Mode, NetworkInfo, NetworkSpec, SandboxInfo};

use super::output::print_json;
use super::{Conn, Doing};

/// What a new sandbox may reach (default: nothing but its own loopback).
#[derive(clap::Args, Debug, Default)]
#[command(next_help_heading = "Network (default: none)")]
pub(super) struct NetworkArgs {
    /// Let the sandbox reach a name (`api.example.com`, `*.pypi.org`) or CIDR (repeatable).
    #[arg(long, value_name = "NAME|CIDR")]
    pub(super) allow: Vec<String>,
    /// Let the sandbox reach everything but the always-denied ranges (private, loopback, metadata).
    #[arg(long, conflicts_with = "allow")]
    pub(super) allow_all: bool,
    /// Never let the sandbox reach this CIDR, even when otherwise allowed (repeatable).
    #[arg(long, value_name = "CIDR")]
    pub(super) deny: Vec<String>,
    /// Add a header to every request to HOST, e.g. `api.example.com:authorization=env:API_TOKEN`: the
    /// proxy adds it outside the sandbox, which never sees the value. `env:VAR` reads the value from
    /// this shell's environment (keeps it out of `ps` and shell history). HOST is allowed too.
    #[arg(long, value_name = "HOST:HEADER=VALUE", value_parser = parse_injection)]
    pub(super) inject: Vec<(String, String, String)>,
    /// Let anyone who has a port's URL reach the sandbox's servers without the port's token or a key
    /// (inbound; by default every request to a port needs one). For demos and webhooks you mean to
    /// be public.
    #[arg(long)]
    pub(super) public_ports: bool,
}

impl NetworkArgs {
    /// The policy these flags describe; `None` when none is given (the server's default: deny).
    pub(super) fn spec(&self) -> anyhow::Result<Option<NetworkSpec>> {
        let egress = !self.allow.is_empty() || self.allow_all || !self.deny.is_empty() || !self.inject.is_empty();
        if !egress && !self.public_ports {
            return Ok(None);
        }
        let mode = if self.allow_all {
            Mode::AllowAll
        } else if !egress {
            Mode::Deny
        } else if self.allow.is_empty() && self.inject.is_empty() {
            bail!("--deny narrows --allow or --allow-all; on its own it would refuse everything (that is --deny-all)")
        } else {
            Mode::Allowlist
        };
        let mut allow = self.allow.clone();
        let mut rules: BTreeMap<String, HostRule> = BTreeMap::new();
        for (host, header, value) in &self.inject {
            let value = match value.strip_prefix("env:") {
                Some(var) => std::env::var(var)
                    .with_context(|| format!("--inject {host}:{header}: environment variable {var} is not set"))?,
                None => value.clone(),
            };
            rules.entry(host.clone()).or_default().headers.insert(header.clone(), value);
            if mode == Mode::Allowlist && !allow.iter().any(|a| a.eq_ignore_ascii_case(host)) {
                allow.push(host.clone());
            }
        }
        let public_ports = self.public_ports.then_some(true);
        Ok(Some(NetworkSpec { mode, allow, deny: self.deny.clone(), rules, public_ports }))
    }
}

fn parse_injection(s: &str) -> Result<(String, String, String), String> {
    let bad = || format!("expected HOST:HEADER=VALUE (e.g. api.example.com:authorization=env:TOKEN), got `{s}`");
    let (host, rest) = s.split_once(':').ok_or_else(bad)?;
    let (header, value) = rest.split_once('=').ok_or_else(bad)?;
    if host.is_empty() || header.is_empty() {
        return Err(bad());
    }
    if host.starts_with('[') || header.bytes().all(|b| b.is_ascii_digit()) || header.contains(':') {
        return Err(format!(
            "--inject `{s}`: HOST is a name without a port (the rule applies to every port of that name)"
        ));
    }
    Ok((host.to_string(), header.to_string(), value.to_string()))
}

pub(super) const NETWORK_LONG: &str = "\
Show a sandbox's network policy and traffic counters, or replace the policy: with any of --allow, \
--allow-all, --deny, --inject or --deny-all, the new policy takes effect at once for new connections \
and DNS lookups (open connections are left alone). The new policy replaces the old one whole. \
Injected header values are never shown.

Examples:
  sandlot sandbox network sb_123
  sandlot sandbox network sb_123 --allow pypi.org --allow files.pythonhosted.org
  sandlot sandbox network sb_123 --inject api.openai.com:authorization=env:OPENAI_AUTH
  sandlot sandbox network sb_123 --deny-all";

/// Arguments of `sandlot sandbox network`.
#[derive(clap::Args, Debug)]
pub struct NetworkCmdArgs {
    /// Sandbox id.
    id: String,
    #[command(flatten)]
    net: NetworkArgs,
    /// Replace the policy with `deny` (nothing but the sandbox's own loopback).
    #[arg(long, conflicts_with_all = ["allow", "allow_all", "deny", "inject"])]
    deny_all: bool,
    /// Print the sandbox's network as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(super) conn: Conn,
}

pub(super) fn network(args: NetworkCmdArgs) -> anyhow::Result<i32> {
    let sandbox = args.conn.client()?.sandbox(&args.id);
    let new = if args.deny_all { Some(NetworkSpec::default()) } else { args.net.spec()? };
    let info: SandboxInfo = match new {
        Some(spec) => sandbox.set_network(&spec).doing(&format!("setting the network of {}", args.id))?,
        None => sandbox.info().doing(&format!("reading sandbox {}", args.id))?,
    };
    if args.json {
        print_json(&info.network)?;
    } else {
        print_network(&info.network);
    }
    Ok(0)
}

fn print_network(n: &NetworkInfo) {
    let mode = match n.mode {
        Mode::Deny => "deny",
        Mode::AllowAll => "allow-all",
        Mode::Allowlist => "allowlist",
    };
    println!("mode:      {mode}");
    if !n.allow.is_empty() {
        println!("allow:     {}", n.allow.join(", "));
    }
    if !n.deny.is_empty() {
        println!("deny:      {}", n.deny.join(", "));
    }
    for (host, headers) in &n.rules {
        println!("inject:    {host}: {} (values hidden)", headers.join(", "));
    }
    println!("bytes out: {}", n.bytes_out);
    println!("bytes in:  {}", n.bytes_in);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injection_implies_allowlist_and_allows_its_host() {
        let args = NetworkArgs {
            allow: vec!["pypi.org".into()],
            inject: vec![parse_injection("api.example.com:authorization=Bearer x=y").unwrap()],
            ..Default::default()
        };
        let spec = args.spec().unwrap().unwrap();
        assert_eq!(spec.mode, Mode::Allowlist);
        assert_eq!(spec.allow, ["pypi.org", "api.example.com"]);
        assert_eq!(spec.rules["api.example.com"].headers["authorization"], "Bearer x=y");
    }

    #[test]
    fn no_flags_means_the_server_default_and_bad_injections_say_the_shape() {
        assert!(NetworkArgs::default().spec().unwrap().is_none());
        assert!(parse_injection("authorization=x").unwrap_err().contains("HOST:HEADER=VALUE"));
        let args = NetworkArgs {
            inject: vec![parse_injection("h.test:x-key=env:SANDLOT_TEST_SURELY_UNSET").unwrap()],
            ..Default::default()
        };
        assert!(args.spec().unwrap_err().to_string().contains("SANDLOT_TEST_SURELY_UNSET is not set"));
        assert!(parse_injection("api.test:8443:authorization=x").unwrap_err().contains("without a port"));
        assert!(parse_injection("[::1]:authorization=x").unwrap_err().contains("without a port"));
        let deny_only = NetworkArgs { deny: vec!["10.0.0.0/8".into()], ..Default::default() };
        assert!(deny_only.spec().unwrap_err().to_string().contains("--deny-all"));
    }
}
