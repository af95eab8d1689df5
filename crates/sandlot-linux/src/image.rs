//! Images: read-only root layers.
//!
//! `host` is the image that works on any machine without a download: a small generated skeleton (the
//! merged-/usr symlinks, /etc pieces that programs need) as the overlay's lower layer, with the host's
//! `/usr` bound read-only on top of it.

use std::fs;
use std::io;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

/// Bumped when the skeleton's content changes, so old state dirs rebuild it.
const HOST_IMAGE_FORMAT: &str = "host-image-v1";

/// An image ready to boot.
#[derive(Debug, Clone)]
pub struct Image {
    /// Its name.
    pub name: String,
    /// Lower layers, top first.
    pub lower: Vec<PathBuf>,
    /// Host directories bound read-only, `(host, inside)`.
    pub ro_binds: Vec<(PathBuf, PathBuf)>,
}

/// Names of the images this build knows.
pub const IMAGES: &[&str] = &["host"];

/// Returns the named image, building its skeleton under `images_dir` on first use.
pub fn open(images_dir: &Path, name: &str) -> io::Result<Image> {
    match name {
        "host" => host(images_dir),
        other => Err(io::Error::new(io::ErrorKind::NotFound, format!("unknown image {other:?}"))),
    }
}

/// Where a sandbox finds the trust bundle (system roots plus the daemon's CA) and the CA alone.
pub const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The daemon's egress CA inside a sandbox.
pub const CA_CERT: &str = "/etc/sandlot/ca.pem";

/// Makes every sandbox of the `host` image trust `ca_pem` (the daemon's egress CA): the bundle at
/// [`CA_BUNDLE`] becomes the host's roots plus it, and [`CA_CERT`] holds it alone.
pub fn install_ca(images_dir: &Path, ca_pem: &str) -> io::Result<()> {
    let rootfs = images_dir.join("host/rootfs");
    let system = fs::read_to_string(CA_BUNDLE).unwrap_or_default();
    let bundle = rootfs.join(CA_BUNDLE.trim_start_matches('/'));
    if let Some(dir) = bundle.parent() {
        fs::create_dir_all(dir)?;
    }
    // A symlink copied from the host would point the write at the host's own file: replace it.
    let _ = fs::remove_file(&bundle);
    fs::write(&bundle, format!("{system}\n{ca_pem}"))?;
    let own = rootfs.join(CA_CERT.trim_start_matches('/'));
    fs::create_dir_all(own.parent().expect("has a parent"))?;
    fs::write(&own, ca_pem)?;
    Ok(())
}

fn host(images_dir: &Path) -> io::Result<Image> {
    let dir = images_dir.join("host");
    let rootfs = dir.join("rootfs");
    let marker = dir.join("FORMAT");
    if fs::read_to_string(&marker).ok().as_deref() != Some(HOST_IMAGE_FORMAT) {
        build_host_skeleton(&dir)?;
    }
    Ok(Image {
        name: "host".into(),
        lower: vec![rootfs],
        ro_binds: vec![(PathBuf::from("/usr"), PathBuf::from("/usr"))],
    })
}

/// Builds the skeleton beside its final place and renames it in, so a crash never leaves half of one.
fn build_host_skeleton(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("rootfs.tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)?;
    for d in ["usr", "etc", "proc", "dev", "tmp", "home", "root", "var", "var/tmp", "run", "opt", "mnt", "srv", "sys"] {
        fs::create_dir_all(tmp.join(d))?;
    }
    fs::set_permissions(tmp.join("tmp"), fs::Permissions::from_mode(0o1777))?;
    fs::set_permissions(tmp.join("var/tmp"), fs::Permissions::from_mode(0o1777))?;
    // Merged-/usr hosts (Debian 12, Ubuntu, Fedora) have /bin -> usr/bin and friends: mirror them.
    for name in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        if let Ok(target) = fs::read_link(Path::new("/").join(name)) {
            symlink(target, tmp.join(name))?;
        }
    }
    // /etc pieces that programs from /usr expect: the dynamic loader cache, Debian's alternatives
    // symlinks (awk, pager…), the CA bundle, name-service config. Symlinks are copied as symlinks.
    for name in [
        "alternatives",
        "ld.so.cache",
        "ld.so.conf",
        "ld.so.conf.d",
        "nsswitch.conf",
        "ssl",
        "ca-certificates",
        "profile",
        "bash.bashrc",
        "debian_version",
        "os-release",
        "mime.types",
        "localtime",
        "python3",
        "python3.11",
    ] {
        let src = Path::new("/etc").join(name);
        if fs::symlink_metadata(&src).is_ok() {
            copy_tree(&src, &tmp.join("etc").join(name))?;
        }
    }
    let rootfs = dir.join("rootfs");
    if rootfs.exists() {
        let old = dir.join(format!("rootfs.old-{}", std::process::id()));
        fs::rename(&rootfs, &old)?;
        fs::rename(&tmp, &rootfs)?;
        let _ = fs::remove_dir_all(&old);
    } else {
        fs::rename(&tmp, &rootfs)?;
    }
    fs::write(dir.join("FORMAT"), HOST_IMAGE_FORMAT)?;
    Ok(())
}

fn copy_tree(src: &Path, dst: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(src)?;
    if meta.file_type().is_symlink() {
        symlink(fs::read_link(src)?, dst)?;
    } else if meta.is_dir() {
        fs::create_dir_all(dst)?;
        fs::set_permissions(dst, fs::Permissions::from_mode(meta.permissions().mode() & 0o755))?;
        for ent in fs::read_dir(src)? {
            let ent = ent?;
            copy_tree(&ent.path(), &dst.join(ent.file_name()))?;
        }
    } else if meta.is_file() {
        // Only world-readable files: nothing private of the host's /etc enters an image.
        if meta.permissions().mode() & 0o004 != 0 {
            fs::copy(src, dst)?;
        }
    }
    Ok(())
}
