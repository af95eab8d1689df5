//! The house's layering, checked: which crate may depend on which (the table in
//! docs/ARCHITECTURE.md), that the server's handlers reach nothing below the control layer, and that
//! only the host crates may hold `unsafe`.
//! A new edge is a decision: add it here and to ARCHITECTURE.md together.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Each crate's `sandlot-*` dependencies (normal ones; tests may use more, as the fake driver).
const ALLOWED: &[(&str, &[&str])] = &[
    ("sandlot-api", &[]),
    ("sandlot-protocol", &[]),
    ("sandlot-oci", &[]),
    ("sandlot-client", &["sandlot-api"]),
    ("sandlot-store", &["sandlot-api"]),
    ("sandlot-netproxy", &["sandlot-api"]),
    ("sandlot-supervisor", &["sandlot-protocol"]),
    ("sandlot-linux", &["sandlot-protocol"]),
    ("sandlot-engine", &["sandlot-api", "sandlot-protocol", "sandlot-netproxy"]),
    ("sandlot-driver-linux", &["sandlot-engine", "sandlot-linux"]),
    ("sandlot-control", &["sandlot-api", "sandlot-engine", "sandlot-store", "sandlot-oci"]),
    (
        "sandlot",
        &[
            "sandlot-api",
            "sandlot-engine",
            "sandlot-driver-linux",
            "sandlot-control",
            "sandlot-linux",
            "sandlot-supervisor",
            "sandlot-store",
            "sandlot-client",
            "sandlot-netproxy",
            "sandlot-oci",
        ],
    ),
];

/// The crates that hold `unsafe` (each block under the workspace's `undocumented_unsafe_blocks` lint);
/// every other crate forbids it at its root.
const UNSAFE_ALLOWED: &[&str] = &["sandlot-linux", "sandlot-supervisor"];

/// Crates below the control layer, as a handler would name them in Rust.
const BELOW_CONTROL: &[&str] = &[
    "sandlot_engine",
    "sandlot_store",
    "sandlot_netproxy",
    "sandlot_linux",
    "sandlot_driver_linux",
    "sandlot_oci",
    "sandlot_protocol",
];

/// The server's files that build what the handlers run on (start-up, the listeners' TLS, the
/// OpenAPI test server over the fake driver); every other file there is a surface.
const WIRING: &[&str] = &["mod.rs", "openapi.rs", "tls.rs"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `sandlot-*` names in a manifest's `[dependencies]` section.
fn sandlot_dependencies(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_dependencies = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
            continue;
        }
        if in_dependencies && line.starts_with("sandlot-") {
            let name = line.split(|c: char| c == '.' || c == '=' || c.is_whitespace()).next().unwrap_or(line);
            out.push(name.to_string());
        }
    }
    out.sort();
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_crate_depends_only_on_the_crates_below_it() {
    let allowed: BTreeMap<&str, Vec<String>> = ALLOWED
        .iter()
        .map(|(name, deps)| {
            let mut deps: Vec<String> = deps.iter().map(|d| d.to_string()).collect();
            deps.sort();
            (*name, deps)
        })
        .collect();
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(workspace().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else { continue };
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let Some(want) = allowed.get(name.as_str()) else {
            panic!("crate {name} is not in layering.rs's ALLOWED (nor, likely, in docs/ARCHITECTURE.md)")
        };
        assert_eq!(&sandlot_dependencies(&manifest), want, "{name}'s sandlot dependencies");
        seen.push(name);
    }
    assert_eq!(seen.len(), ALLOWED.len(), "a crate of ALLOWED is gone: {seen:?}");
}

#[test]
fn every_crate_but_the_host_ones_forbids_unsafe() {
    for (name, _) in ALLOWED {
        let src = workspace().join("crates").join(name).join("src");
        let root = if src.join("lib.rs").exists() { src.join("lib.rs") } else { src.join("main.rs") };
        let text = std::fs::read_to_string(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
        let forbids = text.lines().any(|l| l.trim() == "#![forbid(unsafe_code)]");
        assert_eq!(
            forbids,
            !UNSAFE_ALLOWED.contains(name),
            "{name}: #![forbid(unsafe_code)] at its root unless it is one of {UNSAFE_ALLOWED:?}"
        );
    }
}

#[test]
fn the_architecture_table_names_every_crate() {
    let doc = std::fs::read_to_string(workspace().join("docs/ARCHITECTURE.md")).unwrap();
    for (name, _) in ALLOWED {
        assert!(doc.contains(&format!("| `{name}` |")), "docs/ARCHITECTURE.md's crate table lacks {name}");
    }
}

#[test]
fn handlers_reach_nothing_below_the_control_layer() {
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server");
    let mut files = Vec::new();
    rust_files(&server, &mut files);
    assert!(files.len() > 20, "the server's sources were not found: {files:?}");
    for file in files {
        let relative = file.strip_prefix(&server).unwrap().to_string_lossy().into_owned();
        if WIRING.contains(&relative.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for below in BELOW_CONTROL {
            assert!(
                !text.contains(&format!("{below}::")),
                "src/server/{relative} names {below}: a surface goes through sandlot_control"
            );
        }
    }
}
