//! Egress policy: which destinations a sandbox may open a TCP connection to.
//!
//! Order of checks (first match wins): the sandbox's `deny` CIDRs; the always-deny list (private,
//! loopback, link-local and metadata ranges, the host's own addresses) unless the destination name is an
//! admin `--resolve` mapping; the mode (`deny` refuses everything, `allow-all` admits the rest); for
//! `allowlist`, the destination must be an address this sandbox got from an allowed DNS answer, or lie in
//! an allowed CIDR. On port 443 the TLS SNI, on port 80 the HTTP Host, must then name that same allowed
//! host: connecting to an allowed address with another name is refused, and so is a bare-IP connection
//! to a rule that only names a domain.

use std::net::IpAddr;
use std::sync::{Arc, RwLock};

use serde::Serialize;

use crate::cidr::{Cidr, CidrError};
use crate::{read_lock, write_lock};

/// Ranges no sandbox reaches unless the admin maps a name there explicitly.
pub const ALWAYS_DENY: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::/96",
    "::1/128",
    "64:ff9b::/96",
    "64:ff9b:1::/48",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
];

pub use sandlot_api::{HostRule, Mode, NetworkSpec};

/// Why a network spec does not compile. The message names the offending entry, so it can be shown to
/// whoever wrote the spec as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// An `allow` or `deny` entry looked like an address or CIDR but is not one.
    #[error(transparent)]
    Cidr(#[from] CidrError),
    /// An `allow` entry or a rule's host is neither a domain name nor a `*.domain` pattern.
    #[error("{0:?} is not a domain name, `*.domain` pattern or CIDR")]
    NotAName(String),
    /// A rule's header name is not one the broker could send.
    #[error("rules[{host:?}]: {header:?} is not a valid header name")]
    HeaderName {
        /// The rule's host, as written.
        host: String,
        /// The header name, as written.
        header: String,
    },
    /// A rule's header value holds characters a header may not (control characters).
    #[error("rules[{host:?}]: the value of header {header:?} is not valid (no control characters)")]
    HeaderValue {
        /// The rule's host, as written.
        host: String,
        /// The header whose value is refused.
        header: String,
    },
    /// In allowlist mode, a rule names a host that `allow` does not admit (a typo the rule would hide).
    #[error("rules[{0:?}]: the host is not in `allow`")]
    RuleHostNotAllowed(String),
    /// One of the tenant's exemptions (set by an admin) is not a CIDR.
    #[error("tenant exemption {entry:?}: {source}")]
    Exemption {
        /// The exemption, as stored.
        entry: String,
        /// What is wrong with it.
        source: CidrError,
    },
}

/// The host's own addresses, the networks its interfaces are on, and its default gateways: what a
/// sandbox with `allow-all` would otherwise reach next to the host (its LAN, its router, a cloud's
/// services on the host's subnet). Shared by every policy and replaced when the host's addresses
/// change, so running sandboxes follow at once.
#[derive(Debug, Default)]
pub struct HostNetworks(RwLock<Vec<Cidr>>);

impl HostNetworks {
    /// A set holding `nets`.
    pub fn new(nets: Vec<Cidr>) -> Arc<HostNetworks> {
        let set = Arc::new(HostNetworks::default());
        set.replace(nets);
        set
    }

    /// A set of literal CIDRs or addresses (tests, fixed configurations).
    pub fn of(nets: &[&str]) -> Arc<HostNetworks> {
        HostNetworks::new(nets.iter().map(|n| n.parse().expect("a CIDR")).collect())
    }

    /// Replaces the set; returns whether it changed.
    pub fn replace(&self, mut nets: Vec<Cidr>) -> bool {
        nets.sort_by_key(|c| c.to_string());
        nets.dedup();
        let mut cur = write_lock(&self.0);
        if *cur == nets {
            return false;
        }
        *cur = nets;
        true
    }

