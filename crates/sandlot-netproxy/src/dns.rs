//! A minimal, strict DNS message codec: one question in, answers of type A/AAAA out. Queries are sandbox
//! data, so anything unusual (compression in a question, several questions, truncated input) is refused
//! rather than interpreted.

use std::net::IpAddr;

/// Record types we answer.
pub const TYPE_A: u16 = 1;
/// IPv6 address record.
pub const TYPE_AAAA: u16 = 28;

/// A parsed query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Transaction id.
    pub id: u16,
    /// Recursion desired flag, echoed.
    pub rd: bool,
    /// Lower-case name without the trailing dot.
    pub name: String,
    /// Question type.
    pub qtype: u16,
    /// Question bytes (name + type + class), echoed in the answer.
    question: Vec<u8>,
}

/// Response codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rcode {
    /// Answers follow (possibly none).
    NoError = 0,
    /// The query could not be parsed.
    FormErr = 1,
    /// Upstream resolution failed.
    ServFail = 2,
    /// No such name (what a refused name looks like to the sandbox).
    NxDomain = 3,
}

/// Parses a query; `None` for anything that is not a single plain question.
pub fn parse_query(msg: &[u8]) -> Option<Query> {
    if msg.len() < 12 || msg.len() > 512 {
        return None;
    }
    let id = u16::from_be_bytes([msg[0], msg[1]]);
    let flags = u16::from_be_bytes([msg[2], msg[3]]);
    let is_response = flags & 0x8000 != 0;
    let opcode = (flags >> 11) & 0xf;
    let qdcount = u16::from_be_bytes([msg[4], msg[5]]);
    if is_response || opcode != 0 || qdcount != 1 {
        return None;
    }
    let mut pos = 12;
    let mut labels = Vec::new();
    loop {
        let len = *msg.get(pos)? as usize;
        pos += 1;
        if len == 0 {
            break;
        }
        if len > 63 {
            return None; // compression pointers have no place in a question
        }
        let label = msg.get(pos..pos + len)?;
        if !label.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_') {
            return None;
        }
        labels.push(String::from_utf8(label.to_ascii_lowercase()).ok()?);
        pos += len;
    }
    let qtype = u16::from_be_bytes([*msg.get(pos)?, *msg.get(pos + 1)?]);
    let qclass = u16::from_be_bytes([*msg.get(pos + 2)?, *msg.get(pos + 3)?]);
    if qclass != 1 {
        return None;
    }
    let name = labels.join(".");
    if name.is_empty() || name.len() > 253 {
        return None;
    }
    Some(Query { id, rd: flags & 0x0100 != 0, name, qtype, question: msg[12..pos + 4].to_vec() })
}

/// A FORMERR answer for an unparseable query (only the id is echoed).
pub fn format_error(msg: &[u8]) -> Option<Vec<u8>> {
    let id = msg.get(0..2)?;
    let mut out = id.to_vec();
    out.extend_from_slice(&[0x80, Rcode::FormErr as u8, 0, 0, 0, 0, 0, 0, 0, 0]);
    Some(out)
}

/// Builds the answer to `q`: `addrs` of the asked family become records with a 60 s TTL.
pub fn answer(q: &Query, rcode: Rcode, addrs: &[IpAddr]) -> Vec<u8> {
    let records: Vec<&IpAddr> =
        addrs.iter().filter(|a| (q.qtype == TYPE_A && a.is_ipv4()) || (q.qtype == TYPE_AAAA && a.is_ipv6())).collect();
    let mut out = Vec::with_capacity(64 + records.len() * 28);
    out.extend_from_slice(&q.id.to_be_bytes());
    let flags: u16 = 0x8000 | 0x0080 | if q.rd { 0x0100 } else { 0 } | rcode as u16;
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&(records.len() as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&q.question);
    for a in records {
        out.extend_from_slice(&[0xC0, 0x0C]); // pointer to the question's name
        let (ty, data): (u16, Vec<u8>) = match a {
            IpAddr::V4(v4) => (TYPE_A, v4.octets().to_vec()),
            IpAddr::V6(v6) => (TYPE_AAAA, v6.octets().to_vec()),
        };
        out.extend_from_slice(&ty.to_be_bytes());
        out.extend_from_slice(&1u16.to_be_bytes());
        out.extend_from_slice(&60u32.to_be_bytes());
        out.extend_from_slice(&(data.len() as u16).to_be_bytes());
        out.extend_from_slice(&data);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut m = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for l in name.split('.') {
            m.push(l.len() as u8);
            m.extend_from_slice(l.as_bytes());
        }
        m.push(0);
        m.extend_from_slice(&qtype.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
        m
    }

    #[test]
    fn parses_and_answers_a_query() {
        let q = parse_query(&query("Api.Example.com", TYPE_A)).unwrap();
        assert_eq!(q.name, "api.example.com");
        assert_eq!(q.id, 0x1234);
        let a = answer(&q, Rcode::NoError, &["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()]);
        assert_eq!(&a[0..2], &[0x12, 0x34]);
        assert_eq!(a[3] & 0x0f, 0);
        assert_eq!(u16::from_be_bytes([a[6], a[7]]), 1, "one A record; the AAAA is filtered out");
        assert_eq!(&a[a.len() - 4..], &[127, 0, 0, 1]);
    }

    #[test]
    fn nxdomain_has_no_answers() {
        let q = parse_query(&query("evil.com", TYPE_A)).unwrap();
        let a = answer(&q, Rcode::NxDomain, &[]);
        assert_eq!(a[3] & 0x0f, 3);
        assert_eq!(u16::from_be_bytes([a[6], a[7]]), 0);
    }

    #[test]
    fn hostile_queries_are_refused() {
        assert!(parse_query(&[0; 5]).is_none());
        let mut m = query("a.com", TYPE_A);
        m[2] |= 0x80; // a response, not a query
        assert!(parse_query(&m).is_none());
        let mut m = query("a.com", TYPE_A);
        m[12] = 0xC0; // compression pointer in the question
        assert!(parse_query(&m).is_none());
        let m = query("a.com", TYPE_A);
        assert!(parse_query(&m[..m.len() - 2]).is_none(), "truncated");
        let mut m = query("a.com", TYPE_A);
        m[5] = 2; // two questions
        assert!(parse_query(&m).is_none());
    }
}
