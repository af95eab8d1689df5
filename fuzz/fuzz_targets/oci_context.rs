//! Build contexts (sandlot-oci::context): a client-sent tar indexed, read and copied into a layer,
//! its `.dockerignore` applied, a wildcard copied; and the same bytes as a stage's layer for
//! `COPY --from`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandlot_oci::context::{Context, CopyOptions};
use std::io::Write;

fuzz_target!(|data: &[u8]| {
    let spool = tempfile::tempfile_in("/tmp").expect("tempfile");
    let sources = ["/".to_string(), "a*/b?".to_string()];
    if let Ok((stage, resolved)) = Context::from_layers(|_| Ok(data), 1, &sources, spool, 1 << 20) {
        let _ = stage.copy_layer(&resolved, "/out/", CopyOptions::default(), std::io::sink());
    }
    let mut file = tempfile::tempfile_in("/tmp").expect("tempfile");
    file.write_all(data).expect("write");
    let Ok(mut ctx) = Context::open(file) else { return };
    let _ = ctx.read_file("Dockerfile", 1 << 20);
    let _ = ctx.apply_dockerignore();
    let mut out = Vec::new();
    let _ = ctx.copy_layer(&[".".to_string()], "/app/", CopyOptions::default(), &mut out);
    let opts = CopyOptions { make_dest: true, chmod: Some(0o755), ..Default::default() };
    let _ = ctx.copy_layer(&["*".to_string(), "[a-".to_string()], "/w/", opts, std::io::sink());
});