    /// The first network of the set holding `ip`.
    pub fn find(&self, ip: IpAddr) -> Option<Cidr> {
        read_lock(&self.0).iter().find(|c| c.contains(ip)).copied()
    }

    /// The networks, as CIDR text.
    pub fn list(&self) -> Vec<String> {
        read_lock(&self.0).iter().map(|c| c.to_string()).collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Exact(String),
    /// `*.example.com`: any name strictly below `example.com`.
    Suffix(String),
}

impl Pattern {
    fn parse(s: &str) -> Result<Pattern, PolicyError> {
        let lower = s.trim_end_matches('.').to_ascii_lowercase();
        let (wild, name) = match lower.strip_prefix("*.") {
            Some(rest) => (true, rest.to_string()),
            None => (false, lower.clone()),
        };
        let ok_label = |l: &str| {
            !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        if name.is_empty() || name.len() > 253 || !name.split('.').all(ok_label) {
            return Err(PolicyError::NotAName(s.to_string()));
        }
        Ok(if wild { Pattern::Suffix(name) } else { Pattern::Exact(name) })
    }

    fn matches(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        match self {
            Pattern::Exact(n) => host == *n,
            Pattern::Suffix(n) => {
                host.len() > n.len() + 1 && host.ends_with(n.as_str()) && host[..host.len() - n.len()].ends_with('.')
            }
        }
    }

    fn text(&self) -> String {
        match self {
            Pattern::Exact(n) => n.clone(),
            Pattern::Suffix(n) => format!("*.{n}"),
        }
    }
}

/// A compiled policy.
#[derive(Debug, Clone)]
pub struct Policy {
    mode: Mode,
    names: Vec<Pattern>,
    cidrs: Vec<Cidr>,
    deny: Vec<Cidr>,
    always_deny: Vec<Cidr>,
    /// The host's own addresses and networks: always denied, whatever an admin exempts.
    host: Arc<HostNetworks>,
    /// Parts of the always-deny list the sandbox's tenant was opted into by an admin.
    exempt: Vec<Cidr>,
    rules: Vec<(Pattern, HostRule)>,
}

/// A connection attempt, as the proxy sees it.
#[derive(Debug, Clone)]
pub struct Attempt<'a> {
    /// Destination address.
    pub ip: IpAddr,
    /// Destination port.
    pub port: u16,
    /// Names whose DNS answers to this sandbox contained `ip`.
    pub names: &'a [String],
    /// TLS SNI (port 443) or HTTP Host (port 80), when sniffed.
    pub server_name: Option<&'a str>,
    /// `ip` came from an admin `--resolve` mapping (which may point at private addresses).
    pub admin_mapped: bool,
}

/// The policy's answer, with what matched and why (for the audit log).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// Let it through.
    pub allow: bool,
    /// The rule that decided (`*.pypi.org`, `203.0.113.0/24`, `always-deny 10.0.0.0/8`, `mode deny`).
    pub rule: String,
    /// Human reason.
    pub reason: String,
}

fn deny(rule: impl Into<String>, reason: impl Into<String>) -> Decision {
    Decision { allow: false, rule: rule.into(), reason: reason.into() }
}

fn allow(rule: impl Into<String>, reason: impl Into<String>) -> Decision {
    Decision { allow: true, rule: rule.into(), reason: reason.into() }
}

