//! Manifests, indexes and config blobs: parsing with size caps, media-type checks, platform choice, and
//! the OCI manifest written for imported images.
//!
//! A manifest's media type is read from its own `mediaType` field first and the HTTP `Content-Type` only
//! when that is absent (both are untrusted; either only chooses how to parse, and the parse must then
//! succeed). Schema 1 manifests are refused: they carry no content-addressed config.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::digest::truncate;
use crate::{Digest, Image, ImageConfig, Layer, Platform};

/// OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// OCI image index.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Docker v2 schema 2 manifest.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// Docker manifest list.
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// OCI image config.
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// OCI uncompressed layer.
pub const OCI_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
/// OCI gzip layer.
pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// OCI zstd layer.
pub const OCI_LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
/// The `Accept` header of a manifest request: all four manifest kinds we parse.
pub const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json";

/// The largest manifest or index accepted (the distribution spec's recommended limit).
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// The largest config blob accepted.
pub const MAX_CONFIG_BYTES: u64 = 8 << 20;
/// The largest layer blob accepted (compressed as stored).
pub const MAX_LAYER_BYTES: u64 = 64 << 30;
/// The most bytes an image's runtime settings may hold (env, labels, entrypoint, cmd, ports, user,
/// working directory, platform and `created`, each string counted with 16 bytes of overhead). The daemon stores
/// them and answers them in every image listing (a tenant's listing is at most
/// `--max-images-per-tenant` of them), so the 8 MiB a config blob may be is far too much; real images
/// hold a few KiB (Debian's: 100 bytes; CUDA's, with their long labels: ~4 KiB).
pub const MAX_RUN_CONFIG_BYTES: usize = 64 << 10;
/// The most layers an image may have (overlayfs stacks far fewer in practice).
pub const MAX_LAYERS: usize = 512;
/// The most entries an index may list.
pub const MAX_INDEX_ENTRIES: usize = 1024;

/// A manifest, index or config that cannot be used, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// A well-formed document of a kind sandlot does not handle (schema 1, foreign layers, ...).
    #[error("{0}")]
    Unsupported(String),
    /// A malformed or inconsistent document.
    #[error("{0}")]
    Invalid(String),
    /// An index with no entry for the wanted platform.
    #[error("{0}")]
    NoMatchingPlatform(String),
    /// A document or declared blob over its cap.
    #[error("{0}")]
    TooLarge(String),
}

/// How a layer blob is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Compression {
    /// A plain tar.
    None,
    /// gzip.
    Gzip,
    /// zstd.
    Zstd,
}

impl Compression {
    /// The compression of a layer with `media_type`; foreign, nondistributable and unknown layers are refused.
    pub fn of_layer(media_type: &str) -> Result<Compression, ManifestError> {
        match media_type {
            OCI_LAYER_TAR | "application/vnd.docker.image.rootfs.diff.tar" => Ok(Compression::None),
            OCI_LAYER_GZIP | "application/vnd.docker.image.rootfs.diff.tar.gzip" => Ok(Compression::Gzip),
            OCI_LAYER_ZSTD | "application/vnd.docker.image.rootfs.diff.tar.zstd" => Ok(Compression::Zstd),
            m if m.contains("foreign") || m.contains("nondistributable") => Err(ManifestError::Unsupported(format!(
                "layer media type {m:?} is a foreign (nondistributable) layer, which is not in the registry; \
                 such images (Windows base layers) cannot be used"
            ))),
            m => Err(ManifestError::Unsupported(format!(
                "layer media type {:?} is not a tar, tar+gzip or tar+zstd layer",
                truncate(m)
            ))),
        }
    }

    /// Sniffs the compression from a blob's first bytes (gzip `1f 8b`, zstd `28 b5 2f fd`).
    pub fn sniff(head: &[u8]) -> Compression {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }

    /// The OCI layer media type for this compression.
    pub fn oci_media_type(self) -> &'static str {
        match self {
            Compression::None => OCI_LAYER_TAR,
            Compression::Gzip => OCI_LAYER_GZIP,
            Compression::Zstd => OCI_LAYER_ZSTD,
        }
    }
}

