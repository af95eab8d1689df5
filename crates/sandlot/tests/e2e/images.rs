//! Images end to end: import a root filesystem tar and pull from a real registry (Debian's
//! docker-registry on loopback, with TLS and basic auth), boot sandboxes from them with the image's
//! config honoured, keep tenants apart, and collect what nothing uses.

use std::io::Cursor;

use sandlot_client::api::{CreateSandbox, ExecRequest, ImageOwner, PullImage, RegistryAuth, User};
use sandlot_client::Client;
use sandlot_oci::manifest::Compression;
use sandlot_oci::testing::{TestImage, TestRegistry, TestRegistryOptions};

use crate::harness::{expect_error, Server};

/// A root filesystem with Debian's static busybox as `/bin/busybox` and `/bin/sh`, a passwd naming
/// root only, and whatever `extra` adds: `(path, contents)` files and `(path, target)` symlinks.
/// A header as real tar writers make it: owner root, a fixed mtime.
fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1_700_000_000);
    h
}

fn busybox_rootfs(files: &[(&str, &[u8])], links: &[(&str, &str)]) -> Vec<u8> {
    let busybox = std::fs::read("/bin/busybox").expect("Debian's busybox-static at /bin/busybox");
    let mut b = tar::Builder::new(Vec::new());
    let dir = |b: &mut tar::Builder<Vec<u8>>, path: &str| {
        let mut h = header(tar::EntryType::Directory, 0o755, 0);
        b.append_data(&mut h, path, std::io::empty()).unwrap();
    };
    for d in ["bin", "etc", "root"] {
        dir(&mut b, d);
    }
    let file = |b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8], mode: u32| {
        let mut h = header(tar::EntryType::Regular, mode, data.len() as u64);
        b.append_data(&mut h, path, data).unwrap();
    };
    file(&mut b, "bin/busybox", &busybox, 0o755);
    file(&mut b, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644);
    for (path, data) in files {
        file(&mut b, path, data, 0o644);
    }
    let link = |b: &mut tar::Builder<Vec<u8>>, path: &str, target: &str| {
        let mut h = header(tar::EntryType::Symlink, 0o777, 0);
        b.append_link(&mut h, path, target).unwrap();
    };
    link(&mut b, "bin/sh", "busybox");
    for (path, target) in links {
        link(&mut b, path, target);
    }
    b.into_inner().unwrap()
}

fn sh(script: &str) -> ExecRequest {
    ExecRequest { argv: Some(vec!["/bin/sh".into(), "-c".into(), script.into()]), ..Default::default() }
}

fn tenant(server: &Server, name: &str) -> Client {
    Client::new(server.url(), server.client().create_key(name).unwrap().key)
}

/// A root filesystem tar becomes an image: a sandbox boots it (no host /usr), sees its files owned by
/// its own root, runs as `user` (added to the image's passwd), and root in it can change image files
/// (copy-on-write: the image itself stays as imported). A link in the archive pointing at a host
/// directory plants nothing there. Another tenant sees no such image.
#[test]
fn an_imported_root_filesystem_boots_with_its_own_files() {
    let server = Server::start();
    let canary = server.temp_dir().join("canary");
    std::fs::create_dir_all(&canary).unwrap();
    let rootfs = busybox_rootfs(
        &[("evil/planted", b"x"), ("etc/motd", b"from the image\n")],
        &[("evil", canary.to_str().unwrap())],
    );
    let alice = tenant(&server, "alice");
    let images = alice.import_image(Cursor::new(rootfs), Some("tools:1"), false).unwrap().wait().unwrap();
    assert_eq!(images.len(), 1);
    assert_eq!((images[0].name.as_str(), images[0].owner), ("tools:1", ImageOwner::Tenant));
    assert!(std::fs::read_dir(&canary).unwrap().next().is_none(), "the archive's link wrote to the host");

    let sb = alice.create(&CreateSandbox { image: Some("tools:1".into()), ..Default::default() }).unwrap();
    let r = sb
        .exec(&sh("cat /etc/motd; /bin/busybox id -u; /bin/busybox stat -c '%u %a' /bin/busybox; \
             /bin/busybox grep -c '^user:' /etc/passwd; test -e /usr/bin/python3 && echo host-usr || echo own-usr"))
        .unwrap();
    assert_eq!(r.exit_code, 0, "{r:?}");
    assert_eq!(r.stdout, "from the image\n1000\n0 755\n1\nown-usr\n", "{r:?}");
    let root = ExecRequest { user: User::Root, ..sh("echo changed > /etc/motd && cat /etc/motd") };
    assert_eq!(sb.exec(&root).unwrap().stdout, "changed\n");
    let again = alice.create(&CreateSandbox { image: Some("tools:1".into()), ..Default::default() }).unwrap();
    assert_eq!(again.exec(&sh("cat /etc/motd")).unwrap().stdout, "from the image\n", "the image itself changed");

    let bob = tenant(&server, "bob");
    expect_error(bob.image("tools:1"), 404, "not_found");
    expect_error(
        bob.create(&CreateSandbox { image: Some("tools:1".into()), ..Default::default() }),
        400,
        "invalid_request",
    );
    assert!(bob.images().unwrap().iter().all(|i| i.name != "tools:1"));
    expect_error(bob.delete_image("tools:1"), 404, "not_found");
    sb.delete().unwrap();
    again.delete().unwrap();
}