impl Policy {
    /// Compiles `spec`; `host` holds the host's own addresses and networks (always denied, read at
    /// each decision so a change applies at once); `exempt` are the always-denied ranges an admin
    /// opted the sandbox's tenant into (reachable when `spec` allows).
    pub fn compile(spec: &NetworkSpec, host: &Arc<HostNetworks>, exempt: &[String]) -> Result<Policy, PolicyError> {
        let mut names = Vec::new();
        let mut cidrs = Vec::new();
        for a in &spec.allow {
            if a.chars().next().is_some_and(|c| c.is_ascii_digit() || c == ':') || a.contains('/') {
                cidrs.push(a.parse::<Cidr>()?);
            } else {
                names.push(Pattern::parse(a)?);
            }
        }
        let deny = spec.deny.iter().map(|d| d.parse::<Cidr>()).collect::<Result<Vec<_>, _>>()?;
        let always_deny: Vec<Cidr> = ALWAYS_DENY.iter().map(|c| c.parse().expect("static CIDR")).collect();
        let host = Arc::clone(host);
        let mut rules = Vec::new();
        for (host, rule) in &spec.rules {
            let p = Pattern::parse(host)?;
            for (k, v) in &rule.headers {
                // Checked as the broker will build them: a header it could not send must be refused
                // here, not silently left out of the request (with the credential it carries).
                if hyper::header::HeaderName::from_bytes(k.as_bytes()).is_err() {
                    return Err(PolicyError::HeaderName { host: host.clone(), header: k.clone() });
                }
                if hyper::header::HeaderValue::from_str(v).is_err() {
                    return Err(PolicyError::HeaderValue { host: host.clone(), header: k.clone() });
                }
            }
            // A rule's host must be reachable, or the rule is dead weight that hides a typo.
            if spec.mode == Mode::Allowlist
                && !names.iter().any(|n| n == &p || n.matches(&p.text().replace("*.", "x.")))
            {
                return Err(PolicyError::RuleHostNotAllowed(host.clone()));
            }
            rules.push((p, rule.clone()));
        }
        let exempt = exempt
            .iter()
            .map(|c| c.parse::<Cidr>().map_err(|source| PolicyError::Exemption { entry: c.clone(), source }))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Policy { mode: spec.mode, names, cidrs, deny, always_deny, host, exempt, rules })
    }

    /// Whether the policy refuses everything (no network link is needed at all).
    pub fn denies_all(&self) -> bool {
        self.mode == Mode::Deny
    }

    /// Whether a DNS query for `name` may be answered (allow-all answers every name).
    pub fn name_allowed(&self, name: &str) -> Option<String> {
        match self.mode {
            Mode::Deny => None,
            Mode::AllowAll => Some("allow-all".into()),
            Mode::Allowlist => self.names.iter().find(|p| p.matches(name)).map(Pattern::text),
        }
    }

    /// Header transforms for requests to `host`, if a rule names it.
    pub fn rule_for(&self, host: &str) -> Option<&HostRule> {
        self.rules.iter().find(|(p, _)| p.matches(host)).map(|(_, r)| r)
    }

    /// Whether any rule carries header transforms (so TLS to such hosts is terminated).
    pub fn brokers(&self, host: &str) -> bool {
        self.rule_for(host).is_some_and(|r| !r.headers.is_empty())
    }

    /// Decides one connection attempt.
    pub fn decide(&self, a: &Attempt<'_>) -> Decision {
        if let Some(c) = self.deny.iter().find(|c| c.contains(a.ip)) {
            return deny(format!("deny {c}"), format!("{} is in a denied range", a.ip));
        }
        // The host's own addresses (its services on a private interface) cannot be exempted: an
        // exemption of a company range would otherwise open the sandlot host itself.
        if !a.admin_mapped {
            if let Some(c) = self.host.find(a.ip) {
                return deny(
                    format!("always-deny {c}"),
                    format!("{} is an address of the sandlot host, its gateway or a network it is on", a.ip),
                );
            }
        }
        if !a.admin_mapped && !self.exempt.iter().any(|c| c.contains(a.ip)) {
            if let Some(c) = self.always_deny.iter().find(|c| c.contains(a.ip)) {
                return deny(
                    format!("always-deny {c}"),
                    format!("{} is private, loopback, link-local, metadata or the host itself", a.ip),
                );
            }
        }
        match self.mode {
            Mode::Deny => return deny("mode deny", "this sandbox has no network access"),
            Mode::AllowAll => return allow("allow-all", "allow-all mode"),
            Mode::Allowlist => {}
        }
        // A name-based rule: the address came from an allowed DNS answer.
        let named: Vec<(&String, String)> =
            a.names.iter().filter_map(|n| self.name_allowed(n).map(|rule| (n, rule))).collect();
        if let Some((name, rule)) = named.first() {
            if matches!(a.port, 443 | 80) {
                let what = if a.port == 443 { "TLS SNI" } else { "HTTP Host" };
                return match a.server_name {
                    Some(sn) if named.iter().any(|(n, _)| n.eq_ignore_ascii_case(sn.trim_end_matches('.'))) => {
                        allow(rule.clone(), format!("{sn} is allowed"))
                    }
                    Some(sn) => {
                        deny(rule.clone(), format!("{what} {sn:?} does not match {name}, which resolved to {}", a.ip))
                    }
                    None => deny(rule.clone(), format!("no {what} on a connection to {name}")),
                };
            }
            return allow(rule.clone(), format!("{name} is allowed"));
        }
        if let Some(c) = self.cidrs.iter().find(|c| c.contains(a.ip)) {
            return allow(c.to_string(), format!("{} is in an allowed range", a.ip));
        }
        deny("allowlist", format!("{} was not resolved from an allowed name and is in no allowed range", a.ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_networks_are_denied_to_allow_all_and_follow_a_change_at_once() {
        let nets = HostNetworks::of(&["203.0.113.0/24", "198.51.100.1"]);
        let spec: NetworkSpec = serde_json::from_str(r#"{"mode":"allow-all"}"#).unwrap();
        let p = Policy::compile(&spec, &nets, &["203.0.113.0/24".into()]).unwrap();
        let at = |ip: &str| Attempt {
            ip: ip.parse().unwrap(),
            port: 22,
            names: &[],
            server_name: None,
            admin_mapped: false,
        };
        let on_link = p.decide(&at("203.0.113.7"));
        assert!(!on_link.allow, "an exemption does not open the host's own network: {on_link:?}");
        assert_eq!(on_link.rule, "always-deny 203.0.113.0/24");
        assert!(!p.decide(&at("198.51.100.1")).allow, "the gateway");
        assert!(p.decide(&at("198.51.100.2")).allow);
        // The host moved to another network: the compiled policy follows without a recompile.
        assert!(nets.replace(vec!["198.51.100.0/24".parse().unwrap()]));
        assert!(!nets.replace(vec!["198.51.100.0/24".parse().unwrap()]), "no change the second time");
        assert!(p.decide(&at("203.0.113.7")).allow);
        assert!(!p.decide(&at("198.51.100.2")).allow);
    }

    fn policy(json: &str) -> Policy {
        Policy::compile(&serde_json::from_str(json).unwrap(), &HostNetworks::of(&["192.0.2.10"]), &[]).unwrap()
    }

    #[test]
    fn a_tenant_exemption_lifts_only_its_own_range_and_only_where_the_policy_allows() {
        let spec: NetworkSpec = serde_json::from_str(r#"{"mode":"allowlist","allow":["10.20.0.0/16"]}"#).unwrap();
        let p = Policy::compile(&spec, &HostNetworks::of(&[]), &["10.20.30.0/24".into()]).unwrap();
        assert!(p.decide(&attempt("10.20.30.4", 5432, &[], None)).allow);
        // Allowed by the sandbox's CIDR but not exempt: the always-deny list still wins.
        let d = p.decide(&attempt("10.20.31.4", 5432, &[], None));
        assert!(!d.allow && d.rule == "always-deny 10.0.0.0/8", "{d:?}");
        // Exempt but not allowed by the sandbox's own policy.
        let strict: NetworkSpec = serde_json::from_str(r#"{"mode":"allowlist","allow":["pypi.org"]}"#).unwrap();
        let p = Policy::compile(&strict, &HostNetworks::of(&[]), &["10.20.30.0/24".into()]).unwrap();
        assert!(!p.decide(&attempt("10.20.30.4", 5432, &[], None)).allow);
        assert!(Policy::compile(&strict, &HostNetworks::of(&[]), &["not-a-cidr".into()])
            .unwrap_err()
            .to_string()
            .contains("tenant exemption"));
        // The host's own address stays denied inside an exempt range.
        let p = Policy::compile(&spec, &HostNetworks::of(&["10.20.30.1"]), &["10.20.30.0/24".into()]).unwrap();
        let d = p.decide(&attempt("10.20.30.1", 22, &[], None));
        assert!(!d.allow && d.rule == "always-deny 10.20.30.1/32", "{d:?}");
    }

    #[test]
    fn compile_errors_name_the_entry_at_fault() {
        let fails = |json: &str, exempt: &[&str]| {
            let spec: NetworkSpec = serde_json::from_str(json).unwrap();
            let exempt: Vec<String> = exempt.iter().map(|e| e.to_string()).collect();
            Policy::compile(&spec, &HostNetworks::of(&[]), &exempt).unwrap_err().to_string()
        };
        let allowlist = |extra: &str| format!(r#"{{"mode":"allowlist","allow":["a.test"]{extra}}}"#);
        assert_eq!(fails(&allowlist(r#","deny":["10.0.0.0/40"]"#), &[]), r#""10.0.0.0/40": bad prefix length"#);
        assert_eq!(fails(r#"{"allow":["1.2.3.x/8"]}"#, &[]), r#""1.2.3.x/8" is not an IP address or CIDR"#);
        assert_eq!(
            fails(r#"{"allow":["bad name"]}"#, &[]),
            r#""bad name" is not a domain name, `*.domain` pattern or CIDR"#
        );
        assert_eq!(
            fails(&allowlist(r#","rules":{"a.test":{"headers":{"bad name":"v"}}}"#), &[]),
            r#"rules["a.test"]: "bad name" is not a valid header name"#
        );
        assert_eq!(
            fails(&allowlist(r#","rules":{"a.test":{"headers":{"x":"a\nb"}}}"#), &[]),
            r#"rules["a.test"]: the value of header "x" is not valid (no control characters)"#
        );
        assert_eq!(
            fails(&allowlist(r#","rules":{"b.test":{"headers":{"x":"v"}}}"#), &[]),
            r#"rules["b.test"]: the host is not in `allow`"#
        );
        assert_eq!(fails("{}", &["nope"]), r#"tenant exemption "nope": "nope" is not an IP address or CIDR"#);
    }

    #[test]
    fn header_rules_the_broker_could_not_send_are_refused() {
        for (name, value) in [("x key", "v"), ("x/y", "v"), ("", "v"), ("x", "a\nb"), ("x", "a\u{7f}b")] {
            let mut spec: NetworkSpec = serde_json::from_str(r#"{"mode":"allowlist","allow":["a.test"]}"#).unwrap();
            let mut rule = HostRule::default();
            rule.headers.insert(name.to_string(), value.to_string());
            spec.rules.insert("a.test".into(), rule);
            assert!(Policy::compile(&spec, &HostNetworks::of(&[]), &[]).is_err(), "{name:?}: {value:?}");
        }
    }

    #[test]
    fn nat64_and_ipv4_compatible_forms_of_private_addresses_are_denied() {
        let p = policy(r#"{"mode":"allow-all"}"#);
        for ip in ["64:ff9b::a00:1", "64:ff9b:1::a00:1", "::a00:1", "::ffff:10.0.0.1"] {
            assert!(!p.decide(&attempt(ip, 80, &[], None)).allow, "{ip}");
        }
    }

    fn attempt<'a>(ip: &str, port: u16, names: &'a [String], sn: Option<&'a str>) -> Attempt<'a> {
        Attempt { ip: ip.parse().unwrap(), port, names, server_name: sn, admin_mapped: false }
    }

    #[test]
    fn deny_by_default() {
        let p = policy("{}");
        assert!(!p.decide(&attempt("93.184.216.34", 80, &[], None)).allow);
        assert_eq!(p.name_allowed("example.com"), None);
    }

    #[test]
    fn metadata_and_private_ranges_are_refused_even_in_allow_all() {
        let p = policy(r#"{"mode":"allow-all"}"#);
        for ip in ["169.254.169.254", "10.1.2.3", "127.0.0.1", "192.168.1.1", "fd00:ec2::254", "192.0.2.10"] {
            let d = p.decide(&attempt(ip, 80, &[], None));
            assert!(!d.allow, "{ip}");
            assert!(d.rule.starts_with("always-deny"), "{ip}: {}", d.rule);
        }
        assert!(p.decide(&attempt("93.184.216.34", 80, &[], None)).allow);
    }

    #[test]
    fn admin_mapping_passes_the_always_deny_list_but_not_user_deny() {
        let p = policy(r#"{"mode":"allowlist","allow":["pkg.test"],"deny":["127.0.0.2/32"]}"#);
        let names = vec!["pkg.test".to_string()];
        let mut a = attempt("127.0.0.1", 8080, &names, None);
        a.admin_mapped = true;
        assert!(p.decide(&a).allow);
        let mut b = attempt("127.0.0.2", 8080, &names, None);
        b.admin_mapped = true;
        assert!(!p.decide(&b).allow);
    }

    #[test]
    fn wildcards_match_subdomains_only() {
        let p = policy(r#"{"mode":"allowlist","allow":["*.pypi.org"]}"#);
        assert!(p.name_allowed("files.pypi.org").is_some());
        assert!(p.name_allowed("a.b.pypi.org").is_some());
        assert!(p.name_allowed("pypi.org").is_none());
        assert!(p.name_allowed("evilpypi.org").is_none());
        assert!(p.name_allowed("pypi.org.evil.com").is_none());
    }

    #[test]
    fn sni_and_host_must_name_the_resolved_host() {
        let p = policy(r#"{"mode":"allowlist","allow":["api.example.com"]}"#);
        let names = vec!["api.example.com".to_string()];
        assert!(p.decide(&attempt("93.184.216.34", 443, &names, Some("api.example.com"))).allow);
        assert!(!p.decide(&attempt("93.184.216.34", 443, &names, Some("evil.com"))).allow);
        assert!(!p.decide(&attempt("93.184.216.34", 443, &names, None)).allow);
        assert!(!p.decide(&attempt("93.184.216.34", 80, &names, Some("other.example.com"))).allow);
        // A bare IP connection to a name-only rule.
        assert!(!p.decide(&attempt("93.184.216.34", 443, &[], Some("api.example.com"))).allow);
    }

    #[test]
    fn cidr_rules_and_deny_wins() {
        let p = policy(r#"{"mode":"allowlist","allow":["203.0.113.0/24"],"deny":["203.0.113.128/25"]}"#);
        assert!(p.decide(&attempt("203.0.113.5", 22, &[], None)).allow);
        assert!(!p.decide(&attempt("203.0.113.200", 22, &[], None)).allow);
    }

    #[test]
    fn bad_specs_are_rejected() {
        for bad in [
            r#"{"mode":"allowlist","allow":["exa mple.com"]}"#,
            r#"{"mode":"allowlist","allow":["*"]}"#,
            r#"{"mode":"allowlist","deny":["not-a-cidr"]}"#,
            r#"{"mode":"allowlist","allow":["a.com"],"rules":{"b.com":{"headers":{"x":"y"}}}}"#,
            r#"{"mode":"allowlist","allow":["a.com"],"rules":{"a.com":{"headers":{"x":"y\r\nz: w"}}}}"#,
        ] {
            let spec: NetworkSpec = serde_json::from_str(bad).unwrap();
            assert!(Policy::compile(&spec, &HostNetworks::of(&[]), &[]).is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<NetworkSpec>(r#"{"mode":"open"}"#).is_err());
    }
}