/// A content descriptor: what a manifest or index says about a blob.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct Descriptor {
    /// The media type claimed for the blob.
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    /// Its digest.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
    /// The platform, in an index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<DescriptorPlatform>,
    /// Annotations (`org.opencontainers.image.ref.name` in an OCI layout's index).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An index entry's platform as written.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct DescriptorPlatform {
    /// `linux`.
    pub os: String,
    /// `amd64`.
    pub architecture: String,
    /// `v8`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl DescriptorPlatform {
    /// As a [`Platform`].
    pub fn to_platform(&self) -> Platform {
        Platform { os: self.os.clone(), architecture: self.architecture.clone(), variant: self.variant.clone() }
    }
}

/// A single-platform image manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The config blob.
    pub config: Descriptor,
    /// The layers, bottom first.
    pub layers: Vec<Descriptor>,
}

/// What a manifest request returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// One image.
    Manifest(Manifest),
    /// An index / manifest list: one manifest per platform.
    Index(Vec<Descriptor>),
}

#[derive(Deserialize)]
struct Raw {
    #[serde(rename = "schemaVersion")]
    schema_version: Option<u64>,
    #[serde(rename = "mediaType")]
    media_type: Option<String>,
    config: Option<Descriptor>,
    layers: Option<Vec<Descriptor>>,
    manifests: Option<Vec<Descriptor>>,
}

/// Parses a manifest or index of at most [`MAX_MANIFEST_BYTES`]; `content_type` is the HTTP header, if any.
pub fn parse(bytes: &[u8], content_type: Option<&str>) -> Result<Parsed, ManifestError> {
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge(format!(
            "manifest of {} bytes is over the {MAX_MANIFEST_BYTES}-byte limit",
            bytes.len()
        )));
    }
    let header = content_type.map(|c| c.split(';').next().unwrap_or("").trim());
    if header.is_some_and(|h| h.contains("manifest.v1+") && h.contains("docker")) {
        return Err(schema1());
    }
    let raw: Raw = serde_json::from_slice(bytes)
        .map_err(|e| ManifestError::Invalid(format!("manifest is not valid JSON of the expected shape: {e}")))?;
    if raw.schema_version == Some(1) {
        return Err(schema1());
    }
    if raw.schema_version != Some(2) {
        return Err(ManifestError::Invalid(format!("manifest has schemaVersion {:?}; expected 2", raw.schema_version)));
    }
    let kind = raw.media_type.as_deref().or(header).unwrap_or("");
    let kind = match kind {
        OCI_INDEX | DOCKER_LIST => "index",
        OCI_MANIFEST | DOCKER_MANIFEST => "manifest",
        // No media type anywhere (allowed for OCI): decide by shape.
        "" | "application/json" | "application/octet-stream" if raw.manifests.is_some() => "index",
        "" | "application/json" | "application/octet-stream" if raw.layers.is_some() => "manifest",
        other => {
            return Err(ManifestError::Unsupported(format!(
                "manifest media type {:?} is not an OCI or Docker v2 manifest or index",
                truncate(other)
            )))
        }
    };
    if kind == "index" {
        let entries = raw.manifests.ok_or_else(|| ManifestError::Invalid("index has no \"manifests\" list".into()))?;
        if entries.len() > MAX_INDEX_ENTRIES {
            return Err(ManifestError::TooLarge(format!(
                "index lists {} manifests, over the limit of {MAX_INDEX_ENTRIES}",
                entries.len()
            )));
        }
        return Ok(Parsed::Index(entries));
    }
    let config = raw.config.ok_or_else(|| ManifestError::Invalid("manifest has no \"config\"".into()))?;
    let layers = raw.layers.ok_or_else(|| ManifestError::Invalid("manifest has no \"layers\"".into()))?;
    if layers.len() > MAX_LAYERS {
        return Err(ManifestError::TooLarge(format!(
            "image has {} layers, over the limit of {MAX_LAYERS}",
            layers.len()
        )));
    }
    if config.size > MAX_CONFIG_BYTES {
        return Err(ManifestError::TooLarge(format!(
            "config blob of {} bytes is over the {MAX_CONFIG_BYTES}-byte limit",
            config.size
        )));
    }
    for layer in &layers {
        Compression::of_layer(&layer.media_type)?;
        if layer.size > MAX_LAYER_BYTES {
            return Err(ManifestError::TooLarge(format!(
                "layer {} of {} bytes is over the {MAX_LAYER_BYTES}-byte limit",
                layer.digest, layer.size
            )));
        }
    }
    Ok(Parsed::Manifest(Manifest { config, layers }))
}

