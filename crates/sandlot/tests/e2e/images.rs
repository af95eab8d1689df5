//! Images end to end: import a root filesystem tar and pull from a real registry (Debian's
//! docker-registry on loopback, with TLS and basic auth), boot sandboxes from them with the image's
//! config honoured, keep tenants apart, and collect what nothing uses.

use std::io::Cursor;

use sandlot_client::api::{CreateSandbox, ExecRequest, ImageOwner, PullImage, RegistryAuth, User};
use sandlot_client::Client;
use sandlot_oci::manifest::Compression;
use sandlot_oci::testing::{TestImage, TestRegistry, TestRegistryOptions};

use crate::common::{busybox_rootfs, empty_files, tar_header as header};
use crate::harness::{expect_error, Server};

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
    let root = ExecRequest { user: Some(User::Root), ..sh("echo changed > /etc/motd && cat /etc/motd") };
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
    // Layer two replaces the passwd of layer one, adding the account the image's USER names.
    let passwd = b"root:x:0:0:root:/root:/bin/sh\napp:x:1001:50:app:/srv:/bin/sh\n";
    let app = sandlot_oci::testing::tar_of(&[("app/hello.txt", b"hello from layer two\n"), ("etc/passwd", passwd)]);
    let image = TestImage {
        layers: vec![base, app],
        compression: Compression::Gzip,
        config: serde_json::json!({
            "Env": ["GREETING=hi there", "PATH=/bin"], "WorkingDir": "/app", "User": "app", "Cmd": ["cat", "hello.txt"]
        }),
    };
    registry.push("team/app", "1", &image).unwrap();
    let server = Server::builder().extra_ca(ca.path()).args(&["--allow-private-registry", &registry.host()]).start();
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
    let usage = alice.usage().unwrap();
    assert_eq!((usage.tenant.as_str(), usage.images, usage.image_bytes), ("alice", 1, info.size_bytes));
    assert!(info.size_bytes > 100_000, "{info:?}");
    assert_eq!(info.config.working_dir.as_deref(), Some("/app"));

    let sb = alice.create(&CreateSandbox { image: Some(reference.clone()), ..Default::default() }).unwrap();
    let r = sb.exec(&sh("echo \"$GREETING\"; pwd; cat hello.txt; id -u; id -g; echo $HOME $USER")).unwrap();
    assert_eq!(r.stdout, "hi there\n/app\nhello from layer two\n1001\n50\n/srv app\n", "{r:?}");
    // Asked for by name, the built-in identities win over the image's USER.
    let root = sb.exec(&ExecRequest { user: Some(User::Root), ..sh("id -u; echo $HOME") }).unwrap();
    assert_eq!(root.stdout, "0\n/root\n");
    let user = sb.exec(&ExecRequest { user: Some(User::User), ..sh("id -u") }).unwrap();
    assert_eq!(user.stdout, "1000\n");
    let log = server.log_text();
    assert!(!log.contains("s3cret-pw"), "the password reached the server's log");

    // Deleted while a sandbox runs it: the sandbox keeps working; its blobs go once nothing uses them.
    alice.delete_image(&reference).unwrap();
    expect_error(alice.image(&reference), 404, "not_found");
    assert_eq!(alice.usage().unwrap().images, 0);
    assert_eq!(sb.exec(&sh("cat hello.txt")).unwrap().stdout, "hello from layer two\n");
    let blobs = server.state_dir().join("blobs/sha256");
    assert_eq!(std::fs::read_dir(&blobs).unwrap().count(), 0, "blobs of a deleted image were kept");
    sb.delete().unwrap();
}

