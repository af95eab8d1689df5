//! Dockerfile parsing and instruction resolution with variable expansion (sandlot-oci::dockerfile).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandlot_oci::dockerfile::{parse, Vars};
use std::collections::BTreeMap;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(raws) = parse(text) else { return };
    let args = BTreeMap::from([("V".to_string(), "1".to_string())]);
    let mut vars = Vars::new(args);
    for raw in &raws {
        let _ = vars.resolve(raw);
    }
    let _ = vars.run_args();
    let _ = vars.unused_build_args();
});