fn schema1() -> ManifestError {
    ManifestError::Unsupported(
        "this is a Docker schema 1 manifest, which sandlot does not support; push the image again with a current \
         docker or skopeo (schema 2 / OCI)"
            .into(),
    )
}

/// Picks the manifest for `wanted` from an index: an exact variant match first, else the first entry that
/// satisfies it. Attestation entries (`unknown/unknown`) never match.
pub fn choose<'a>(entries: &'a [Descriptor], wanted: &Platform) -> Result<&'a Descriptor, ManifestError> {
    let candidates: Vec<(&Descriptor, Platform)> = entries
        .iter()
        .filter(|e| matches!(e.media_type.as_str(), OCI_MANIFEST | DOCKER_MANIFEST | ""))
        .filter_map(|e| e.platform.as_ref().map(|p| (e, p.to_platform())))
        .collect();
    let exact = candidates.iter().find(|(_, p)| p == wanted);
    let any = candidates.iter().find(|(_, p)| p.satisfies(wanted));
    match exact.or(any) {
        Some((e, _)) => Ok(e),
        None => {
            let have: Vec<String> = candidates.iter().map(|(_, p)| p.to_string()).collect();
            Err(ManifestError::NoMatchingPlatform(format!(
                "the image has no {wanted} variant (it has: {}); pass another --platform",
                if have.is_empty() { "none".to_owned() } else { have.join(", ") }
            )))
        }
    }
}

#[derive(Deserialize, Default)]
struct RawConfigFile {
    architecture: Option<String>,
    os: Option<String>,
    variant: Option<String>,
    created: Option<String>,
    #[serde(default)]
    config: Option<RawConfig>,
    rootfs: Option<RawRootfs>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct RawConfig {
    env: Option<Vec<String>>,
    working_dir: Option<String>,
    user: Option<String>,
    entrypoint: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
    labels: Option<BTreeMap<String, String>>,
    exposed_ports: Option<BTreeMap<String, serde_json::Value>>,
}

#[derive(Deserialize)]
struct RawRootfs {
    #[serde(rename = "type")]
    kind: String,
    diff_ids: Vec<Digest>,
}

/// What a config blob says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigFile {
    /// The runtime settings.
    pub config: ImageConfig,
    /// The platform (linux/amd64 when the config names none).
    pub platform: Platform,
    /// `rootfs.diff_ids`, bottom first.
    pub diff_ids: Vec<Digest>,
    /// `created`.
    pub created: Option<String>,
}

/// Parses a config blob of at most [`MAX_CONFIG_BYTES`].
pub fn parse_config(bytes: &[u8]) -> Result<ConfigFile, ManifestError> {
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ManifestError::TooLarge(format!(
            "config blob of {} bytes is over the {MAX_CONFIG_BYTES}-byte limit",
            bytes.len()
        )));
    }
    let raw: RawConfigFile = serde_json::from_slice(bytes)
        .map_err(|e| ManifestError::Invalid(format!("image config is not valid JSON of the expected shape: {e}")))?;
    let rootfs = raw.rootfs.ok_or_else(|| ManifestError::Invalid("image config has no rootfs".into()))?;
    if rootfs.kind != "layers" {
        return Err(ManifestError::Invalid(format!(
            "image config rootfs type is {:?}; expected \"layers\"",
            truncate(&rootfs.kind)
        )));
    }
    let c = raw.config.unwrap_or_default();
    let non_empty = |s: Option<String>| s.filter(|s| !s.is_empty());
    let config = ImageConfig {
        env: c.env.unwrap_or_default(),
        working_dir: non_empty(c.working_dir),
        user: non_empty(c.user),
        entrypoint: c.entrypoint,
        cmd: c.cmd,
        labels: c.labels.unwrap_or_default(),
        exposed_ports: c.exposed_ports.unwrap_or_default().into_keys().collect(),
    };
    let platform = Platform {
        os: raw.os.unwrap_or_else(|| "linux".into()),
        architecture: raw.architecture.unwrap_or_else(|| "amd64".into()),
        variant: non_empty(raw.variant),
    };
    Ok(ConfigFile { config, platform, diff_ids: rootfs.diff_ids, created: raw.created })
}