/// An image without a shell runs argv commands (nothing of sandlot needs one inside); two images sharing
/// their bottom layer store it once and unpack it once; an image an admin publishes is every tenant's,
/// and `--default-image` boots it when a create names none.
#[test]
fn shared_layers_public_images_and_the_default_image() {
    let registry = TestRegistry::start(TestRegistryOptions::default()).unwrap();
    let busybox = std::fs::read("/bin/busybox").unwrap();
    let mut b = tar::Builder::new(Vec::new());
    let mut h = header(tar::EntryType::Regular, 0o755, busybox.len() as u64);
    b.append_data(&mut h, "bin/busybox", &busybox[..]).unwrap();
    let base = b.into_inner().unwrap();
    let one = TestImage {
        layers: vec![base.clone(), sandlot_oci::testing::tar_of(&[("one", b"1")])],
        compression: Compression::Zstd,
        config: serde_json::json!({"Cmd": ["/bin/busybox", "cat", "/one"]}),
    };
    let two = TestImage {
        layers: vec![base, sandlot_oci::testing::tar_of(&[("two", b"2")])],
        compression: Compression::Zstd,
        config: serde_json::json!({}),
    };
    registry.push("shared/one", "1", &one).unwrap();
    registry.push("shared/two", "1", &two).unwrap();
    let host = registry.host();
    let default = format!("{host}/shared/one:1");
    let server = Server::start_with(&["--insecure-registry", &host, "--default-image", &default]);
    let admin = server.client();
    let pull = |client: &Client, name: &str, public: bool| {
        let req = PullImage { reference: format!("{host}/{name}"), public, ..Default::default() };
        client.pull_image(&req).unwrap().map(|e| e.unwrap()).collect::<Vec<_>>()
    };
    let first = pull(&admin, "shared/one:1", true);
    let second = pull(&admin, "shared/two:1", false);
    let cached = |events: &[sandlot_client::api::PullEvent]| -> Vec<bool> {
        events
            .iter()
            .filter_map(|e| match e {
                sandlot_client::api::PullEvent::Unpacked { cached, .. } => Some(*cached),
                _ => None,
            })
            .collect()
    };
    assert_eq!(cached(&first), [false, false]);
    assert_eq!(cached(&second), [true, false], "the shared bottom layer was unpacked again");
    let layers = |events: &[sandlot_client::api::PullEvent]| -> Vec<bool> {
        events
            .iter()
            .filter_map(|e| match e {
                sandlot_client::api::PullEvent::Downloaded { cached, .. } => Some(*cached),
                _ => None,
            })
            .collect()
    };
    assert_eq!(layers(&second).iter().filter(|c| **c).count(), 1, "the shared blob was fetched again");

    // A tenant boots the public image by default, without a shell in it.
    let alice = tenant(&server, "alice");
    assert!(alice.images().unwrap().iter().any(|i| i.name == default && i.owner == ImageOwner::Public));
    assert!(alice.images().unwrap().iter().all(|i| !i.name.ends_with("two:1")), "an admin's own image leaked");
    let sb = alice.create(&CreateSandbox::default()).unwrap();
    let info = alice.get(sb.id()).unwrap();
    assert_eq!(info.image, default);
    let r = sb.run(&["/bin/busybox", "cat", "/one"]).unwrap();
    assert_eq!((r.exit_code, r.stdout.as_str()), (0, "1"), "{r:?}");
    let no_shell = sb.exec(&sh("true")).unwrap();
    assert_eq!(no_shell.exit_code, 127, "{no_shell:?}");
    assert!(no_shell.stderr.contains("/bin/sh: command not found"), "{no_shell:?}");
    // Only an admin may publish or delete a public image.
    let req = PullImage { reference: format!("{host}/shared/two:1"), public: true, ..Default::default() };
    expect_error(alice.pull_image(&req), 403, "forbidden");
    expect_error(alice.delete_image(&default), 404, "not_found");
    sb.delete().unwrap();

    // A layer two of a tenant's images share is charged to it once, as the disk holds it once.
    pull(&alice, "shared/one:1", false);
    pull(&alice, "shared/two:1", false);
    let one = alice.image(&format!("{host}/shared/one:1")).unwrap();
    let two = alice.image(&format!("{host}/shared/two:1")).unwrap();
    assert_eq!(one.layers[0].digest, two.layers[0].digest);
    let usage = alice.usage().unwrap();
    assert_eq!(usage.images, 2, "{usage:?}");
    assert_eq!(usage.image_bytes, one.size_bytes + two.size_bytes - one.layers[0].size_bytes, "{usage:?}");
    alice.delete_image(&format!("{host}/shared/one:1")).unwrap();
    assert_eq!(alice.usage().unwrap().image_bytes, two.size_bytes, "the survivor pays for the shared layer");
}

