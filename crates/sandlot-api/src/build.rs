//! Image builds (`POST /v1/images/build`) and publishing a snapshot as an image
//! (`POST /v1/snapshots/{id}/image`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{ErrorDetail, ImageInfo};

/// The query of `POST /v1/images/build`; the body is the build context as a tar.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BuildImage {
    /// Name to store the image under.
    pub name: String,
    /// Path of the Dockerfile in the context (default `Dockerfile`).
    pub file: Option<String>,
    /// Run every step again, ignoring the build cache.
    pub no_cache: bool,
    /// Hosts (names, `*.suffix` wildcards, CIDRs) `RUN` steps may reach; none by default.
    pub allow: Vec<String>,
    /// `--build-arg` values.
    pub build_args: BTreeMap<String, String>,
    /// Memory of each `RUN` step's build sandbox, MiB (server default otherwise).
    pub memory_mb: Option<u64>,
    /// CPU of each `RUN` step's build sandbox, cores.
    pub cpu: Option<f64>,
    /// Wall-clock limit of each `RUN` step, seconds.
    pub timeout_s: Option<u64>,
    /// Store the image for every tenant (admin keys only), as `pull`/`import` with `public` do.
    pub public: bool,
}

/// One line of the NDJSON stream of a build.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BuildEvent {
    /// Instruction `index` (0-based, in the Dockerfile's order) starts; `cached` when its result
    /// came from the build cache (a `RUN` that was not run again) or needed no work.
    Step {
        /// Position among the instructions.
        index: usize,
        /// Its 1-based line in the Dockerfile.
        line: usize,
        /// Its text.
        instruction: String,
        /// Whether the result was cached.
        cached: bool,
    },
    /// Output of a `RUN` step as it comes.
    Output {
        /// `stdout` or `stderr`.
        stream: String,
        /// Text (UTF-8, invalid bytes replaced).
        data: String,
    },
    /// A layer of the image being made ready to run a step.
    Unpacking {
        /// Position of the layer, bottom first.
        index: usize,
    },
    /// A layer is unpacked (`cached`: its tree already existed).
    Unpacked {
        /// Position of the layer, bottom first.
        index: usize,
        /// Whether its tree already existed.
        cached: bool,
    },
    /// The image is stored; nothing follows.
    Done {
        /// The image.
        image: Box<ImageInfo>,
    },
    /// The build failed; nothing follows and no image was stored.
    Error {
        /// What went wrong and what to do.
        error: ErrorDetail,
        /// The Dockerfile line of the failed step, when a step failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<usize>,
        /// The last output of a failed `RUN` (about 2 KiB).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tail: Option<String>,
    },
}

/// `POST /v1/snapshots/{id}/image`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SnapshotImage {
    /// Name to store the image under.
    pub name: String,
}
