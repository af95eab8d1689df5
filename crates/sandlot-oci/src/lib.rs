//! OCI images for sandlot: the formats, a registry client, a content-addressed blob store and import.
//!
//! Everything this crate reads comes from outside: a registry's answers (manifests, configs, tokens,
//! layer blobs) and archives a user uploads. So every size is capped before anything is allocated,
//! every blob is hashed while it is copied and appears in the store only when its digest matches, and no
//! media type or length header is trusted beyond choosing how to parse. The crate writes only beneath
//! the [`BlobStore`] directory it is given; it never unpacks a layer (that is `sandlot_linux::unpack`'s
//! job, beneath a directory fd).
//!
//! - [`digest`]: `sha256:<hex>` digests, the only kind accepted.
//! - [`reference`](mod@reference): image references with docker's normalisation (`python:3.12` is
//!   `docker.io/library/python:3.12`).
//! - [`platform`]: `linux/amd64`-style platforms and how an index entry is matched.
//! - [`image`]: what a pulled or imported image is ([`Image`]), stored as JSON by the daemon.
//! - [`manifest`]: parsing manifests, indexes and config blobs (size caps, media types, diff_ids).
//! - [`dockerfile`]: the Dockerfile subset `sandlot image build` takes.
//! - [`context`]: a build context (a tar) and the layers `COPY`/`ADD` make from it.
//! - [`layer_dirs`]: which paths of an image's layers are directories (where `COPY` puts a file).
//! - [`store`]: the blob store ([`BlobStore`]).
//! - [`archive`]: `docker save` tars, OCI layouts and plain rootfs tars ([`import`]).
//! - `testing` (feature `testing`): a real `docker-registry` on loopback and test images.
//! - [`registry`]: the distribution-spec client with the token and basic auth flows ([`Registry`]).
//!
//! All I/O is blocking: the daemon calls into this crate from `spawn_blocking`.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod archive;
pub mod context;
pub mod digest;
pub mod dockerfile;
pub mod dockerignore;
pub mod image;
pub mod layer_dirs;
pub mod manifest;
pub mod platform;
pub mod reference;
pub mod registry;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use archive::{import, import_dir, ImportError, Imported};

/// `path`'s components without empty and `.` ones, each `..` taking away the one before it (never
/// climbing above the root): a path resolved by its text alone, as a Dockerfile's and an image's
/// paths are (no link followed).
pub(crate) fn lexical_components(path: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    parts
}
pub use digest::Digest;
pub use image::{Image, ImageConfig, Layer};
pub use platform::Platform;
pub use reference::Reference;
pub use registry::{Credentials, PullError, PullErrorKind, PullEvent, Registry, RegistryOptions};
pub use store::{BlobStore, Spooled, StoreError};

/// A string or document that is not a valid digest, reference, platform, manifest or config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FormatError(pub String);

impl FormatError {
    pub(crate) fn new(msg: impl Into<String>) -> FormatError {
        FormatError(msg.into())
    }
}
