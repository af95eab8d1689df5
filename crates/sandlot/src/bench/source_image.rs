//! The image the `images` group pulls: made from this host's own files (a small bootable base, then
//! Python's standard library and parts of `/usr/share`, one gzip layer each), written as an OCI image
//! layout and pushed to the bench's registry with `skopeo copy`.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context};
use sandlot_oci::manifest::{self, Compression, Descriptor};
use sandlot_oci::Digest;

use super::registry::BenchRegistry;

/// Host directories stored as the layers above the base, one layer per entry (paths under `/`).
/// Missing ones are left out; a layer none of whose directories exist is an error.
const DATA_LAYERS: &[&[&str]] = &[
    &["usr/lib/python3.11"],
    &["usr/share/perl", "usr/share/vim"],
    &["usr/share/icons", "usr/share/i18n", "usr/share/zoneinfo"],
];

/// What was pushed.
pub(super) struct SourceImage {
    /// `127.0.0.1:PORT/bench/hostfiles:1`.
    pub(super) reference: String,
    /// Layers, bottom first.
    pub(super) layers: usize,
    /// Bytes of the uncompressed layer tars.
    pub(super) tar_bytes: u64,
    /// Bytes of the gzip blobs (what a pull downloads).
    pub(super) blob_bytes: u64,
}

/// Builds the image in `work` (which it fills) and pushes it to `registry`.
pub(super) fn push_host_image(registry: &BenchRegistry, work: &Path) -> anyhow::Result<SourceImage> {
    if std::env::consts::ARCH != "x86_64" {
        bail!(
            "the image figures build their image from an x86_64 host's libc; this host is {}",
            std::env::consts::ARCH
        );
    }
    let base = work.join("base");
    base_tree(&base)?;
    let mut tars = vec![tar(&base, &["bin", "etc", "lib", "lib64", "root", "tmp", "usr"])?];
    for dirs in DATA_LAYERS {
        let present: Vec<&str> = dirs.iter().copied().filter(|d| Path::new("/").join(d).is_dir()).collect();
        if present.is_empty() {
            bail!("none of /{} exists on this host, which the bench image is made of", dirs.join(", /"));
        }
        tars.push(tar(Path::new("/"), &present)?);
    }
    let layout = work.join("layout");
    std::fs::create_dir_all(layout.join("blobs/sha256"))?;
    std::fs::write(layout.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    let mut layers = Vec::new();
    let mut diff_ids = Vec::new();
    let (mut tar_bytes, mut blob_bytes) = (0, 0);
    for t in &tars {
        diff_ids.push(Digest::of(t));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(t)?;
        let blob = gz.finish()?;
        tar_bytes += t.len() as u64;
        blob_bytes += blob.len() as u64;
        layers.push(put_blob(&layout, &blob, Compression::Gzip.oci_media_type())?);
    }
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux", "created": "2026-12-01T00:00:00Z",
        "config": {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    let config = put_blob(&layout, &serde_json::to_vec(&config)?, manifest::OCI_CONFIG)?;
    let mut top = put_blob(&layout, &manifest::write_oci_manifest(&config, &layers), manifest::OCI_MANIFEST)?;
    top.annotations.insert("org.opencontainers.image.ref.name".into(), "bench".into());
    let index = serde_json::json!({"schemaVersion": 2, "mediaType": manifest::OCI_INDEX, "manifests": [top]});
    std::fs::write(layout.join("index.json"), serde_json::to_vec(&index)?)?;
    let reference = format!("{}/bench/hostfiles:1", registry.host());
    // skopeo copies the blobs as they are (no recompression): the registry serves exactly these bytes.
    let out = Command::new("skopeo")
        .args(["copy", "--quiet", "--insecure-policy", "--dest-tls-verify=false"])
        .arg(format!("oci:{}:bench", layout.display()))
        .arg(format!("docker://{reference}"))
        .output()
        .context("running skopeo (apt-get install skopeo)")?;
    if !out.status.success() {
        bail!("pushing the bench image with skopeo failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(SourceImage { reference, layers: tars.len(), tar_bytes, blob_bytes })
}

/// Writes `bytes` as a blob of the layout; returns its descriptor.
fn put_blob(layout: &Path, bytes: &[u8], media_type: &str) -> anyhow::Result<Descriptor> {
    let digest = Digest::of(bytes);
    std::fs::write(layout.join("blobs/sha256").join(digest.hex()), bytes)?;
    Ok(Descriptor {
        media_type: media_type.into(),
        digest,
        size: bytes.len() as u64,
        platform: None,
        annotations: BTreeMap::new(),
    })
}

/// A tar of `paths` under `root`, as GNU tar writes it (owners as numbers, names sorted).
fn tar(root: &Path, paths: &[&str]) -> anyhow::Result<Vec<u8>> {
    let out = Command::new("tar")
        .args(["--create", "--file=-", "--numeric-owner", "--sort=name", "-C"])
        .arg(root)
        .args(paths)
        .output()
        .context("running tar")?;
    if !out.status.success() {
        bail!("tar of {paths:?} under {} failed: {}", root.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(out.stdout)
}

/// The bottom layer's tree in `dir`: merged /usr (`bin`, `lib`, `lib64` are links into it), the host's
/// coreutils `echo` with the libc and loader it needs (the same binary the `host` image runs), Debian's
/// static busybox as `sh` (for commands and builds), and an `/etc/passwd` naming root.
fn base_tree(dir: &Path) -> anyhow::Result<()> {
    let busybox = Path::new("/bin/busybox");
    if !busybox.exists() {
        bail!("/bin/busybox is missing: the bench image's shell is Debian's static busybox (apt-get install busybox-static)");
    }
    for d in ["usr/bin", "usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/share", "etc", "root", "tmp"] {
        std::fs::create_dir_all(dir.join(d))?;
    }
    std::fs::set_permissions(dir.join("tmp"), std::fs::Permissions::from_mode(0o1777))?;
    let copy = |from: &str, to: &str| -> anyhow::Result<()> {
        // The real file behind the host's links (libc and the loader are links on Debian).
        let real = std::fs::canonicalize(from).with_context(|| format!("{from} (needed in the bench image)"))?;
        std::fs::copy(&real, dir.join(to)).with_context(|| format!("copying {}", real.display()))?;
        Ok(())
    };
    copy("/usr/bin/echo", "usr/bin/echo")?;
    copy("/bin/busybox", "usr/bin/busybox")?;
    copy("/lib/x86_64-linux-gnu/libc.so.6", "usr/lib/x86_64-linux-gnu/libc.so.6")?;
    copy("/lib64/ld-linux-x86-64.so.2", "usr/lib64/ld-linux-x86-64.so.2")?;
    symlink("busybox", dir.join("usr/bin/sh"))?;
    for (link, target) in [("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")] {
        symlink(target, dir.join(link))?;
    }
    std::fs::write(dir.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")?;
    Ok(())
}