/// Puts a manifest and its config together into an [`Image`], checking one diff_id per layer.
pub fn image(manifest_digest: Digest, manifest: &Manifest, config: ConfigFile) -> Result<Image, ManifestError> {
    // Every path that makes an image comes here (imports too, whose manifests are not parsed): one
    // limit on layers, each of which costs a subvolume to unpack.
    if manifest.layers.len() > MAX_LAYERS {
        return Err(ManifestError::Invalid(format!(
            "image has {} layers, over the limit of {MAX_LAYERS}",
            manifest.layers.len()
        )));
    }
    let p = &config.platform;
    let settings = config.config.stored_bytes()
        + [Some(&p.os), Some(&p.architecture), p.variant.as_ref(), config.created.as_ref()]
            .into_iter()
            .flatten()
            .map(|s| s.len() + 16)
            .sum::<usize>();
    if settings > MAX_RUN_CONFIG_BYTES {
        return Err(ManifestError::TooLarge(format!(
            "the image's runtime settings (env, labels, entrypoint, cmd, exposed ports) take {settings} bytes, \
             over the limit of {MAX_RUN_CONFIG_BYTES}: keep large data in the image's files, not its config"
        )));
    }
    if config.diff_ids.len() != manifest.layers.len() {
        return Err(ManifestError::Invalid(format!(
            "the manifest lists {} layers but the config's rootfs.diff_ids has {}; the image is inconsistent",
            manifest.layers.len(),
            config.diff_ids.len()
        )));
    }
    let layers = manifest
        .layers
        .iter()
        .zip(config.diff_ids)
        .map(|(d, diff_id)| Layer { digest: d.digest.clone(), diff_id, size: d.size, media_type: d.media_type.clone() })
        .collect();
    Ok(Image {
        manifest_digest,
        config_digest: manifest.config.digest.clone(),
        platform: config.platform,
        config: config.config,
        layers,
        created: config.created,
    })
}

