//! Reading the server name a connection asks for, without terminating it: the SNI of a TLS ClientHello
//! and the Host of an HTTP/1 request head. Bounded and strict; `None` when the bytes are not a
//! well-formed instance of either.

/// Largest prefix the proxy buffers while sniffing.
pub const MAX_SNIFF: usize = 16 * 1024;

/// What the bytes so far say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sniff {
    /// A name was found.
    Name(String),
    /// Well-formed so far, but more bytes are needed.
    NeedMore,
    /// Not a ClientHello/HTTP head, or one without a name.
    NoName,
}

/// The SNI host name of a TLS ClientHello.
pub fn tls_sni(b: &[u8]) -> Sniff {
    // TLS record: type 22 (handshake), version, length.
    if b.len() < 5 {
        return if b.is_empty() || b[0] == 22 { Sniff::NeedMore } else { Sniff::NoName };
    }
    if b[0] != 22 {
        return Sniff::NoName;
    }
    let rec_len = u16::from_be_bytes([b[3], b[4]]) as usize;
    if b.len() < 5 + rec_len {
        return if 5 + rec_len > MAX_SNIFF { Sniff::NoName } else { Sniff::NeedMore };
    }
    let hs = &b[5..5 + rec_len];
    parse_client_hello(hs).map_or(Sniff::NoName, Sniff::Name)
}

fn parse_client_hello(hs: &[u8]) -> Option<String> {
    // Handshake: type 1 (ClientHello), 3-byte length.
    if *hs.first()? != 1 {
        return None;
    }
    let mut p = 4;
    p += 2 + 32; // version, random
    let sid = *hs.get(p)? as usize;
    p += 1 + sid;
    let cs = u16::from_be_bytes([*hs.get(p)?, *hs.get(p + 1)?]) as usize;
    p += 2 + cs;
    let cm = *hs.get(p)? as usize;
    p += 1 + cm;
    let ext_len = u16::from_be_bytes([*hs.get(p)?, *hs.get(p + 1)?]) as usize;
    p += 2;
    let end = p.checked_add(ext_len)?;
    let exts = hs.get(p..end)?;
    let mut q = 0;
    while q + 4 <= exts.len() {
        let ty = u16::from_be_bytes([exts[q], exts[q + 1]]);
        let len = u16::from_be_bytes([exts[q + 2], exts[q + 3]]) as usize;
        let data = exts.get(q + 4..q + 4 + len)?;
        if ty == 0 {
            // server_name: list length, then (type 0 = host_name, 2-byte length, name).
            let list = data.get(2..)?;
            if *list.first()? != 0 {
                return None;
            }
            let n = u16::from_be_bytes([*list.get(1)?, *list.get(2)?]) as usize;
            let name = list.get(3..3 + n)?;
            return valid_host(name);
        }
        q += 4 + len;
    }
    None
}

/// A host name of 1..=63-byte labels (one trailing dot allowed): `....` or `..pypi.org` is no name,
/// not an empty one or one that a `*.pypi.org` rule would match.
fn valid_host(name: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(name).ok()?;
    let s = s.strip_suffix('.').unwrap_or(s);
    let ok = s.len() <= 253
        && s.split('.').all(|l| !l.is_empty() && l.len() <= 63)
        && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.' || c == b'_');
    ok.then(|| s.to_ascii_lowercase())
}

/// The Host of an HTTP/1 request head (port stripped).
pub fn http_host(b: &[u8]) -> Sniff {
    let Some(end) = b.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if b.len() >= MAX_SNIFF || !b.iter().all(|c| c.is_ascii()) { Sniff::NoName } else { Sniff::NeedMore };
    };
    let head = &b[..end];
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        Err(_) => return Sniff::NoName,
    };
    let mut hosts = text.split("\r\n").skip(1).filter_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case("host").then(|| v.trim())
    });
    match (hosts.next(), hosts.next()) {
        // Two Host headers are a smuggling attempt.
        (Some(h), None) => {
            let h = if h.starts_with('[') { h } else { h.split(':').next().unwrap_or(h) };
            valid_host(h.as_bytes()).map_or(Sniff::NoName, Sniff::Name)
        }
        _ => Sniff::NoName,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ClientHello carrying `name` as SNI.
    pub fn client_hello(name: &str) -> Vec<u8> {
        let mut sni = vec![0u8];
        sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
        sni.extend_from_slice(name.as_bytes());
        let mut sni_ext = ((sni.len()) as u16).to_be_bytes().to_vec();
        sni_ext.extend_from_slice(&sni);
        let mut exts = vec![0, 0];
        exts.extend_from_slice(&(sni_ext.len() as u16).to_be_bytes());
        exts.extend_from_slice(&sni_ext);
        let mut body = vec![3, 3];
        body.extend_from_slice(&[0; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
        body.extend_from_slice(&[1, 0]); // null compression
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut hs = vec![1];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        let mut rec = vec![22, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn finds_sni_and_asks_for_more_on_partial_input() {
        let ch = client_hello("API.example.com");
        assert_eq!(tls_sni(&ch), Sniff::Name("api.example.com".into()));
        assert_eq!(tls_sni(&ch[..10]), Sniff::NeedMore);
        assert_eq!(tls_sni(b"GET / HTTP/1.1\r\n"), Sniff::NoName);
    }

    /// Found by the netproxy_sniff fuzz target: `Host: ....` was sniffed as the empty name, and
    /// `..pypi.org` as a name a `*.pypi.org` rule matches. Empty labels are no name.
    #[test]
    fn empty_labels_are_no_name() {
        assert_eq!(http_host(b"GET /\x19 \n\r\n\rH1.1\r\nHost:....\r\n\r\n"), Sniff::NoName);
        assert_eq!(http_host(b"GET / HTTP/1.1\r\nHost: ..pypi.org\r\n\r\n"), Sniff::NoName);
        assert_eq!(http_host(b"GET / HTTP/1.1\r\nHost: a..b\r\n\r\n"), Sniff::NoName);
        assert_eq!(tls_sni(&client_hello(".")), Sniff::NoName);
        assert_eq!(tls_sni(&client_hello("x..pypi.org")), Sniff::NoName);
        assert_eq!(http_host(b"GET / HTTP/1.1\r\nHost: A.test.:80\r\n\r\n"), Sniff::Name("a.test".into()));
        assert_eq!(tls_sni(&client_hello("pypi.org.")), Sniff::Name("pypi.org".into()));
    }

    #[test]
    fn finds_http_host_and_refuses_duplicates() {
        assert_eq!(http_host(b"GET / HTTP/1.1\r\nHost: a.test:8080\r\n\r\n"), Sniff::Name("a.test".into()));
        assert_eq!(http_host(b"GET / HTTP/1.1\r\nHost: a.test\r\n"), Sniff::NeedMore);
        assert_eq!(http_host(b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n"), Sniff::NoName);
        assert_eq!(http_host(b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n"), Sniff::NoName);
    }
}
