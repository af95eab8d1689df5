//! Imports of `docker save` tars, OCI layouts (tar and directory) and plain rootfs tars, compressed or
//! not; archives made by hand and by `skopeo` (Debian's package) from the loopback test registry.
//! Run with `--features testing`.

use std::path::Path;
use std::process::Command;

use sandlot_oci::manifest::{self, Compression};
use sandlot_oci::testing::{compress, tar_of, TestImage, TestRegistry, TestRegistryOptions};
use sandlot_oci::{import, import_dir, BlobStore, Digest, ImportError, Platform};

const MAX: u64 = 64 << 20;

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir.join("sha256")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

fn config_json(diff_ids: &[Digest]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/bin", "A=1"], "Entrypoint": ["/bin/app"], "User": "1000:1000"},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap()
}

/// A legacy `docker save` tar: `<config hex>.json`, `<id>/layer.tar`, `manifest.json`.
fn docker_save(layers: &[Vec<u8>], diff_ids: &[Digest]) -> Vec<u8> {
    let config = config_json(diff_ids);
    let config_name = format!("{}.json", Digest::of(&config).hex());
    let layer_names: Vec<String> = (0..layers.len()).map(|i| format!("{:064x}/layer.tar", i + 1)).collect();
    let manifest = serde_json::to_vec(&serde_json::json!([
        {"Config": config_name, "RepoTags": ["example/app:1"], "Layers": layer_names}
    ]))
    .unwrap();
    let mut files: Vec<(&str, &[u8])> = vec![(&config_name, &config)];
    for (name, layer) in layer_names.iter().zip(layers) {
        files.push((name, layer));
    }
    files.push(("manifest.json", &manifest));
    tar_of(&files)
}

#[test]
fn docker_save_tar_imports_with_its_repo_tag() {
    let layers = vec![tar_of(&[("bin/app", b"#!/bin/sh\n")]), tar_of(&[("etc/conf", b"x=1\n")])];
    let diff_ids: Vec<Digest> = layers.iter().map(|l| Digest::of(l)).collect();
    let archive = docker_save(&layers, &diff_ids);
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    let imported = import(&archive[..], &store, MAX).unwrap();
    assert_eq!(imported.len(), 1);
    let image = &imported[0].image;
    assert_eq!(imported[0].name.as_deref(), Some("example/app:1"));
    assert_eq!(image.config.entrypoint, Some(vec!["/bin/app".to_owned()]));
    assert_eq!(image.config.user.as_deref(), Some("1000:1000"));
    assert_eq!(image.layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>(), diff_ids);
    assert_eq!(image.layers[0].digest, diff_ids[0]);
    assert_eq!(image.layers[0].media_type, manifest::OCI_LAYER_TAR);
    // The manifest written for it is stored and describes exactly these blobs; the spooled archive is gone.
    let written = store.read_verified(&image.manifest_digest, manifest::MAX_MANIFEST_BYTES).unwrap();
    let manifest::Parsed::Manifest(m) = manifest::parse(&written, None).unwrap() else { panic!("not a manifest") };
    assert_eq!(m.config.digest, image.config_digest);
    let mut expected: Vec<String> = image.blobs().iter().map(|d| d.hex().to_owned()).collect();
    expected.sort();
    assert_eq!(entries(dir.path()), expected);
}

#[test]
fn docker_save_with_a_wrong_diff_id_is_corrupt() {
    let layers = vec![tar_of(&[("a", b"a")])];
    let archive = docker_save(&layers, &[Digest::of(b"something else")]);
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    let err = import(&archive[..], &store, MAX).unwrap_err();
    assert!(matches!(err, ImportError::Corrupt(ref m) if m.contains("diff_id") || m.contains("uncompresses")), "{err}");
}

