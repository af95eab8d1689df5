//! Name lookups of the sandbox: the gateway's DNS server (over UDP and TCP) answers allowed names with
//! virtual addresses, resolving them on the host with a short cache.

use std::net::IpAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{SandboxNet, RESOLVE_TTL};
use crate::dns::{self, Rcode};
use crate::lock;
use crate::policy::Decision;

/// Idle time after which a DNS-over-TCP connection is closed.
const DNS_TCP_IDLE: Duration = Duration::from_secs(10);

impl SandboxNet {
    async fn resolve(&self, name: &str) -> Result<(Vec<IpAddr>, bool), Rcode> {
        if let Some(ips) = self.shared.overrides.get(name) {
            return Ok((ips.clone(), true));
        }
        let cached = |net: &Self| {
            let resolved = lock(&net.resolved);
            resolved.get(name).filter(|(_, at)| at.elapsed() < RESOLVE_TTL).map(|(ips, _)| ips.clone())
        };
        if let Some(ips) = cached(self) {
            return Ok((ips, false));
        }
        let Ok(_permit) = self.resolving.acquire().await else { return Err(Rcode::ServFail) };
        if let Some(ips) = cached(self) {
            return Ok((ips, false)); // resolved while this query waited for a permit
        }
        let ips: Vec<IpAddr> =
            match tokio::time::timeout(Duration::from_secs(5), tokio::net::lookup_host((name, 0))).await {
                Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
                Ok(Err(_)) => return Err(Rcode::NxDomain),
                Err(_) => return Err(Rcode::ServFail),
            };
        let mut resolved = lock(&self.resolved);
        if resolved.len() >= 4096 {
            resolved.retain(|_, (_, at)| at.elapsed() < RESOLVE_TTL);
        }
        if resolved.len() < 4096 {
            resolved.insert(name.to_string(), (ips.clone(), tokio::time::Instant::now()));
        }
        Ok((ips, false))
    }

    /// Answers one DNS query (UDP or TCP payload).
    pub(super) async fn dns(&self, msg: &[u8]) -> Option<Vec<u8>> {
        let Some(q) = dns::parse_query(msg) else {
            return dns::format_error(msg);
        };
        let policy = self.policy();
        let Some(rule) = policy.name_allowed(&q.name) else {
            self.record(
                "dns",
                q.name.clone(),
                Some(q.name.clone()),
                Decision { allow: false, rule: "dns".into(), reason: "name not allowed".into() },
            );
            return Some(dns::answer(&q, Rcode::NxDomain, &[]));
        };
        match self.resolve(&q.name).await {
            Ok((ips, admin_mapped)) => {
                let vip = lock(&self.vips).assign(&q.name, ips.clone(), admin_mapped);
                let Some(vip) = vip else {
                    let reason = "every virtual address was answered within the last minute".to_string();
                    self.record("dns", q.name.clone(), Some(q.name.clone()), Decision { allow: false, rule, reason });
                    return Some(dns::answer(&q, Rcode::ServFail, &[]));
                };
                self.record(
                    "dns",
                    q.name.clone(),
                    Some(q.name.clone()),
                    Decision { allow: true, rule, reason: format!("resolved to {ips:?}, answered {vip}") },
                );
                Some(dns::answer(&q, Rcode::NoError, &[IpAddr::V4(vip)]))
            }
            Err(rcode) => Some(dns::answer(&q, rcode, &[])),
        }
    }

    pub(super) async fn dns_tcp<S: AsyncRead + AsyncWrite + Unpin>(&self, mut s: S) {
        loop {
            let mut len = [0u8; 2];
            if !matches!(tokio::time::timeout(DNS_TCP_IDLE, s.read_exact(&mut len)).await, Ok(Ok(_))) {
                return;
            }
            let n = u16::from_be_bytes(len) as usize;
            if n > 512 {
                return;
            }
            let mut msg = vec![0u8; n];
            if !matches!(tokio::time::timeout(DNS_TCP_IDLE, s.read_exact(&mut msg)).await, Ok(Ok(_))) {
                return;
            }
            let Some(reply) = self.dns(&msg).await else { return };
            let mut out = (reply.len() as u16).to_be_bytes().to_vec();
            out.extend_from_slice(&reply);
            if s.write_all(&out).await.is_err() {
                return;
            }
        }
    }
}
