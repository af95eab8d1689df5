//! Pulls from a real `docker-registry` on loopback (Debian's package): tags, digests, indexes, shared
//! layers, corruption, basic and token auth, TLS trust and plain HTTP. Run with `--features testing`.

use std::collections::HashMap;

use sandlot_oci::manifest::Compression;
use sandlot_oci::testing::{tar_of, TestImage, TestRegistry, TestRegistryOptions};
use sandlot_oci::{
    BlobStore, Credentials, Digest, Platform, PullErrorKind, PullEvent, Reference, Registry, RegistryOptions,
};

fn image(files: &[(&str, &[u8])], compression: Compression) -> TestImage {
    TestImage {
        layers: vec![tar_of(files)],
        compression,
        config: serde_json::json!({"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/sh"], "WorkingDir": "/srv",
                                   "Labels": {"org.example": "yes"}, "ExposedPorts": {"8080/tcp": {}}}),
    }
}

fn client_for(reg: &TestRegistry) -> Registry {
    Registry::new(RegistryOptions {
        extra_roots_pem: reg.ca_pem.clone().unwrap_or_default().into_bytes(),
        insecure: if reg.ca_pem.is_some() { vec![] } else { vec![reg.host()] },
        credentials: HashMap::new(),
        user_agent: "sandlot-oci-test".into(),
        private: vec![reg.host()],
        pull_timeout: None,
    })
    .unwrap()
}

fn reference(reg: &TestRegistry, rest: &str) -> Reference {
    Reference::parse(&format!("{}/{rest}", reg.host())).unwrap()
}

#[derive(Debug)]
struct Pulled {
    image: sandlot_oci::Image,
    events: Vec<PullEvent>,
}

fn pull(
    client: &Registry,
    r: &Reference,
    platform: &Platform,
    auth: Option<&Credentials>,
    store: &BlobStore,
) -> Result<Pulled, sandlot_oci::PullError> {
    let mut events = Vec::new();
    let image = client.pull(r, platform, auth, store, &|_| true, u64::MAX, &mut |e| events.push(e))?;
    Ok(Pulled { image, events })
}

fn amd64() -> Platform {
    Platform::parse("linux/amd64").unwrap()
}

fn store_entries(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir.join("sha256")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect()
}

#[test]
fn pull_by_tag_then_by_digest_verifies_and_stores_every_blob() {
    let reg = TestRegistry::start(TestRegistryOptions::default()).unwrap();
    let img = image(&[("etc/hello", b"hello world\n")], Compression::Gzip);
    let manifest = reg.push("app/one", "v1", &img).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    let client = client_for(&reg);

    let pulled = pull(&client, &reference(&reg, "app/one:v1"), &amd64(), None, &store).unwrap();
    let image = &pulled.image;
    assert_eq!(image.manifest_digest, manifest);
    assert_eq!(image.platform, amd64());
    assert_eq!(image.config.cmd, Some(vec!["/bin/sh".to_owned()]));
    assert_eq!(image.config.working_dir.as_deref(), Some("/srv"));
    assert_eq!(image.config.exposed_ports, vec!["8080/tcp".to_owned()]);
    assert_eq!(image.layers.len(), 1);
    assert_eq!(image.layers[0].diff_id, Digest::of(&img.layers[0]));
    assert_eq!(image.layers[0].media_type, "application/vnd.oci.image.layer.v1.tar+gzip");
    for blob in image.blobs() {
        assert!(store.contains(&blob), "{blob} not stored");
        assert_eq!(Digest::of(&std::fs::read(store.path(&blob)).unwrap()), blob);
    }
    let layer = image.layers[0].digest.clone();
    assert!(
        matches!(&pulled.events[0], PullEvent::Resolved { manifest: m, layers, .. } if *m == manifest && layers[0].0 == layer)
    );
    assert!(pulled
        .events
        .iter()
        .any(|e| matches!(e, PullEvent::Layer { digest, done, total } if *digest == layer && done == total)));
    assert_eq!(pulled.events.last(), Some(&PullEvent::LayerDone { digest: layer.clone(), cached: false }));

    // By digest, into a fresh store: the same image, and the manifest bytes are checked against the digest.
    let dir2 = tempfile::tempdir().unwrap();
    let store2 = BlobStore::open(dir2.path()).unwrap();
    let by_digest = pull(&client, &reference(&reg, &format!("app/one@{manifest}")), &amd64(), None, &store2).unwrap();
    assert_eq!(&by_digest.image, image);

    let missing = pull(&client, &reference(&reg, "app/one:nope"), &amd64(), None, &store).unwrap_err();
    assert_eq!(missing.kind, PullErrorKind::NotFound, "{missing}");
    assert!(missing.message.contains("no image") && missing.message.contains(&reg.host()), "{missing}");
}