/// Pull from a registry that needs TLS (a test CA given with --extra-ca) and basic auth: the image's
/// Env, WorkingDir and layers are honoured; wrong credentials fail clearly without the password in
/// the message; deleting the image collects its blobs once no sandbox uses it.
#[test]
fn a_pulled_image_runs_with_its_config() {
    let registry = TestRegistry::start(TestRegistryOptions {
        tls: true,
        basic_auth: Some(("ci".into(), "s3cret-pw".into())),
        token_auth: false,
    })
    .unwrap();
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), registry.ca_pem.as_deref().unwrap()).unwrap();
    let base = busybox_rootfs(&[], &[]);
    let app = sandlot_oci::testing::tar_of(&[("app/hello.txt", b"hello from layer two\n")]);
    let image = TestImage {
        layers: vec![base, app],
        compression: Compression::Gzip,
        config: serde_json::json!({"Env": ["GREETING=hi there", "PATH=/bin"], "WorkingDir": "/app", "Cmd": ["cat", "hello.txt"]}),
    };
    registry.push("team/app", "1", &image).unwrap();
    let server = Server::builder().extra_ca(ca.path()).start();
    let alice = tenant(&server, "alice");
    let reference = format!("{}/team/app:1", registry.host());

    let wrong = PullImage {
        reference: reference.clone(),
        auth: Some(RegistryAuth { username: "ci".into(), password: "wrong-pw".into() }),
        ..Default::default()
    };
    let err = alice.pull_image(&wrong).unwrap().wait().unwrap_err();
    assert_eq!(err.code(), Some("registry_denied"), "{err}");
    assert!(!err.to_string().contains("wrong-pw"), "{err}");

    let right = PullImage {
        reference: reference.clone(),
        auth: Some(RegistryAuth { username: "ci".into(), password: "s3cret-pw".into() }),
        ..Default::default()
    };
    let events: Vec<_> = alice.pull_image(&right).unwrap().map(|e| e.unwrap()).collect();
    let kinds: Vec<String> =
        events.iter().map(|e| serde_json::to_value(e).unwrap()["type"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds.first().map(String::as_str), Some("resolved"), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("done"), "{kinds:?}: {:?}", events.last());
    assert_eq!(kinds.iter().filter(|k| *k == "unpacked").count(), 2, "{kinds:?}");
    let info = alice.image(&reference).unwrap();
    assert_eq!(info.layers.len(), 2);
    assert_eq!(info.config.working_dir.as_deref(), Some("/app"));

    let sb = alice.create(&CreateSandbox { image: Some(reference.clone()), ..Default::default() }).unwrap();
    let r = sb.exec(&sh("echo \"$GREETING\"; pwd; cat hello.txt")).unwrap();
    assert_eq!(r.stdout, "hi there\n/app\nhello from layer two\n", "{r:?}");
    let log = server.log_text();
    assert!(!log.contains("s3cret-pw"), "the password reached the server's log");

    // Deleted while a sandbox runs it: the sandbox keeps working; its blobs go once nothing uses them.
    alice.delete_image(&reference).unwrap();
    expect_error(alice.image(&reference), 404, "not_found");
    assert_eq!(sb.exec(&sh("cat hello.txt")).unwrap().stdout, "hello from layer two\n");
    let blobs = server.state_dir().join("blobs/sha256");
    assert_eq!(std::fs::read_dir(&blobs).unwrap().count(), 0, "blobs of a deleted image were kept");
    sb.delete().unwrap();
}
