//! IPv4/IPv6 networks in CIDR notation.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// A network: address plus prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The network of `prefix` bits around `addr` (`None` when the prefix is longer than the address).
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        (prefix <= max).then_some(Cidr { addr, prefix })
    }

    /// Whether `ip` lies in this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = if self.prefix == 0 { 0 } else { u32::MAX << (32 - self.prefix) };
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = if self.prefix == 0 { 0 } else { u128::MAX << (128 - self.prefix) };
                u128::from(net) & mask == u128::from(ip) & mask
            }
            // An IPv4-mapped IPv6 address is the IPv4 address for policy purposes.
            (IpAddr::V4(_), IpAddr::V6(ip)) => ip.to_ipv4_mapped().is_some_and(|v4| self.contains(IpAddr::V4(v4))),
            _ => false,
        }
    }
}

/// Why a text is not a CIDR; the text is quoted in the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// The part before any `/` is not an IPv4 or IPv6 address.
    #[error("{0:?} is not an IP address or CIDR")]
    NotAnAddress(String),
    /// The prefix length after `/` is not a number or is longer than the address (32 or 128 bits).
    #[error("{0:?}: bad prefix length")]
    BadPrefix(String),
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, CidrError> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a.parse().map_err(|_| CidrError::NotAnAddress(s.to_string()))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(|| CidrError::BadPrefix(s.to_string()))?,
            None => max,
        };
        // An IPv4-mapped IPv6 network (`::ffff:a.b.c.d/96+`) is the IPv4 network it maps, so a rule
        // written either way matches the same destinations.
        if let IpAddr::V6(v6) = addr {
            if let (Some(v4), true) = (v6.to_ipv4_mapped(), prefix >= 96) {
                return Ok(Cidr { addr: IpAddr::V4(v4), prefix: prefix - 96 });
            }
        }
        Ok(Cidr { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contains_v4_v6_and_mapped() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(c.contains("10.2.3.4".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.0.0.1".parse().unwrap()));
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd00:ec2::254".parse().unwrap()));
        let host: Cidr = "169.254.169.254".parse().unwrap();
        assert!(host.contains("169.254.169.254".parse().unwrap()));
        assert!("0.0.0.0/0".parse::<Cidr>().unwrap().contains("8.8.8.8".parse().unwrap()));
        assert!("1.2.3.4/33".parse::<Cidr>().is_err());
        let mapped: Cidr = "::ffff:10.0.0.0/104".parse().unwrap();
        assert_eq!(mapped.to_string(), "10.0.0.0/8");
        assert!(mapped.contains("10.9.9.9".parse().unwrap()));
        assert!("example.com".parse::<Cidr>().is_err());
    }
}