/// An OCI layout: `oci-layout`, `index.json` (with a ref name), `blobs/sha256/*`; one gzip layer.
fn oci_layout_files(corrupt_layer: bool) -> Vec<(String, Vec<u8>)> {
    let tar = tar_of(&[("usr/bin/tool", b"tool")]);
    let mut layer = compress(&tar, Compression::Gzip).unwrap();
    let layer_digest = Digest::of(&layer);
    if corrupt_layer {
        layer[10] ^= 0xff;
    }
    let config = config_json(&[Digest::of(&tar)]);
    let desc = |mt: &str, b: &[u8]| manifest::Descriptor {
        media_type: mt.into(),
        digest: Digest::of(b),
        size: b.len() as u64,
        platform: None,
        annotations: Default::default(),
    };
    let mut layer_desc = desc(manifest::OCI_LAYER_GZIP, &layer);
    layer_desc.digest = layer_digest.clone();
    let m = manifest::write_oci_manifest(&desc(manifest::OCI_CONFIG, &config), &[layer_desc]);
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": manifest::OCI_INDEX,
        "manifests": [{"mediaType": manifest::OCI_MANIFEST, "digest": Digest::of(&m), "size": m.len(),
                       "annotations": {"org.opencontainers.image.ref.name": "tools:2"}}],
    }))
    .unwrap();
    vec![
        ("oci-layout".into(), br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec()),
        ("index.json".into(), index),
        (format!("blobs/sha256/{}", Digest::of(&config).hex()), config),
        (format!("blobs/sha256/{}", Digest::of(&m).hex()), m),
        (format!("blobs/sha256/{}", layer_digest.hex()), layer),
    ]
}

fn tar_of_owned(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let refs: Vec<(&str, &[u8])> = files.iter().map(|(n, b)| (n.as_str(), b.as_slice())).collect();
    tar_of(&refs)
}

#[test]
fn oci_layout_tar_and_directory_import_the_same_image() {
    let files = oci_layout_files(false);
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    let imported = import(&compress(&tar_of_owned(&files), Compression::Zstd).unwrap()[..], &store, MAX).unwrap();
    assert_eq!(imported.len(), 1);
    assert_eq!(imported[0].name.as_deref(), Some("tools:2"));
    let image = &imported[0].image;
    assert_eq!(image.layers[0].media_type, manifest::OCI_LAYER_GZIP);
    assert_eq!(image.manifest_digest, Digest::of(&files[3].1));
    assert_eq!(entries(dir.path()).len(), 3);

    let layout = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(layout.path().join("blobs/sha256")).unwrap();
    for (name, bytes) in &files {
        std::fs::write(layout.path().join(name), bytes).unwrap();
    }
    let dir2 = tempfile::tempdir().unwrap();
    let from_dir = import_dir(layout.path(), &BlobStore::open(dir2.path()).unwrap(), MAX).unwrap();
    assert_eq!(from_dir, imported);
    let not_layout = tempfile::tempdir().unwrap();
    assert!(matches!(import_dir(not_layout.path(), &store, MAX), Err(ImportError::Format(_))));
}

#[test]
fn oci_layout_with_a_corrupt_blob_is_refused_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    let err = import(&tar_of_owned(&oci_layout_files(true))[..], &store, MAX).unwrap_err();
    assert!(matches!(err, ImportError::Corrupt(_)), "{err}");
    assert_eq!(entries(dir.path()), Vec::<String>::new());
}

#[test]
fn plain_rootfs_tar_becomes_a_one_layer_image_plain_gzip_or_zstd() {
    let rootfs = tar_of(&[("./bin/sh", b"not really a shell"), ("./etc/os-release", b"ID=test\n")]);
    for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path()).unwrap();
        let imported = import(&compress(&rootfs, compression).unwrap()[..], &store, MAX).unwrap();
        assert_eq!(imported.len(), 1);
        assert_eq!(imported[0].name, None);
        let image = &imported[0].image;
        assert_eq!(image.layers.len(), 1, "{compression:?}");
        assert_eq!(image.layers[0].diff_id, Digest::of(&rootfs));
        assert_eq!(image.layers[0].digest, Digest::of(&rootfs));
        assert_eq!(std::fs::read(store.path(&image.layers[0].digest)).unwrap(), rootfs);
        assert_eq!(
            image.config.env,
            vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned()]
        );
        assert_eq!(image.platform, Platform::host());
        assert_eq!(entries(dir.path()).len(), 3);
    }
}