/// The OCI manifest bytes for a config and layers (written for imported and built images).
pub fn write_oci_manifest(config: &Descriptor, layers: &[Descriptor]) -> Vec<u8> {
    let value = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": config,
        "layers": layers,
    });
    serde_json::to_vec(&value).expect("a JSON value always serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Digest {
        Digest::of(s.as_bytes())
    }

    fn desc(media_type: &str, digest: &Digest, size: u64) -> serde_json::Value {
        serde_json::json!({"mediaType": media_type, "digest": digest, "size": size})
    }

    fn manifest_json(media_type: &str, layer_type: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": media_type,
            "config": desc(OCI_CONFIG, &d("c"), 10),
            "layers": [desc(layer_type, &d("l"), 20)],
        }))
        .unwrap()
    }

    #[test]
    fn oci_and_docker_manifests_parse() {
        for (mt, lt) in
            [(OCI_MANIFEST, OCI_LAYER_GZIP), (DOCKER_MANIFEST, "application/vnd.docker.image.rootfs.diff.tar.gzip")]
        {
            let Parsed::Manifest(m) = parse(&manifest_json(mt, lt), None).unwrap() else { panic!("not a manifest") };
            assert_eq!(m.config.digest, d("c"));
            assert_eq!(m.layers.len(), 1);
            assert_eq!(m.layers[0].size, 20);
        }
    }

    #[test]
    fn schema1_foreign_layers_and_unknown_types_are_unsupported() {
        let s1 = br#"{"schemaVersion":1,"name":"x","tag":"y","fsLayers":[]}"#;
        let err = parse(s1, Some("application/vnd.docker.distribution.manifest.v1+prettyjws")).unwrap_err();
        assert!(matches!(&err, ManifestError::Unsupported(m) if m.contains("schema 1")), "{err}");
        assert!(matches!(parse(s1, None).unwrap_err(), ManifestError::Unsupported(_)));
        let foreign = manifest_json(DOCKER_MANIFEST, "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip");
        assert!(matches!(parse(&foreign, None).unwrap_err(), ManifestError::Unsupported(m) if m.contains("foreign")));
        let odd = manifest_json(OCI_MANIFEST, "application/x-something");
        assert!(matches!(parse(&odd, None).unwrap_err(), ManifestError::Unsupported(_)));
        let helm = manifest_json("application/vnd.cncf.helm.chart", OCI_LAYER_TAR);
        assert!(matches!(parse(&helm, None).unwrap_err(), ManifestError::Unsupported(_)));
        assert!(matches!(parse(b"{not json", None).unwrap_err(), ManifestError::Invalid(_)));
    }

    #[test]
    fn size_caps_refuse_before_parsing() {
        let big = vec![b' '; MAX_MANIFEST_BYTES as usize + 1];
        assert!(matches!(parse(&big, None).unwrap_err(), ManifestError::TooLarge(_)));
        let big = vec![b' '; MAX_CONFIG_BYTES as usize + 1];
        assert!(matches!(parse_config(&big).unwrap_err(), ManifestError::TooLarge(_)));
        let huge_layer = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "config": desc(OCI_CONFIG, &d("c"), 10),
            "layers": [desc(OCI_LAYER_TAR, &d("l"), MAX_LAYER_BYTES + 1)],
        }))
        .unwrap();
        assert!(matches!(parse(&huge_layer, None).unwrap_err(), ManifestError::TooLarge(_)));
        let huge_config = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "config": desc(OCI_CONFIG, &d("c"), MAX_CONFIG_BYTES + 1), "layers": [],
        }))
        .unwrap();
        assert!(matches!(parse(&huge_config, None).unwrap_err(), ManifestError::TooLarge(_)));
    }

    fn index() -> Vec<Descriptor> {
        let entry = |arch: &str, variant: Option<&str>, tag: &str| {
            let mut v = desc(OCI_MANIFEST, &d(tag), 1);
            v["platform"] = serde_json::json!({"os": "linux", "architecture": arch, "variant": variant});
            v
        };
        let mut att = desc(OCI_MANIFEST, &d("att"), 1);
        att["platform"] = serde_json::json!({"os": "unknown", "architecture": "unknown"});
        let bytes = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_INDEX,
            "manifests": [att, entry("arm", Some("v7"), "armv7"), entry("amd64", None, "amd64"), entry("arm64", Some("v8"), "arm64")],
        }))
        .unwrap();
        match parse(&bytes, None).unwrap() {
            Parsed::Index(e) => e,
            Parsed::Manifest(_) => panic!("index parsed as a manifest"),
        }
    }

    #[test]
    fn index_platform_choice() {
        let entries = index();
        let p = |s| Platform::parse(s).unwrap();
        assert_eq!(choose(&entries, &p("linux/amd64")).unwrap().digest, d("amd64"));
        assert_eq!(choose(&entries, &p("linux/arm64")).unwrap().digest, d("arm64"));
        assert_eq!(choose(&entries, &p("linux/arm64/v8")).unwrap().digest, d("arm64"));
        assert_eq!(choose(&entries, &p("linux/arm")).unwrap().digest, d("armv7"));
        let err = choose(&entries, &p("linux/s390x")).unwrap_err();
        assert!(
            matches!(&err, ManifestError::NoMatchingPlatform(m) if m.contains("linux/amd64") && m.contains("linux/s390x")),
            "{err}"
        );
    }

    #[test]
    fn config_fields_and_diff_id_count_are_checked() {
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "arm64", "os": "linux", "created": "2024-01-01T00:00:00Z",
            "config": {"Env": ["PATH=/usr/bin"], "WorkingDir": "", "User": "app", "Entrypoint": null,
                       "Cmd": ["python3"], "Labels": {"a": "b"}, "ExposedPorts": {"8080/tcp": {}, "53/udp": {}}},
            "rootfs": {"type": "layers", "diff_ids": [d("t")]},
        }))
        .unwrap();
        let c = parse_config(&config).unwrap();
        assert_eq!(c.platform, Platform::parse("linux/arm64").unwrap());
        assert_eq!(c.config.working_dir, None);
        assert_eq!(c.config.user.as_deref(), Some("app"));
        assert_eq!(c.config.entrypoint, None);
        assert_eq!(c.config.cmd, Some(vec!["python3".to_owned()]));
        assert_eq!(c.config.exposed_ports, vec!["53/udp".to_owned(), "8080/tcp".to_owned()]);
        let Parsed::Manifest(m) = parse(&manifest_json(OCI_MANIFEST, OCI_LAYER_GZIP), None).unwrap() else { panic!() };
        let image = image(d("m"), &m, c.clone()).unwrap();
        assert_eq!(image.layers[0].diff_id, d("t"));
        let mut two = c;
        two.diff_ids.push(d("u"));
        assert!(
            matches!(super::image(d("m"), &m, two).unwrap_err(), ManifestError::Invalid(e) if e.contains("diff_ids"))
        );
    }

    #[test]
    fn runtime_settings_past_the_cap_are_refused_whatever_field_holds_them() {
        let Parsed::Manifest(m) = parse(&manifest_json(OCI_MANIFEST, OCI_LAYER_GZIP), None).unwrap() else { panic!() };
        let config = |c: serde_json::Value| {
            let mut raw = serde_json::json!({"rootfs": {"type": "layers", "diff_ids": [d("t")]}});
            raw.as_object_mut().unwrap().extend(c.as_object().unwrap().clone());
            parse_config(&serde_json::to_vec(&raw).unwrap()).unwrap()
        };
        let big = "x".repeat(MAX_RUN_CONFIG_BYTES);
        // A few KiB of labels, as real images have, pass.
        let fine = config(
            serde_json::json!({"config": {"Labels": {"org.opencontainers.image.description": "x".repeat(4096)}}}),
        );
        image(d("m"), &m, fine).unwrap();
        // Many small labels cost their overhead: 20,000 empty ones are over the cap too.
        let many: serde_json::Map<String, serde_json::Value> =
            (0..20_000).map(|i| (format!("l{i}"), serde_json::Value::String(String::new()))).collect();
        for c in [
            serde_json::json!({"config": {"Labels": {"a": big}}}),
            serde_json::json!({"config": {"Labels": many}}),
            serde_json::json!({"config": {"Env": [format!("A={big}")]}}),
            serde_json::json!({"config": {"Cmd": [big]}}),
            serde_json::json!({"architecture": big}),
            serde_json::json!({"created": big}),
        ] {
            let err = image(d("m"), &m, config(c)).unwrap_err();
            assert!(matches!(&err, ManifestError::TooLarge(e) if e.contains("runtime settings")), "{err}");
        }
    }

    #[test]
    fn written_manifest_parses_back() {
        let cfg = Descriptor {
            media_type: OCI_CONFIG.into(),
            digest: d("c"),
            size: 3,
            platform: None,
            annotations: Default::default(),
        };
        let layer = Descriptor {
            media_type: OCI_LAYER_TAR.into(),
            digest: d("l"),
            size: 4,
            platform: None,
            annotations: Default::default(),
        };
        let bytes = write_oci_manifest(&cfg, std::slice::from_ref(&layer));
        assert_eq!(parse(&bytes, None).unwrap(), Parsed::Manifest(Manifest { config: cfg, layers: vec![layer] }));
    }
}
