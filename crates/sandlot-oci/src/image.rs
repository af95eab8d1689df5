//! What a pulled or imported image is: its digests, platform, runtime config and layers. The daemon
//! stores [`Image`] as JSON, so every type here round-trips through serde.

use std::collections::BTreeMap;

use crate::{Digest, Platform};

/// The runtime settings of an image: the config blob's `config` object (OCI image-spec `config.md`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageConfig {
    /// `KEY=value` entries, in the image's order.
    pub env: Vec<String>,
    /// The working directory, when the image sets a non-empty one.
    pub working_dir: Option<String>,
    /// `name`, `uid`, `name:group` or `uid:gid` inside the image, when set.
    pub user: Option<String>,
    /// The entrypoint argv, when set.
    pub entrypoint: Option<Vec<String>>,
    /// The default command (arguments to the entrypoint when there is one), when set.
    pub cmd: Option<Vec<String>>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Exposed ports as written (`80/tcp`), sorted.
    pub exposed_ports: Vec<String>,
}

impl ImageConfig {
    /// About what these settings take stored: every string's bytes plus 16 for each (its framing, and
    /// so that a million empty labels are not free).
    pub fn stored_bytes(&self) -> usize {
        let one = |s: &String| s.len() + 16;
        let all = |v: &Vec<String>| v.iter().map(one).sum::<usize>();
        all(&self.env)
            + self.working_dir.as_ref().map_or(0, one)
            + self.user.as_ref().map_or(0, one)
            + self.entrypoint.as_ref().map_or(0, all)
            + self.cmd.as_ref().map_or(0, all)
            + self.labels.iter().map(|(k, v)| one(k) + one(v)).sum::<usize>()
            + all(&self.exposed_ports)
    }
}

/// One layer of an image.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Layer {
    /// The blob as stored (compressed, if the layer is).
    pub digest: Digest,
    /// The digest of the uncompressed tar, from the config's `rootfs.diff_ids`.
    pub diff_id: Digest,
    /// Size of the blob in bytes.
    pub size: u64,
    /// The layer's media type (tar, tar+gzip or tar+zstd, OCI or Docker name).
    pub media_type: String,
}

/// A pulled or imported image, all of whose blobs are in the [`crate::BlobStore`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Image {
    /// The digest of the manifest (the exact bytes received, or the OCI manifest written on import).
    pub manifest_digest: Digest,
    /// The digest of the config blob.
    pub config_digest: Digest,
    /// The platform the config names.
    pub platform: Platform,
    /// The runtime settings.
    pub config: ImageConfig,
    /// The layers, bottom first.
    pub layers: Vec<Layer>,
    /// The config's `created` timestamp (RFC 3339), when present.
    pub created: Option<String>,
}

impl Image {
    /// Every blob this image references: manifest, config and layers.
    pub fn blobs(&self) -> Vec<Digest> {
        let mut v = vec![self.manifest_digest.clone(), self.config_digest.clone()];
        v.extend(self.layers.iter().map(|l| l.digest.clone()));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_round_trips_through_json() {
        let d = Digest::of(b"x");
        let image = Image {
            manifest_digest: d.clone(),
            config_digest: Digest::of(b"c"),
            platform: Platform::host(),
            config: ImageConfig { env: vec!["PATH=/bin".into()], user: Some("1000".into()), ..Default::default() },
            layers: vec![Layer {
                digest: d.clone(),
                diff_id: d,
                size: 1,
                media_type: "application/vnd.oci.image.layer.v1.tar".into(),
            }],
            created: None,
        };
        let json = serde_json::to_string(&image).unwrap();
        assert_eq!(serde_json::from_str::<Image>(&json).unwrap(), image);
        assert_eq!(image.blobs().len(), 3);
    }
}
