//! Image references (sandlot-oci::reference). Property: a parsed reference prints to a string that
//! parses to the same reference.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandlot_oci::Reference;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let Ok(r) = Reference::parse(s) else { return };
    let _ = (r.api_host(), r.familiar(), r.api_reference());
    let again = Reference::parse(&r.to_string()).expect("a printed reference parses");
    assert_eq!(again, r);
});
