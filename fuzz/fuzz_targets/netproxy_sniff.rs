//! The SNI and Host sniffers (sandlot-netproxy::sniff) over a connection's first bytes. Property: a sniffed
//! name is never empty.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandlot_netproxy::sniff::{http_host, tls_sni, Sniff, MAX_SNIFF};

fuzz_target!(|data: &[u8]| {
    let data = &data[..data.len().min(MAX_SNIFF + 64)];
    for s in [tls_sni(data), http_host(data)] {
        if let Sniff::Name(n) = s {
            assert!(!n.is_empty(), "an empty name was sniffed");
        }
    }
});