/// A daemon killed in the middle of a pull loses nothing it had acknowledged and keeps no half-made
/// image: the pull is simply done again after the restart, reusing the layers that had arrived.
#[test]
fn a_pull_cut_short_by_kill9_is_retried_after_the_restart() {
    let registry = TestRegistry::start(TestRegistryOptions::default()).unwrap();
    // Big enough that the pull is still running when the daemon dies.
    let big: Vec<u8> = (0..48u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let image = TestImage {
        layers: vec![busybox_rootfs(&[], &[]), sandlot_oci::testing::tar_of(&[("big", &big)])],
        compression: Compression::None,
        config: serde_json::json!({}),
    };
    registry.push("big/app", "1", &image).unwrap();
    let host = registry.host();
    let server = Server::start_with(&["--insecure-registry", &host]);
    let client = server.client();
    let req = PullImage { reference: format!("{host}/big/app:1"), ..Default::default() };
    let mut events = client.pull_image(&req).unwrap();
    // Wait for the first download progress, then kill the daemon.
    for ev in events.by_ref() {
        if matches!(ev.unwrap(), sandlot_client::api::PullEvent::Download { .. }) {
            break;
        }
    }
    let mut server = server;
    server.kill9();
    let server = Server::restart_on(server);
    let client = server.client();
    expect_error(client.image(&req.reference), 404, "not_found");
    let images = client.pull_image(&req).unwrap().wait().unwrap();
    assert_eq!(images[0].layers.len(), 2);
    let sb = client.create(&CreateSandbox { image: Some(req.reference.clone()), ..Default::default() }).unwrap();
    assert_eq!(sb.exec(&sh("wc -c < /big")).unwrap().stdout.trim(), (48u32 << 20).to_string());
    sb.delete().unwrap();
}

/// A blob that does not match its digest fails the pull (retryable: the registry may heal) and stores
/// nothing; an image over the tenant's image quota is refused and its blobs are collected.
#[test]
fn corrupt_blobs_and_quotas_leave_nothing_behind() {
    let registry = TestRegistry::start(TestRegistryOptions::default()).unwrap();
    let image = TestImage {
        layers: vec![busybox_rootfs(&[], &[])],
        compression: Compression::Gzip,
        config: serde_json::json!({}),
    };
    let digest = registry.push("q/app", "1", &image).unwrap();
    registry.push("q/bad", "1", &image).unwrap();
    let host = registry.host();
    let server = Server::start_with(&["--insecure-registry", &host, "--image-quota-mb", "1"]);
    let alice = tenant(&server, "alice");
    let blobs = server.state_dir().join("blobs/sha256");
    let stored = || std::fs::read_dir(&blobs).map(|d| d.count()).unwrap_or(0);

    // The same registry under a name the admin did not list: a loopback address the server refuses to
    // reach for a tenant (no connection is made; nothing reaches the registry's log).
    let port = registry.addr.port();
    let other = PullImage { reference: format!("localhost:{port}/q/app:1"), ..Default::default() };
    let err = alice.pull_image(&other).unwrap().wait().unwrap_err();
    assert_eq!(err.code(), Some("registry_denied"), "{err}");
    assert!(err.to_string().contains(&format!("--allow-private-registry localhost:{port}")), "{err}");

    let req = PullImage { reference: format!("{host}/q/app:1"), ..Default::default() };
    let err = alice.pull_image(&req).unwrap().wait().unwrap_err();
    assert_eq!(err.code(), Some("limit_reached"), "{err}");
    assert!(err.to_string().contains("--image-quota-mb"), "{err}");
    assert_eq!(stored(), 0, "the refused image's blobs were kept");
    assert!(alice.images().unwrap().iter().all(|i| i.name != req.reference));

    // The same bytes under another tag: corrupt its layer in the registry's storage.
    let (layers, _) = image.blobs(&sandlot_oci::Platform::host()).unwrap();
    registry.corrupt_blob(&layers[0].1.digest).unwrap();
    let admin = server.client();
    // Published by the admin, so the quota (1 MiB here) does not stop it before the blob is read.
    let bad = PullImage { reference: format!("{host}/q/bad@{digest}"), public: true, ..Default::default() };
    let err = admin.pull_image(&bad).unwrap().wait().unwrap_err();
    assert_eq!(err.code(), Some("registry_unavailable"), "{err}");
    assert!(err.is_retryable());
    assert_eq!(stored(), 0, "a corrupt blob was stored");
}

/// What an image costs the layers volume is what it is charged (the review's attacks: a 1.5 MiB gzip
/// layer of 200,000 empty files charged 1.5 MiB, 150 `FROM scratch` images charged 29 KiB): each
/// entry's metadata and each layer tree and root count, so a small compressed layer of many empty
/// files is refused part way by the quota; a tenant keeps at most `--max-images-per-tenant` images;
/// and an image's runtime settings (labels, env) are capped, since every listing answers them.
#[test]
fn what_an_image_costs_the_layers_volume_is_charged_and_bounded() {
    let registry = TestRegistry::start(TestRegistryOptions::default()).unwrap();
    let image =
        |layers: Vec<Vec<u8>>, config: serde_json::Value| TestImage { layers, compression: Compression::Gzip, config };
    let small = image(vec![busybox_rootfs(&[], &[]), empty_files(5_000)], serde_json::json!({}));
    registry.push("c/small", "1", &small).unwrap();
    // 30,000 empty files: about 60 MiB charged once unpacked, from a blob of well under 1 MiB.
    let many = image(vec![busybox_rootfs(&[], &[]), empty_files(30_000)], serde_json::json!({}));
    registry.push("c/many", "1", &many).unwrap();
    let labels: serde_json::Map<String, serde_json::Value> =
        (0..2_000).map(|i| (format!("label.{i}"), serde_json::Value::String("v".repeat(64)))).collect();
    let labelled = image(vec![busybox_rootfs(&[], &[])], serde_json::json!({"Labels": labels}));
    registry.push("c/labels", "1", &labelled).unwrap();
    let host = registry.host();
    let server =
        Server::start_with(&["--insecure-registry", &host, "--image-quota-mb", "32", "--max-images-per-tenant", "2"]);
    let alice = tenant(&server, "alice");
    let pull = |name: &str, reference: &str| {
        let req = PullImage { reference: format!("{host}/{reference}"), name: Some(name.into()), ..Default::default() };
        alice.pull_image(&req).unwrap().wait()
    };

    let got = pull("small", "c/small:1").unwrap().remove(0);
    // Two layer trees and a root (1 MiB each) and 5,000 entries (2 KiB each) at the least.
    let floor = 3 * (1 << 20) + 5_000 * 2048;
    assert!(got.size_bytes >= floor, "charged {} bytes, less than the {floor} the volume holds", got.size_bytes);
    let sb = alice.create(&CreateSandbox { image: Some("small".into()), ..Default::default() }).unwrap();
    assert_eq!(sb.exec(&sh("ls /f | wc -l")).unwrap().stdout.trim(), "5000");
    sb.delete().unwrap();

    let err = pull("many", "c/many:1").unwrap_err();
    assert_eq!(err.code(), Some("invalid_request"), "{err}");
    assert!(err.to_string().contains("over the tenant's --image-quota-mb once unpacked"), "{err}");
    assert!(alice.images().unwrap().iter().all(|i| i.name != "many"));

    let err = pull("labels", "c/labels:1").unwrap_err();
    assert!(err.to_string().contains("runtime settings"), "{err}");

    pull("second", "c/small:1").unwrap();
    let err = pull("third", "c/small:1").unwrap_err();
    assert_eq!(err.code(), Some("limit_reached"), "{err}");
    assert!(err.to_string().contains("--max-images-per-tenant"), "{err}");
    // Replacing an image it keeps is no new image.
    pull("second", "c/small:1").unwrap();
    alice.delete_image("second").unwrap();
    pull("third", "c/small:1").unwrap();
}

/// The CLI end to end: `image import -` from stdin, `image ls`, `image inspect`, `run --image` with no
/// command (the image's entrypoint and cmd), `image pull` with plain progress lines off a terminal and
/// the password from stdin, and `image rm`.
#[test]
fn the_image_cli_imports_pulls_lists_runs_and_removes() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let registry = TestRegistry::start(TestRegistryOptions {
        tls: false,
        basic_auth: Some(("ci".into(), "pw-from-stdin".into())),
        token_auth: false,
    })
    .unwrap();
    let image = TestImage {
        layers: vec![busybox_rootfs(&[("greeting", b"hello from cmd\n")], &[])],
        compression: Compression::Gzip,
        config: serde_json::json!({"Entrypoint": ["/bin/busybox"], "Cmd": ["cat", "/greeting"]}),
    };
    registry.push("cli/app", "2", &image).unwrap();
    let host = registry.host();
    let server = Server::start_with(&["--insecure-registry", &host]);
    let cli = |args: &[&str], stdin: &[u8]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandlot"))
            .args(args)
            .env("SANDLOT_URL", server.url())
            .env("SANDLOT_API_KEY", server.admin_key())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = cli(&["image", "import", "--name", "tools", "-"], &busybox_rootfs(&[], &[]));
    assert_eq!((code, out.as_str()), (Some(0), "tools\n"), "{err}");
    let reference = format!("{host}/cli/app:2");
    let (code, out, err) =
        cli(&["image", "pull", &reference, "--username", "ci", "--password-stdin"], b"pw-from-stdin\n");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, format!("{reference}\n"));
    assert!(err.contains("sandlot: resolved sha256:") && err.contains("layer 1: unpacked"), "{err}");
    assert!(!err.contains("pw-from-stdin"));
    let (code, out, _) = cli(&["image", "ls"], b"");
    assert_eq!(code, Some(0));
    assert!(out.lines().any(|l| l.starts_with("tools ")) && out.lines().any(|l| l.starts_with(&reference)), "{out}");
    let (_, out, _) = cli(&["image", "inspect", &reference], b"");
    let inspected: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(inspected["config"]["cmd"], serde_json::json!(["cat", "/greeting"]));
    let (code, out, err) = cli(&["run", "--image", &reference], b"");
    assert_eq!((code, out.as_str()), (Some(0), "hello from cmd\n"), "{err}");
    let (code, _, err) = cli(&["run", "--image", "tools"], b"");
    assert_eq!(code, Some(1));
    assert!(err.contains("no entrypoint or default command"), "{err}");
    let (code, _, _) = cli(&["image", "rm", "tools"], b"");
    assert_eq!(code, Some(0));
    let (code, _, err) = cli(&["image", "inspect", "tools"], b"");
    assert_eq!(code, Some(1));
    assert!(err.contains("not found"), "{err}");
}