#[test]
fn oversized_or_non_tar_input_is_refused_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    let rootfs = tar_of(&[("big", &vec![7u8; 100_000])]);
    // A small gzip stream that inflates past the cap (a decompression bomb in miniature).
    let bomb = compress(&rootfs, Compression::Gzip).unwrap();
    assert!(bomb.len() < 10_000);
    let err = import(&bomb[..], &store, 50_000).unwrap_err();
    assert!(matches!(err, ImportError::TooLarge(_)), "{err}");
    let err = import(&b"this is not an archive at all, just text"[..], &store, MAX).unwrap_err();
    assert!(matches!(err, ImportError::Format(_)), "{err}");
    let err = import(&b""[..], &store, MAX).unwrap_err();
    assert!(matches!(err, ImportError::Format(_)), "{err}");
    assert_eq!(entries(dir.path()), Vec::<String>::new());
}

/// `skopeo copy` from the loopback registry into `docker-archive:` and `oci-archive:` files.
fn skopeo_archive(reg: &TestRegistry, repo_tag: &str, dest: &str) {
    assert!(Path::new("/usr/bin/skopeo").exists(), "/usr/bin/skopeo is missing: apt-get install skopeo");
    let out = Command::new("/usr/bin/skopeo")
        .args(["copy", "--quiet", "--src-tls-verify=false", "--insecure-policy"])
        .arg(format!("docker://{}/{repo_tag}", reg.host()))
        .arg(dest)
        .output()
        .unwrap();
    assert!(out.status.success(), "skopeo copy to {dest} failed: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn archives_written_by_skopeo_import() {
    let reg = TestRegistry::start(TestRegistryOptions::default()).unwrap();
    let layers = vec![tar_of(&[("a", b"first")]), tar_of(&[("b", b"second")])];
    let image = TestImage {
        layers: layers.clone(),
        compression: Compression::Gzip,
        config: serde_json::json!({"Cmd": ["/b"]}),
    };
    reg.push("skopeo/app", "3", &image).unwrap();
    let work = tempfile::tempdir().unwrap();
    let docker_tar = work.path().join("docker.tar");
    let oci_tar = work.path().join("oci.tar");
    skopeo_archive(&reg, "skopeo/app:3", &format!("docker-archive:{}:skopeo/app:3", docker_tar.display()));
    skopeo_archive(&reg, "skopeo/app:3", &format!("oci-archive:{}:app3", oci_tar.display()));
    let diff_ids: Vec<Digest> = layers.iter().map(|l| Digest::of(l)).collect();
    // skopeo writes the fully qualified name into RepoTags; the name is returned as the archive says.
    for (path, name) in [(&docker_tar, "docker.io/skopeo/app:3"), (&oci_tar, "app3")] {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path()).unwrap();
        let imported = import(std::fs::File::open(path).unwrap(), &store, MAX).unwrap();
        assert_eq!(imported.len(), 1, "{}", path.display());
        assert_eq!(imported[0].name.as_deref(), Some(name));
        let familiar = sandlot_oci::Reference::parse(name).unwrap().familiar();
        assert!(familiar == "skopeo/app:3" || familiar == "app3:latest", "{familiar}");
        let got: Vec<Digest> = imported[0].image.layers.iter().map(|l| l.diff_id.clone()).collect();
        assert_eq!(got, diff_ids);
        assert_eq!(imported[0].image.config.cmd, Some(vec!["/b".to_owned()]));
        for blob in imported[0].image.blobs() {
            assert!(store.contains(&blob));
        }
    }
}