#[test]
fn index_with_two_platforms_picks_the_asked_one_or_says_none_matches() {
    let reg = TestRegistry::start(TestRegistryOptions::default()).unwrap();
    let arm64 = Platform::parse("linux/arm64/v8").unwrap();
    let index = reg
        .push_index(
            "multi",
            "latest",
            &[
                (amd64(), image(&[("arch", b"amd64")], Compression::Zstd)),
                (arm64.clone(), image(&[("arch", b"arm64")], Compression::None)),
            ],
        )
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    let client = client_for(&reg);
    let r = reference(&reg, "multi");

    let a = pull(&client, &r, &amd64(), None, &store).unwrap().image;
    assert_eq!(a.platform, amd64());
    assert_eq!(a.layers[0].diff_id, Digest::of(&tar_of(&[("arch", b"amd64")])));
    assert_eq!(a.layers[0].media_type, "application/vnd.oci.image.layer.v1.tar+zstd");
    assert_ne!(a.manifest_digest, index);

    let b = pull(&client, &r, &Platform::parse("linux/arm64").unwrap(), None, &store).unwrap().image;
    assert_eq!(b.platform, arm64);
    assert_eq!(b.layers[0].diff_id, Digest::of(&tar_of(&[("arch", b"arm64")])));

    let by_index_digest =
        pull(&client, &reference(&reg, &format!("multi@{index}")), &arm64, None, &store).unwrap().image;
    assert_eq!(by_index_digest, b);

    let err = pull(&client, &r, &Platform::parse("linux/riscv64").unwrap(), None, &store).unwrap_err();
    assert_eq!(err.kind, PullErrorKind::NoMatchingPlatform, "{err}");
    assert!(err.message.contains("linux/riscv64") && err.message.contains("linux/amd64"), "{err}");
}