/// A registry that serves a manifest and config it wrote and answers 404 for everything else, so the
/// layers it names can only come from what the server already stores.
struct HostileRegistry {
    addr: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HostileRegistry {
    fn start(blobs: Vec<(sandlot_oci::Digest, Vec<u8>)>, manifest: Vec<u8>) -> HostileRegistry {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::SeqCst) {
                let Ok((conn, _)) = listener.accept() else {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    continue;
                };
                conn.set_nonblocking(false).unwrap();
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).map_or(true, |n| n == 0) || h == "\r\n" {
                        break;
                    }
                }
                let found = if path == "/v2/" {
                    Some(("application/json", b"{}".to_vec()))
                } else if path.ends_with("/manifests/1") {
                    Some(("application/vnd.oci.image.manifest.v1+json", manifest.clone()))
                } else {
                    blobs
                        .iter()
                        .find(|(d, _)| path.ends_with(&d.to_string()))
                        .map(|(_, b)| ("application/octet-stream", b.clone()))
                };
                let mut conn = conn;
                let _ = match found {
                    Some((ct, body)) => write!(
                        conn,
                        "HTTP/1.1 200 OK\r\nContent-Type: {ct}\r\nDocker-Content-Digest: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        sandlot_oci::Digest::of(&body),
                        body.len()
                    )
                    .and_then(|()| conn.write_all(&body)),
                    None => conn.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
                };
            }
        });
        HostileRegistry { addr, stop, thread: Some(thread) }
    }
}

