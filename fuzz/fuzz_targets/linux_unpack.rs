//! Image layer unpack (sandlot-linux::unpack): decompression sniffing, then a layer tar applied beneath a
//! fresh root directory under /tmp (one per input, removed afterwards), as the unit tests do. The
//! property checked on top of "no panic": nothing appears next to the root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandlot_linux::tree;
use sandlot_linux::unpack::{apply_layer, decompress, UnpackLimits};
use std::io::Read;
use std::os::fd::AsFd;

fuzz_target!(|data: &[u8]| {
    let base = tempfile::Builder::new().prefix("sandlot-fuzz-unpack-").tempdir_in("/tmp").expect("tempdir");
    let root = base.path().join("root");
    std::fs::create_dir(&root).expect("root");
    let limits = UnpackLimits {
        max_entries: 1000,
        max_bytes: 8 << 20,
        max_depth: 32,
        max_path_bytes: 4096,
        max_xattr_bytes: 64 << 10,
        // No deadline: libFuzzer's -timeout bounds a slow input.
        deadline: None,
    };
    // Compressed input (gzip/zstd) is what a registry hands over; decompress as the store does, bounded.
    let mut plain = Vec::new();
    if let Ok(r) = decompress(data) {
        let _ = r.take(8 << 20).read_to_end(&mut plain);
    }
    for tar in [data, plain.as_slice()] {
        let fd = tree::open_root(&root).expect("open root");
        let _ = apply_layer(fd.as_fd(), tar, &limits);
    }
    let beside: Vec<_> = std::fs::read_dir(base.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(beside, vec![std::ffi::OsString::from("root")], "a layer wrote next to its root");
    tree::remove_tree(base.path()).expect("remove the scratch root");
});
