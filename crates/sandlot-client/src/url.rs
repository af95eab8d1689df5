//! Percent-encoding for path segments and query strings (RFC 3986), small enough not to need a crate.

/// Encodes `s` as one path segment: everything but the unreserved characters is escaped, `/` included.
pub(crate) fn segment(s: &str) -> String {
    encode(s, |_| false)
}

/// Encodes `s` as a query value. `/` stays readable; `+`, `&`, `=`, `#`, `%` and spaces are escaped,
/// so form decoders on the server (which read `+` as a space) get the exact text back.
pub(crate) fn query_value(s: &str) -> String {
    encode(s, |b| b == b'/')
}

/// Builds `?k=v&k2=v2` from pairs (keys are ours and plain; values are encoded), or `""` with no pairs.
pub(crate) fn query(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (key, value)) in pairs.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(key);
        out.push('=');
        out.push_str(&query_value(value));
    }
    out
}

fn encode(s: &str, keep: impl Fn(u8) -> bool) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') || keep(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreserved_characters_pass_through() {
        assert_eq!(segment("sb_AZaz09-._~"), "sb_AZaz09-._~");
    }

    #[test]
    fn segment_escapes_slashes_and_reserved() {
        assert_eq!(segment("a/b c?#"), "a%2Fb%20c%3F%23");
    }

    #[test]
    fn query_values_keep_slashes_and_escape_form_specials() {
        assert_eq!(query_value("/home/user/my file+1&x=y#z%"), "/home/user/my%20file%2B1%26x%3Dy%23z%25");
    }

    #[test]
    fn non_ascii_is_encoded_as_utf8_bytes() {
        assert_eq!(query_value("/tmp/é"), "/tmp/%C3%A9");
        assert_eq!(segment("日"), "%E6%97%A5");
    }

    #[test]
    fn query_joins_pairs() {
        assert_eq!(query(&[]), "");
        assert_eq!(query(&[("path", "/a b"), ("mode", "0644"), ("user", "root")]), "?path=/a%20b&mode=0644&user=root");
    }
}
