//! Images: pulling from a registry, importing an archive, listing, inspecting and deleting.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ErrorDetail;

/// Credentials for one pull. They are used for that pull only: never stored, logged or returned.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RegistryAuth {
    /// User name.
    pub username: String,
    /// Password or access token.
    pub password: String,
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryAuth").field("username", &self.username).field("password", &"<redacted>").finish()
    }
}

/// Body of `POST /v1/images/pull`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PullImage {
    /// What to pull: `python:3.12-slim`, `ghcr.io/org/app:1`, `registry:5000/x@sha256:…`.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Credentials for this pull (else the server's configured ones for that registry, else none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<RegistryAuth>,
    /// `os/arch[/variant]` to pick from a multi-platform image (default: the server's, `linux/amd64`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// Name to store it under (default: the reference as given, normalised).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Publish it to every tenant (admin keys only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub public: bool,
}

/// What an image's config says about how to run it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ImageRunConfig {
    /// `NAME=value` pairs every command starts with (a sandbox's and a command's own env win).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Directory commands start in unless they say otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// The image's user (name or uid inside the image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// What `sandlot run --image` runs before `cmd` (or before the given command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// The default command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Ports it says it listens on (`8080/tcp`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exposed_ports: Vec<String>,
}

/// Who may use an image.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ImageOwner {
    /// The caller's tenant only.
    Tenant,
    /// Every tenant (published by an admin).
    Public,
    /// Built into the server (`host`).
    Builtin,
}

/// An image as `GET /v1/images` lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ImageInfo {
    /// The name sandboxes use (`"image"` of a create).
    pub name: String,
    /// Fully qualified reference it was pulled from (`None` for imports and `host`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Manifest digest (`None` for `host`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Config digest: the image's identity (the same for one image under several names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `os/arch[/variant]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// Who may use it.
    pub owner: ImageOwner,
    /// Bytes it is charged: its blobs as stored (compressed layers and config) plus the files its
    /// layers unpacked to when it was stored (0 for layers another image had unpacked already).
    pub size_bytes: u64,
    /// Its layers, bottom first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<ImageLayer>,
    /// How it runs.
    #[serde(default)]
    pub config: ImageRunConfig,
    /// When it was stored (Unix ms; 0 for `host`).
    pub created_at_ms: i64,
}

/// One layer of an image.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ImageLayer {
    /// Digest of the blob.
    pub digest: String,
    /// Bytes of the blob.
    pub size_bytes: u64,
}

/// Answer of `GET /v1/images`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ImageList {
    /// The caller's images, the public ones and `host`, by name.
    pub images: Vec<ImageInfo>,
}

/// One line of the NDJSON stream of a pull (or import): progress, then `done` or `error`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PullEvent {
    /// The manifest was found: these layers will be fetched (blob digest, bytes), bottom first.
    Resolved {
        /// Manifest digest.
        digest: String,
        /// Platform chosen.
        platform: String,
        /// Layers: digest and size.
        layers: Vec<ImageLayer>,
    },
    /// Bytes of a layer downloaded so far.
    Download {
        /// Blob digest.
        digest: String,
        /// Bytes so far.
        done: u64,
        /// Bytes in all.
        total: u64,
    },
    /// A layer is in the store (`cached`: it already was).
    Downloaded {
        /// Blob digest.
        digest: String,
        /// Whether it was already stored.
        cached: bool,
    },
    /// A layer is being unpacked.
    Unpacking {
        /// Position of the layer, bottom first.
        index: usize,
    },
    /// A layer is unpacked (`cached`: its tree already existed, shared with another image).
    Unpacked {
        /// Position of the layer, bottom first.
        index: usize,
        /// Whether its tree already existed.
        cached: bool,
        /// Entries the unpacker skipped on purpose (device nodes, host-privileged xattrs), with why.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        dropped: Vec<String>,
    },
    /// The image is stored; nothing follows.
    Done {
        /// The image.
        image: Box<ImageInfo>,
    },
    /// The pull failed; nothing follows and nothing of it was stored as an image.
    Error {
        /// What went wrong and what to do.
        error: ErrorDetail,
    },
}
