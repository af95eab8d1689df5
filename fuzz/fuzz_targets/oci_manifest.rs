//! OCI/Docker manifests, indexes and config blobs (sandlot-oci::manifest), as a registry or an archive
//! hands them over.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandlot_oci::manifest::{self, Compression, Parsed};
use sandlot_oci::Platform;

const TYPES: [Option<&str>; 5] = [
    None,
    Some("application/vnd.oci.image.manifest.v1+json"),
    Some("application/vnd.oci.image.index.v1+json"),
    Some("application/vnd.docker.distribution.manifest.v2+json"),
    Some("application/vnd.docker.distribution.manifest.list.v2+json"),
];

fuzz_target!(|data: &[u8]| {
    let _ = Compression::sniff(data);
    let ty = TYPES[data.first().map_or(0, |b| *b as usize % TYPES.len())];
    match manifest::parse(data, ty) {
        Ok(Parsed::Index(entries)) => {
            let _ = manifest::choose(&entries, &Platform::host());
        }
        Ok(Parsed::Manifest(m)) => {
            for l in &m.layers {
                let _ = Compression::of_layer(&l.media_type);
            }
        }
        Err(_) => {}
    }
    let _ = manifest::parse_config(data);
});
