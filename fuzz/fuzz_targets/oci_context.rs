//! Build contexts (sandlot-oci::context): a client-sent tar indexed, read and copied into a layer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandlot_oci::context::Context;
use std::io::Write;

fuzz_target!(|data: &[u8]| {
    let mut file = tempfile::tempfile_in("/tmp").expect("tempfile");
    file.write_all(data).expect("write");
    let Ok(ctx) = Context::open(file) else { return };
    let _ = ctx.read_file("Dockerfile", 1 << 20);
    let mut out = Vec::new();
    let _ = ctx.copy_layer(&[".".to_string()], "/app/", None, &mut out);
});