#[test]
fn a_layer_shared_by_two_images_is_fetched_once() {
    let reg = TestRegistry::start(TestRegistryOptions::default()).unwrap();
    let base = tar_of(&[("bin/base", b"base layer")]);
    let mk = |top: &[u8]| TestImage {
        layers: vec![base.clone(), tar_of(&[("top", top)])],
        compression: Compression::Gzip,
        config: serde_json::json!({}),
    };
    reg.push("shared/a", "1", &mk(b"a")).unwrap();
    reg.push("shared/b", "1", &mk(b"b")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    let client = client_for(&reg);
    let a = pull(&client, &reference(&reg, "shared/a:1"), &amd64(), None, &store).unwrap();
    let b = pull(&client, &reference(&reg, "shared/b:1"), &amd64(), None, &store).unwrap();
    let shared = a.image.layers[0].digest.clone();
    assert_eq!(b.image.layers[0].digest, shared);
    assert!(b.events.contains(&PullEvent::LayerDone { digest: shared.clone(), cached: true }));
    assert!(!b.events.iter().any(|e| matches!(e, PullEvent::Layer { digest, .. } if *digest == shared)));
    assert!(b.events.contains(&PullEvent::LayerDone { digest: b.image.layers[1].digest.clone(), cached: false }));
    // Two manifests, two configs, three distinct layers.
    assert_eq!(store.list().unwrap().len(), 7);
}

#[test]
fn a_corrupted_blob_is_refused_and_nothing_is_left_in_the_store() {
    let reg = TestRegistry::start(TestRegistryOptions::default()).unwrap();
    let img = image(&[("f", b"some content that will be damaged")], Compression::Gzip);
    reg.push("bad", "1", &img).unwrap();
    let (layers, _) = img.blobs(&amd64()).unwrap();
    reg.corrupt_blob(&layers[0].1.digest).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    let err = pull(&client_for(&reg), &reference(&reg, "bad:1"), &amd64(), None, &store).unwrap_err();
    assert_eq!(err.kind, PullErrorKind::Corrupt, "{err}");
    assert!(err.message.contains(layers[0].1.digest.as_str()), "{err}");
    assert_eq!(store_entries(dir.path()), Vec::<String>::new());
}

#[test]
fn basic_auth_right_wrong_and_missing() {
    let password = "s3cret-pass-word";
    let reg = TestRegistry::start(TestRegistryOptions {
        basic_auth: Some(("alice".into(), password.into())),
        ..Default::default()
    })
    .unwrap();
    reg.push("private/app", "1", &image(&[("f", b"x")], Compression::Gzip)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    let client = client_for(&reg);
    let r = reference(&reg, "private/app:1");

    let err = pull(&client, &r, &amd64(), None, &store).unwrap_err();
    assert_eq!(err.kind, PullErrorKind::Unauthorized, "{err}");
    assert!(err.message.contains("needs credentials"), "{err}");

    let wrong = Credentials { username: "alice".into(), password: format!("{password}-wrong") };
    let err = pull(&client, &r, &amd64(), Some(&wrong), &store).unwrap_err();
    assert_eq!(err.kind, PullErrorKind::Unauthorized, "{err}");
    assert!(err.message.contains("rejected the credentials"), "{err}");
    assert!(!err.message.contains(password) && !format!("{err:?}").contains(password), "{err:?}");

    let right = Credentials { username: "alice".into(), password: password.into() };
    pull(&client, &r, &amd64(), Some(&right), &store).unwrap();

    // Configured credentials for the host work without per-pull auth.
    let configured = Registry::new(RegistryOptions {
        insecure: vec![reg.host()],
        credentials: HashMap::from([(reg.host(), right)]),
        ..Default::default()
    })
    .unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    pull(&configured, &r, &amd64(), None, &BlobStore::open(dir2.path()).unwrap()).unwrap();
}

#[test]
fn bearer_token_flow_with_and_without_credentials() {
    let reg = TestRegistry::start(TestRegistryOptions { token_auth: true, ..Default::default() }).unwrap();
    reg.push("tok/app", "1", &image(&[("f", b"token")], Compression::Gzip)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    // The token server is plain HTTP on loopback, so it is listed as insecure too.
    let token_host = reg.token_host().unwrap();
    let client =
        Registry::new(RegistryOptions { insecure: vec![reg.host(), token_host.clone()], ..Default::default() })
            .unwrap();
    let pulled = pull(&client, &reference(&reg, "tok/app:1"), &amd64(), None, &store).unwrap().image;
    assert_eq!(pulled.layers.len(), 1);

    // A realm over plain HTTP is refused unless its host is listed.
    let strict = Registry::new(RegistryOptions { insecure: vec![reg.host()], ..Default::default() }).unwrap();
    let err = pull(&strict, &reference(&reg, "tok/app:1"), &amd64(), None, &store).unwrap_err();
    assert_eq!(err.kind, PullErrorKind::InsecureRefused, "{err}");
    assert!(err.message.contains(&format!("--insecure-registry {token_host}")), "{err}");

    // With credentials demanded by the token server.
    let reg = TestRegistry::start(TestRegistryOptions {
        token_auth: true,
        basic_auth: Some(("bob".into(), "tokenpass".into())),
        ..Default::default()
    })
    .unwrap();
    reg.push("tok/app", "1", &image(&[("f", b"token2")], Compression::Gzip)).unwrap();
    let client =
        Registry::new(RegistryOptions { insecure: vec![reg.host(), reg.token_host().unwrap()], ..Default::default() })
            .unwrap();
    let r = reference(&reg, "tok/app:1");
    let err = pull(&client, &r, &amd64(), None, &store).unwrap_err();
    assert_eq!(err.kind, PullErrorKind::Unauthorized, "{err}");
    assert!(err.message.contains("needs credentials"), "{err}");
    let wrong = Credentials { username: "bob".into(), password: "not-tokenpass".into() };
    let err = pull(&client, &r, &amd64(), Some(&wrong), &store).unwrap_err();
    assert_eq!(err.kind, PullErrorKind::Unauthorized, "{err}");
    assert!(!err.message.contains("not-tokenpass"), "{err}");
    let right = Credentials { username: "bob".into(), password: "tokenpass".into() };
    pull(&client, &r, &amd64(), Some(&right), &store).unwrap();
}

#[test]
fn tls_with_the_extra_root_works_and_without_it_names_extra_ca() {
    let reg = TestRegistry::start(TestRegistryOptions { tls: true, ..Default::default() }).unwrap();
    reg.push("secure/app", "1", &image(&[("f", b"tls")], Compression::Gzip)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    let r = reference(&reg, "secure/app:1");
    pull(&client_for(&reg), &r, &amd64(), None, &store).unwrap();

    let untrusting = Registry::new(RegistryOptions { private: vec![reg.host()], ..Default::default() }).unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let err = pull(&untrusting, &r, &amd64(), None, &BlobStore::open(dir2.path()).unwrap()).unwrap_err();
    assert_eq!(err.kind, PullErrorKind::Tls, "{err}");
    assert!(err.message.contains("--extra-ca"), "{err}");
}

#[test]
fn plain_http_is_refused_unless_listed_as_insecure() {
    let reg = TestRegistry::start(TestRegistryOptions::default()).unwrap();
    reg.push("plain/app", "1", &image(&[("f", b"http")], Compression::Gzip)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    let r = reference(&reg, "plain/app:1");
    // A loopback registry nobody listed is not reached at all.
    let err = pull(&Registry::new(RegistryOptions::default()).unwrap(), &r, &amd64(), None, &store).unwrap_err();
    assert_eq!(err.kind, PullErrorKind::Denied, "{err}");
    assert!(err.message.contains(&format!("--allow-private-registry {}", reg.host())), "{err}");
    // Allowed as a private registry, it is still HTTPS only.
    let private = RegistryOptions { private: vec![reg.host()], ..Default::default() };
    let err = pull(&Registry::new(private).unwrap(), &r, &amd64(), None, &store).unwrap_err();
    assert_eq!(err.kind, PullErrorKind::InsecureRefused, "{err}");
    assert!(err.message.contains(&format!("--insecure-registry {}", reg.host())), "{err}");
    pull(&client_for(&reg), &r, &amd64(), None, &store).unwrap();
}

/// A minimal HTTP/1.1 server on loopback answering each request with `handler(path, authorization)`,
/// recording what it was sent; stopped (its thread joined) on drop.
struct FakeHttp {
    addr: std::net::SocketAddr,
    seen: Seen,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Each request's path and `Authorization` header, in arrival order.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, Option<String>)>>>;

type Answer = (u16, Vec<(&'static str, String)>, Vec<u8>);

impl FakeHttp {
    fn start(handler: impl Fn(&str, Option<&str>) -> Answer + Send + 'static) -> FakeHttp {
        use std::io::{BufRead, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
                let mut auth = None;
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                        break;
                    }
                    if let Some((k, v)) = h.split_once(':') {
                        if k.eq_ignore_ascii_case("authorization") {
                            auth = Some(v.trim().to_owned());
                        }
                    }
                }
                seen2.lock().unwrap().push((path.clone(), auth.clone()));
                let (status, headers, body) = handler(&path, auth.as_deref());
                let mut head =
                    format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
                for (k, v) in headers {
                    head.push_str(&format!("{k}: {v}\r\n"));
                }
                head.push_str("\r\n");
                let _ = conn.write_all(head.as_bytes()).and_then(|_| conn.write_all(&body));
            }
        });
        FakeHttp { addr, seen, stop, thread: Some(thread) }
    }
}

impl Drop for FakeHttp {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn redirects_are_followed_and_authorization_never_reaches_another_host() {
    let img = image(&[("f", b"redirected")], Compression::Gzip);
    let (layers, (config, config_desc)) = img.blobs(&amd64()).unwrap();
    let (layer, layer_desc) = layers.into_iter().next().unwrap();
    let manifest_bytes = sandlot_oci::manifest::write_oci_manifest(&config_desc, std::slice::from_ref(&layer_desc));
    let storage = {
        let (layer, config) = (layer.clone(), config.clone());
        let config_hex = config_desc.digest.hex().to_owned();
        FakeHttp::start(move |path, _| {
            let body = if path.contains(&config_hex) { config.clone() } else { layer.clone() };
            (200, vec![], body)
        })
    };
    let storage_addr = storage.addr;
    let expected = "Basic dTpw"; // base64("u:p")
    let registry = FakeHttp::start(move |path, auth| {
        if auth != Some(expected) {
            return (401, vec![("WWW-Authenticate", "Basic realm=\"fake\"".to_owned())], vec![]);
        }
        if path.contains("/manifests/") {
            (200, vec![("Content-Type", sandlot_oci::manifest::OCI_MANIFEST.to_owned())], manifest_bytes.clone())
        } else if let Some(rest) = path.strip_prefix("/hop/") {
            // Same host: the second hop still carries Authorization; the third goes to storage.
            (302, vec![("Location", format!("http://{storage_addr}/bucket/{rest}?signature=x"))], vec![])
        } else if let Some(d) = path.rsplit('/').next().filter(|_| path.contains("/blobs/")) {
            (307, vec![("Location", format!("/hop/{d}"))], vec![])
        } else {
            (404, vec![], vec![])
        }
    });
    let host = registry.addr.to_string();
    let client =
        Registry::new(RegistryOptions { insecure: vec![host.clone(), storage_addr.to_string()], ..Default::default() })
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    let creds = Credentials { username: "u".into(), password: "p".into() };
    let r = Reference::parse(&format!("{host}/fake/app:1")).unwrap();
    let image = pull(&client, &r, &amd64(), Some(&creds), &store).unwrap().image;
    assert_eq!(image.layers[0].digest, layer_desc.digest);
    assert!(store.contains(&layer_desc.digest));

    let at_storage = storage.seen.lock().unwrap().clone();
    assert_eq!(at_storage.len(), 2, "{at_storage:?}");
    assert!(at_storage.iter().all(|(_, auth)| auth.is_none()), "Authorization leaked to storage: {at_storage:?}");
    let hops: Vec<_> = registry.seen.lock().unwrap().iter().filter(|(p, _)| p.starts_with("/hop/")).cloned().collect();
    assert_eq!(hops.len(), 2);
    assert!(hops.iter().all(|(_, auth)| auth.as_deref() == Some(expected)), "{hops:?}");

    // A redirect to a plain-HTTP host that is not listed is refused.
    let strict = Registry::new(RegistryOptions { insecure: vec![host.clone()], ..Default::default() }).unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let err = pull(&strict, &r, &amd64(), Some(&creds), &BlobStore::open(dir2.path()).unwrap()).unwrap_err();
    assert_eq!(err.kind, PullErrorKind::InsecureRefused, "{err}");
    assert!(err.message.contains(&format!("--insecure-registry {storage_addr}")), "{err}");
}

#[test]
fn docker_schema2_manifests_written_by_skopeo_pull_with_many_layers() {
    let reg = TestRegistry::start(TestRegistryOptions::default()).unwrap();
    let layers: Vec<Vec<u8>> = (0..5).map(|i| tar_of(&[(&format!("layer{i}"), &vec![i as u8; 300_000 + i])])).collect();
    let img =
        TestImage { layers: layers.clone(), compression: Compression::Gzip, config: serde_json::json!({"Cmd": ["x"]}) };
    reg.push("v2s2/app", "oci", &img).unwrap();
    // skopeo rewrites the image with Docker's media types (manifest.v2+json, rootfs.diff.tar.gzip).
    let out = std::process::Command::new("/usr/bin/skopeo")
        .args(["copy", "--quiet", "--format", "v2s2", "--src-tls-verify=false", "--dest-tls-verify=false"])
        .arg(format!("docker://{}/v2s2/app:oci", reg.host()))
        .arg(format!("docker://{}/v2s2/app:docker", reg.host()))
        .output()
        .expect("/usr/bin/skopeo runs (apt-get install skopeo)");
    assert!(out.status.success(), "skopeo copy failed: {}", String::from_utf8_lossy(&out.stderr));
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    let pulled = pull(&client_for(&reg), &reference(&reg, "v2s2/app:docker"), &amd64(), None, &store).unwrap();
    let image = pulled.image;
    assert_eq!(image.layers.len(), 5);
    assert!(
        image.layers.iter().all(|l| l.media_type == "application/vnd.docker.image.rootfs.diff.tar.gzip"),
        "{:?}",
        image.layers
    );
    let diff_ids: Vec<Digest> = image.layers.iter().map(|l| l.diff_id.clone()).collect();
    assert_eq!(diff_ids, layers.iter().map(|l| Digest::of(l)).collect::<Vec<_>>());
    for layer in &image.layers {
        assert_eq!(Digest::of(&std::fs::read(store.path(&layer.digest)).unwrap()), layer.digest);
        assert!(pulled.events.contains(&PullEvent::LayerDone { digest: layer.digest.clone(), cached: false }));
    }
    let manifest = store.read_verified(&image.manifest_digest, 1 << 20).unwrap();
    assert!(String::from_utf8_lossy(&manifest).contains("application/vnd.docker.distribution.manifest.v2+json"));
}
