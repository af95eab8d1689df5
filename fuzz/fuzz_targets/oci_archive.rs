//! Image archives (sandlot-oci::archive): `docker save`, OCI layouts and rootfs tars imported into a
//! blob store in a fresh directory under /tmp (removed afterwards).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandlot_oci::BlobStore;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::Builder::new().prefix("sandlot-fuzz-archive-").tempdir_in("/tmp").expect("tempdir");
    let store = BlobStore::open(dir.path()).expect("blob store");
    let _ = sandlot_oci::import(data, &store, 16 << 20);
});