impl Drop for HostileRegistry {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Knowing the digests of another tenant's private layers gains nothing. A hostile registry that
/// names alice's layer without serving it gets a 404 pull (the layer is fetched again, not taken from
/// the store); one that serves its own bytes under a config naming alice's diff ids is refused when its
/// blob does not unpack to them (the unpacked tree alice's image made is not reused on its word).
#[test]
fn a_hostile_registry_cannot_borrow_another_tenants_layers() {
    let registry = TestRegistry::start(TestRegistryOptions {
        tls: false,
        basic_auth: Some(("alice".into(), "alice-pw".into())),
        token_auth: false,
    })
    .unwrap();
    let private = TestImage {
        layers: vec![busybox_rootfs(&[("secret", b"alice's secret\n")], &[])],
        compression: Compression::Gzip,
        config: serde_json::json!({}),
    };
    registry.push("alice/private", "1", &private).unwrap();
    let (layers, _) = private.blobs(&sandlot_oci::Platform::host()).unwrap();
    let (layer_digest, diff_id) = (layers[0].1.digest.clone(), sandlot_oci::Digest::of(&private.layers[0]));

    // Bob's registry: a config naming alice's diff id; layer 1 is alice's blob digest (not served),
    // in a second image bob's own bytes.
    let config = |diff: &sandlot_oci::Digest| {
        serde_json::to_vec(&serde_json::json!({
            "architecture": "amd64", "os": "linux", "config": {},
            "rootfs": {"type": "layers", "diff_ids": [diff.to_string()]}
        }))
        .unwrap()
    };
    let manifest = |config: &[u8], layer: &sandlot_oci::Digest, size: usize| {
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": sandlot_oci::Digest::of(config).to_string(), "size": config.len()},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": layer.to_string(), "size": size}]
        }))
        .unwrap()
    };
    let cfg = config(&diff_id);
    let named_only = HostileRegistry::start(
        vec![(sandlot_oci::Digest::of(&cfg), cfg.clone())],
        manifest(&cfg, &layer_digest, layers[0].0.len()),
    );
    let own =
        sandlot_oci::testing::compress(&sandlot_oci::testing::tar_of(&[("x", b"bob")]), Compression::Gzip).unwrap();
    let own_digest = sandlot_oci::Digest::of(&own);
    let own_bytes = HostileRegistry::start(
        vec![(sandlot_oci::Digest::of(&cfg), cfg.clone()), (own_digest.clone(), own.clone())],
        manifest(&cfg, &own_digest, own.len()),
    );
    let (h1, h2) = (named_only.addr.to_string(), own_bytes.addr.to_string());
    let server = Server::start_with(&[
        "--insecure-registry",
        &registry.host(),
        "--insecure-registry",
        &h1,
        "--insecure-registry",
        &h2,
    ]);
    let alice = tenant(&server, "alice");
    let auth = Some(RegistryAuth { username: "alice".into(), password: "alice-pw".into() });
    let req = PullImage { reference: format!("{}/alice/private:1", registry.host()), auth, ..Default::default() };
    alice.pull_image(&req).unwrap().wait().unwrap();

    let bob = tenant(&server, "bob");
    let err = bob
        .pull_image(&PullImage { reference: format!("{h1}/bob/x:1"), ..Default::default() })
        .unwrap()
        .wait()
        .unwrap_err();
    assert_eq!(err.code(), Some("not_found"), "{err}");
    let err = bob
        .pull_image(&PullImage { reference: format!("{h2}/bob/x:1"), ..Default::default() })
        .unwrap()
        .wait()
        .unwrap_err();
    assert!(err.to_string().contains("not to the diff id"), "{err}");
    assert!(bob.images().unwrap().iter().all(|i| i.name == "host"), "bob got an image");
    // Alice pulling her own image again reuses her stored layer.
    let again: Vec<_> = alice.pull_image(&req).unwrap().map(|e| e.unwrap()).collect();
    assert!(again.iter().any(|e| matches!(e, sandlot_client::api::PullEvent::Downloaded { cached: true, .. })));
}
