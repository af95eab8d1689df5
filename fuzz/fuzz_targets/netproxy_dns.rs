//! DNS queries from a sandbox (sandlot-netproxy::dns). Properties: an answer to a parsed query echoes
//! its id and question, and is itself refused as a query (it is a response).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandlot_netproxy::dns::{answer, format_error, parse_query, Rcode};
use std::net::IpAddr;

fuzz_target!(|data: &[u8]| {
    let _ = format_error(data);
    let Some(q) = parse_query(data) else { return };
    assert!(!q.name.is_empty() && q.name.len() <= 253);
    let addrs: [IpAddr; 2] = ["192.0.2.1".parse().unwrap(), "2001:db8::1".parse().unwrap()];
    let out = answer(&q, Rcode::NoError, &addrs);
    assert_eq!(&out[..2], &data[..2], "the id is echoed");
    assert!(parse_query(&out).is_none(), "an answer is not a query");
});
