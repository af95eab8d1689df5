//! Image builds from a Dockerfile, with a per-tenant step cache.
//!
//! A build walks the Dockerfile ([`sandlot_oci::dockerfile`]) keeping an image (layers and config)
//! and a cache key: a sha256 chain that starts at the base image's config digest (or `scratch`) and
//! takes in each instruction as resolved (variables substituted), plus for `COPY`/`ADD` the digest of
//! the layer it makes and for `RUN` the network allow list and build arguments in effect. Instructions
//! that only change the config (`ENV`, `WORKDIR`, `USER`, `CMD`, …) change the config and the key.
//! `COPY`/`ADD` write a layer straight from the uploaded context (no sandbox). A `RUN` whose key the
//! tenant's cache holds takes the cached layer; otherwise it runs in a *build sandbox*: a sandbox of
//! the tenant's (charged, limited and audited as any other) booted from a root made of the current
//! layers, with the build's own network policy (deny unless `allow` names hosts). Its writable layer
//! becomes the step's layer, and the sandbox is deleted whatever happened (a failed command, a
//! client that went away: the build runs detached from the request).
//!
//! Several stages (`FROM … AS name`) are built in order; each starts from its base (an image, or an
//! earlier stage) and the last is the image stored. `COPY --from` reads an earlier stage's (or an
//! image's) layers as a context ([`Context::from_layers`]): nothing of a stage is unpacked on the host
//! for it. Names in `USER` and `--chown` are looked up in the stage's `/etc/passwd` and `/etc/group`,
//! read from its layers the same way.
//!
//! So an unchanged Dockerfile rebuilds without a sandbox: every step is a cache lookup and the final
//! image's root already exists. The cache is per tenant: a hit would otherwise tell one tenant what
//! another built, and hand it another tenant's layer.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use sandlot_api::{BuildEvent, BuildImage, CreateSandbox, ExecEvent, ExitStatus, ImageInfo, NetworkSpec, PullEvent};
use sandlot_engine::driver::{ExportFrom, PrepareEvent};
use sandlot_engine::{ExecSpec, LayerSource};
use sandlot_oci::context::{Context, CopyOptions};
use sandlot_oci::dockerfile::{self, Chown, Command, Instruction, Owner, Vars};
use sandlot_oci::manifest::{self, Descriptor, Manifest};
use sandlot_oci::{BlobStore, Digest, Image, ImageConfig, Layer, Platform};
use sandlot_store::now_ms;
use serde_json::json;
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc::UnboundedSender;

use crate::charges::ImageUpload;
use crate::images::{check_name, check_publish, info, HOST_IMAGE};
use crate::plan::{new_record, Plan};
use crate::{Caller, Control, Error, Kind, Result};

/// The root key of an image with no layers yet (`FROM scratch` before its first layer): the sha256
/// of nothing, which no chain id of a real layer can be.
const EMPTY_ROOT: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
/// Bytes of a failed step's output kept for its error.
const TAIL_BYTES: usize = 2048;
/// `PATH` of a build step when the image sets none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A build that failed: the error, and for a failed step its Dockerfile line and output tail.
#[derive(Debug)]
pub struct BuildFailure {
    /// What went wrong and what to do.
    pub error: Error,
    /// The Dockerfile line of the step that failed.
    pub line: Option<usize>,
    /// The last ~2 KiB of a failed `RUN`'s output.
    pub tail: Option<String>,
}

impl From<Error> for BuildFailure {
    fn from(error: Error) -> Self {
        BuildFailure { error, line: None, tail: None }
    }
}

impl From<sandlot_store::StoreError> for BuildFailure {
    fn from(e: sandlot_store::StoreError) -> Self {
        Error::from(e).into()
    }
}

fn at_line(line: usize, e: Error) -> BuildFailure {
    BuildFailure { error: e, line: Some(line), tail: None }
}

/// What the build cache keeps for one step: the layer it added, if any (stored as the JSON of
/// `Option<Layer>`).
struct StepResult {
    layer: Option<Layer>,
}

impl StepResult {
    fn json(&self) -> String {
        serde_json::to_string(&self.layer).expect("serialisable")
    }
}

/// The image being built.
struct State {
    image: Image,
    key: String,
    /// The stage's name (`FROM … AS name`).
    name: Option<String>,
}

fn chain(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update(b"\n");
    }
    format!("sha256:{}", h.finalize().iter().map(|b| format!("{b:02x}")).collect::<String>())
}

fn empty_image() -> Image {
    let d = Digest::of(b"");
    Image {
        manifest_digest: d.clone(),
        config_digest: d,
        platform: Platform::host(),
        config: ImageConfig { env: vec![format!("PATH={DEFAULT_PATH}")], ..Default::default() },
        layers: vec![],
        created: None,
    }
}

/// A pipe: a blocking writer on one end, the blob store reading the other, so a layer is hashed and
/// stored as it is made, never held whole in memory or in a second file.
fn pipe() -> Result<(File, File)> {
    // Close-on-exec: a child the daemon spawns meanwhile (a btrfs command) must not keep the write
    // end open, or the reader would wait for an end of file that never comes.
    let (r, w): (OwnedFd, OwnedFd) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| Error::internal(format!("making a pipe for a layer: {e}")))?;
    Ok((File::from(r), File::from(w)))
}

fn put_layer(
    blobs: &BlobStore,
    max: u64,
    write: impl FnOnce(File) -> std::result::Result<(), String> + Send,
) -> Result<Layer> {
    let (r, w) = pipe()?;
    let (stored, written) = std::thread::scope(|s| {
        let writer = s.spawn(move || write(w));
        let stored = blobs.put(r, max);
        (stored, writer.join())
    });
    // The store's error first: when it stops reading (a layer over the cap), the writer only sees a
    // broken pipe. A writer that failed leaves a truncated blob no image names (collected later).
    let (digest, size) = stored.map_err(|e| match e {
        sandlot_oci::StoreError::TooLarge { max } => Error::new(
            Kind::TooLarge,
            format!(
                "the layer is over {} MiB (the smaller of --max-import-mb and what the tenant's image quota leaves)",
                max >> 20
            ),
        ),
        e => Error::internal(format!("storing the layer: {e}")),
    })?;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(Error::invalid(e)),
        Err(_) => return Err(Error::internal("the layer writer panicked")),
    }
    Ok(Layer { diff_id: digest.clone(), digest, size, media_type: manifest::OCI_LAYER_TAR.to_string() })
}

fn set_env(config: &mut ImageConfig, k: &str, v: &str) {
    let entry = format!("{k}={v}");
    match config.env.iter_mut().find(|e| e.split_once('=').is_some_and(|(n, _)| n == k)) {
        Some(e) => *e = entry,
        None => config.env.push(entry),
    }
}

/// The most bytes of `/etc/passwd` or `/etc/group` a build reads to resolve a name.
const MAX_ACCOUNTS_BYTES: u64 = 4 << 20;

/// `/etc/passwd` and `/etc/group` of the image `layers` make (empty when it has none), read from the
/// layers without unpacking them.
fn account_files(blobs: &BlobStore, layers: &[Layer]) -> Result<(String, String)> {
    let wanted = ["etc/passwd".to_string(), "etc/group".to_string()];
    let (ctx, names) = Context::from_layers(
        |i| blobs.open_blob(&layers[i].digest),
        layers.len(),
        &wanted,
        blobs.scratch_file().map_err(|e| Error::internal(format!("a scratch file in the blob store: {e}")))?,
        2 * MAX_ACCOUNTS_BYTES,
    )
    .map_err(|e| Error::invalid(format!("reading the image's accounts: {e}")))?;
    let read = |name: &str| -> Result<String> {
        let bytes = ctx.read_file(name, MAX_ACCOUNTS_BYTES).map_err(|e| Error::invalid(e.to_string()))?;
        Ok(String::from_utf8_lossy(&bytes.unwrap_or_default()).into_owned())
    };
    Ok((read(&names[0])?, read(&names[1])?))
}

/// The ids `owner` names in the image `layers` make: numbers as they are, names looked up in its
/// account files (read only when a name needs them).
async fn resolve_owner(blobs: &Arc<BlobStore>, layers: &[Layer], owner: &Owner, chown: bool) -> Result<Chown> {
    let (passwd, group) = if owner.names_an_account() {
        let (blobs, layers) = (Arc::clone(blobs), layers.to_vec());
        tokio::task::spawn_blocking(move || account_files(&blobs, &layers))
            .await
            .map_err(|e| Error::internal(format!("the accounts task: {e}")))??
    } else {
        Default::default()
    };
    owner.resolve(&passwd, &group, chown).map_err(Error::invalid)
}

/// The OCI config blob of `image` with `diff_ids`: no timestamps, so an unchanged build has the same
/// config digest (and so the same root, made once).
fn config_blob(image: &Image, diff_ids: &[Digest]) -> Vec<u8> {
    let c = &image.config;
    let ports: BTreeMap<&str, serde_json::Value> = c.exposed_ports.iter().map(|p| (p.as_str(), json!({}))).collect();
    let mut config = json!({
        "Env": c.env,
        "Labels": c.labels,
        "ExposedPorts": ports,
    });
    if let Some(w) = &c.working_dir {
        config["WorkingDir"] = json!(w);
    }
    if let Some(u) = &c.user {
        config["User"] = json!(u);
    }
    if let Some(e) = &c.entrypoint {
        config["Entrypoint"] = json!(e);
    }
    if let Some(cmd) = &c.cmd {
        config["Cmd"] = json!(cmd);
    }
    let mut value = json!({
        "architecture": image.platform.architecture,
        "os": image.platform.os,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    if let Some(v) = &image.platform.variant {
        value["variant"] = json!(v);
    }
    serde_json::to_vec(&value).expect("a JSON value serialises")
}

/// Writes `image`'s config and manifest blobs; returns the image as stored.
fn finish_image(blobs: &BlobStore, image: &Image) -> Result<Image> {
    let diff_ids: Vec<Digest> = image.layers.iter().map(|l| l.diff_id.clone()).collect();
    let config = config_blob(image, &diff_ids);
    let parsed = manifest::parse_config(&config).map_err(|e| Error::internal(format!("the built config: {e}")))?;
    let put = |bytes: &[u8]| blobs.put_bytes(bytes).map_err(|e| Error::internal(format!("storing the image: {e}")));
    let config_desc = Descriptor {
        media_type: manifest::OCI_CONFIG.into(),
        digest: put(&config)?,
        size: config.len() as u64,
        platform: None,
        annotations: Default::default(),
    };
    let layers: Vec<Descriptor> = image
        .layers
        .iter()
        .map(|l| Descriptor {
            media_type: l.media_type.clone(),
            digest: l.digest.clone(),
            size: l.size,
            platform: None,
            annotations: Default::default(),
        })
        .collect();
    let bytes = manifest::write_oci_manifest(&config_desc, &layers);
    let digest = put(&bytes)?;
    manifest::image(digest, &Manifest { config: config_desc, layers }, parsed)
        .map_err(|e| Error::internal(format!("the built manifest: {e}")))
}

impl Control {
    /// `POST /v1/images/build`: builds the Dockerfile of the build context in `context` (a tar the
    /// surface spooled) and stores the image as the caller's `req.name`, reporting each step and
    /// each `RUN`'s output on `events` as it goes. Whatever the outcome, what it stored and no image
    /// names (a failed build's layers) is collected afterwards.
    pub async fn build_image(
        self: &Arc<Self>,
        caller: &Caller,
        req: BuildImage,
        upload: ImageUpload,
        context: File,
        events: UnboundedSender<BuildEvent>,
    ) -> std::result::Result<ImageInfo, BuildFailure> {
        let built = self.build_steps(caller, req, upload, context, events).await;
        if built.is_err() {
            self.collect_in_background();
        }
        built
    }

    async fn build_steps(
        self: &Arc<Self>,
        caller: &Caller,
        req: BuildImage,
        mut upload: ImageUpload,
        context: File,
        events: UnboundedSender<BuildEvent>,
    ) -> std::result::Result<ImageInfo, BuildFailure> {
        let images = self.images()?;
        check_name(&req.name)?;
        check_publish(caller, req.public)?;
        let t0 = std::time::Instant::now();
        // Checked before anything runs: a bad limit or allow entry fails the build at once.
        let limits = self.limits(&CreateSandbox {
            memory_mb: req.memory_mb,
            cpu: req.cpu,
            timeout_s: req.timeout_s,
            ..Default::default()
        })?;
        let network = NetworkSpec {
            mode: if req.allow.is_empty() { sandlot_api::Mode::Deny } else { sandlot_api::Mode::Allowlist },
            allow: req.allow.clone(),
            ..Default::default()
        };
        self.policy_for(&caller.tenant, &network)?;
        let file = req.file.clone().unwrap_or_else(|| "Dockerfile".into());
        let (context, raws) = tokio::task::spawn_blocking(move || -> Result<_> {
            let mut context = Context::open(context).map_err(|e| Error::invalid(e.to_string()))?;
            let text = context
                .read_file(&file, dockerfile::MAX_DOCKERFILE_BYTES as u64)
                .map_err(|e| Error::invalid(e.to_string()))?
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "the build context has no {file:?}: add it, or name the Dockerfile with `file`"
                    ))
                })?;
            let text = String::from_utf8(text).map_err(|_| Error::invalid(format!("{file} is not UTF-8 text")))?;
            let raws = dockerfile::parse(&text).map_err(|e| Error::invalid(e.to_string()))?;
            context.apply_dockerignore().map_err(|e| Error::invalid(e.to_string()))?;
            Ok((Arc::new(context), raws))
        })
        .await
        .map_err(|e| Error::internal(format!("reading the build context: {e}")))??;

        // The context was capped at what the tenant's quota left while it arrived; from here on the
        // quota is charged the layers the build writes (the context file is one of at most
        // MAX_BUILDS_PER_TENANT a tenant holds, and goes with the build).
        upload.charge.release();
        // Held shared for the whole build: a collection must not take a root or layer the build made
        // before the image that uses it is recorded.
        let _shared = images.collection_lock().read().await;
        // The layers a build writes are charged to the tenant's image quota as they are written, with
        // its context and whatever else of the tenant's is in flight, so a build cannot fill the blob
        // store on the way to an image it could never keep.
        let charge = |upload: &mut ImageUpload, size: u64, line: usize| -> std::result::Result<(), BuildFailure> {
            upload.charge.in_blobs();
            upload.charge.add(size, upload.room).map_err(|total| {
                at_line(
                    line,
                    Error::limit(format!(
                        "the build's layers would take the tenant's images to {} MiB, past its image quota \
                         (--image-quota-mb); delete images (sandlot image rm) and retry",
                        total.div_ceil(1 << 20)
                    )),
                )
            })
        };
        let mut vars = Vars::new(req.build_args.clone());
        let mut state: Option<State> = None;
        // Which paths of the image so far are directories: read from its layers the first time a
        // `COPY` needs it (a destination without a trailing `/`), then kept up with the layers after.
        let mut dirs = DirIndex::default();
        let mut cmd_set_here = false;
        let mut sandboxes = 0u32;
        // The stages before the current one.
        let mut stages: Vec<State> = Vec::new();
        let allow = serde_json::to_string(&req.allow).expect("serialisable");
        for (index, raw) in raws.iter().enumerate() {
            let line = raw.line;
            let text = format!("{} {}", raw.keyword, raw.args);
            let ins = vars.resolve(raw).map_err(|e| at_line(line, Error::invalid(e.to_string())))?;
            let normalised = serde_json::to_string(&ins).expect("serialisable");
            let step = |cached: bool| {
                let _ = events.send(BuildEvent::Step { index, line, instruction: text.clone(), cached });
            };
            // Before the first FROM only ARGs come (the parser checked). A FROM ends the stage before
            // it and starts the next from an image or an earlier stage.
            if let Instruction::From { image, stage } = &ins {
                stages.extend(state.take());
                // Stage names are case-insensitive (kept lower case); image names are not.
                let as_stage = image.to_ascii_lowercase();
                let (base, key) = match stages.iter().rev().find(|s| s.name.as_deref() == Some(as_stage.as_str())) {
                    Some(earlier) => (earlier.image.clone(), earlier.key.clone()),
                    None => self.base_image(caller, image).map_err(|e| at_line(line, e))?,
                };
                vars.set_base(&base.config.env, base.config.working_dir.as_deref());
                state = Some(State { image: base, key: chain(&[&key]), name: stage.clone() });
                dirs = DirIndex::default();
                cmd_set_here = false;
                // Nothing to build: "cached" unless the build was asked to take nothing from the cache.
                step(!req.no_cache);
                continue;
            }
            let Some(st) = state.as_mut() else {
                step(!req.no_cache);
                continue;
            };
            st.key = chain(&[&st.key, &normalised]);
            let c = &mut st.image.config;
            match ins {
                Instruction::From { .. } => unreachable!("FROM is taken above"),
                Instruction::Arg { .. } => {}
                Instruction::Env(pairs) => pairs.iter().for_each(|(k, v)| set_env(c, k, v)),
                Instruction::Workdir(w) => {
                    c.working_dir = Some(w.clone());
                    // The directory is made in a layer of its own when the image lacks it, as Docker and
                    // buildah do: an image whose last WORKDIR was never used by a RUN still starts there.
                    dirs = dirs
                        .caught_up(Arc::clone(images.blobs()), &st.image.layers)
                        .await
                        .map_err(|e| at_line(line, e))?;
                    let missing: Vec<String> = {
                        let parts: Vec<&str> = w.split('/').filter(|p| !p.is_empty()).collect();
                        (1..=parts.len()).map(|n| parts[..n].join("/")).filter(|p| !dirs.known.is_dir(p)).collect()
                    };
                    if !missing.is_empty() {
                        let blobs = Arc::clone(images.blobs());
                        let layer = tokio::task::spawn_blocking(move || {
                            put_layer(&blobs, 1 << 20, move |w| {
                                sandlot_oci::context::directories_layer(&missing, w).map_err(|e| e.to_string())
                            })
                        })
                        .await
                        .map_err(|e| Error::internal(format!("the workdir task: {e}")))?
                        .map_err(|e| at_line(line, e))?;
                        charge(&mut upload, layer.size, line)?;
                        st.key = chain(&[&st.key, layer.digest.as_str()]);
                        st.image.layers.push(layer);
                    }
                }
                Instruction::User(u) => c.user = Some(u),
                Instruction::Label(pairs) => c.labels.extend(pairs),
                Instruction::Cmd(cmd) => {
                    c.cmd = Some(cmd.argv());
                    cmd_set_here = true;
                }
                Instruction::Entrypoint(e) => {
                    c.entrypoint = Some(e.argv());
                    // Docker's rule: an ENTRYPOINT resets a CMD inherited from the base image.
                    if !cmd_set_here {
                        c.cmd = None;
                    }
                }
                Instruction::Expose(ports) => {
                    c.exposed_ports.extend(ports);
                    c.exposed_ports.sort();
                    c.exposed_ports.dedup();
                }
                Instruction::Copy { sources, mut dest, from, chown, chmod, .. } => {
                    // Docker's rule: an existing directory receives the file inside it, as a
                    // destination ending in `/` does (`WORKDIR /app` + `COPY requirements.txt /app`).
                    dirs = dirs
                        .caught_up(Arc::clone(images.blobs()), &st.image.layers)
                        .await
                        .map_err(|e| at_line(line, e))?;
                    let dest_exists = dirs.known.is_dir(&dest);
                    if dest_exists && !dest.ends_with('/') {
                        dest.push('/');
                    }
                    let chown = match chown {
                        Some(owner) => Some(
                            resolve_owner(images.blobs(), &st.image.layers, &owner, true)
                                .await
                                .map_err(|e| at_line(line, e))?,
                        ),
                        None => None,
                    };
                    let opts = CopyOptions { chown, chmod, make_dest: !dest_exists };
                    // `--from`: an earlier stage by name or index, else an image of the tenant's.
                    let from_layers = match from {
                        None => None,
                        // Docker refuses this as a circular dependency; read as an image it would copy
                        // from some other image of that name.
                        Some(f) if st.name.as_deref() == Some(f.to_ascii_lowercase().as_str()) => {
                            return Err(at_line(
                                line,
                                Error::invalid(format!(
                                "COPY --from={f} names the stage it is in: a stage copies only from stages before it"
                            )),
                            ))
                        }
                        Some(f) => Some(
                            match stages.iter().position(|s| s.name.as_deref() == Some(f.to_ascii_lowercase().as_str()))
                            {
                                Some(i) => stages[i].image.layers.clone(),
                                None => match f.parse::<usize>() {
                                    Ok(i) if i < stages.len() => stages[i].image.layers.clone(),
                                    Ok(i) => {
                                        return Err(at_line(
                                            line,
                                            Error::invalid(format!(
                                                "COPY --from={i}: there are {} stages before this one (counted from 0)",
                                                stages.len()
                                            )),
                                        ))
                                    }
                                    Err(_) => self.base_image(caller, &f).map_err(|e| at_line(line, e))?.0.layers,
                                },
                            },
                        ),
                    };
                    let left = upload.room.saturating_sub(images.charges.held(&caller.tenant));
                    let max = self.max_import_bytes().min(left);
                    let (blobs, ctx) = (Arc::clone(images.blobs()), Arc::clone(&context));
                    let layer = tokio::task::spawn_blocking(move || {
                        // A stage's files are spooled apart from its layers, counted against the same bound.
                        let staged = match &from_layers {
                            None => None,
                            Some(layers) => {
                                let spool = blobs.scratch_file().map_err(|e| Error::internal(e.to_string()))?;
                                let open = |i: usize| blobs.open_blob(&layers[i].digest);
                                let (stage, resolved) = Context::from_layers(open, layers.len(), &sources, spool, max)
                                    .map_err(|e| Error::invalid(e.to_string()))?;
                                Some((stage, resolved))
                            }
                        };
                        let (ctx, sources): (&Context, &[String]) = match &staged {
                            Some((stage, resolved)) => (stage, resolved),
                            None => (&ctx, &sources),
                        };
                        put_layer(&blobs, max, move |w| {
                            let mut w = std::io::BufWriter::with_capacity(1 << 20, w);
                            ctx.copy_layer(sources, &dest, opts, &mut w).map_err(|e| e.to_string())?;
                            w.flush().map_err(|e| e.to_string())
                        })
                    })
                    .await
                    .map_err(|e| Error::internal(format!("the copy task: {e}")))?;
                    // Cut short by the quota rather than by --max-import-mb: say so, as a limit.
                    let quota_bound = max < self.max_import_bytes();
                    let layer = match layer {
                        Err(e) if e.kind == Kind::TooLarge && quota_bound => {
                            return Err(charge(&mut upload, max.saturating_add(1), line).unwrap_err())
                        }
                        r => r.map_err(|e| at_line(line, e))?,
                    };
                    charge(&mut upload, layer.size, line)?;
                    st.key = chain(&[&st.key, layer.digest.as_str()]);
                    let cached = !req.no_cache && self.store.build_step(&caller.tenant, &st.key)?.is_some();
                    self.store.put_build_step(
                        &caller.tenant,
                        &st.key,
                        &StepResult { layer: Some(layer.clone()) }.json(),
                        now_ms(),
                    )?;
                    st.image.layers.push(layer);
                    step(cached);
                    continue;
                }
                Instruction::Run(cmd) => {
                    let run_args = vars.run_args();
                    st.key = chain(&[&st.key, &allow, &serde_json::to_string(&run_args).expect("serialisable")]);
                    let hit = match req.no_cache {
                        true => None,
                        false => self.cached_step(&caller.tenant, &st.key)?,
                    };
                    if let Some(result) = hit {
                        // Later steps' keys name this step's content too, as COPY's do.
                        if let Some(l) = &result.layer {
                            st.key = chain(&[&st.key, l.digest.as_str()]);
                        }
                        st.image.layers.extend(result.layer);
                        step(true);
                        continue;
                    }
                    step(false);
                    let user = match st.image.config.user.as_deref().filter(|u| !u.is_empty()) {
                        None => Chown { uid: 0, gid: 0 },
                        Some(u) => resolve_owner(images.blobs(), &st.image.layers, &Owner::parse(u), false)
                            .await
                            .map_err(|e| at_line(line, Error::invalid(format!("RUN as USER {u}: {}", e.message))))?,
                    };
                    sandboxes += 1;
                    let layer = self
                        .run_step(caller, &req, limits.clone(), &network, st, &cmd, &run_args, user, line, &events)
                        .await?;
                    self.store.put_build_step(
                        &caller.tenant,
                        &st.key,
                        &StepResult { layer: layer.clone() }.json(),
                        now_ms(),
                    )?;
                    if let Some(l) = &layer {
                        charge(&mut upload, l.size, line)?;
                        st.key = chain(&[&st.key, l.digest.as_str()]);
                    }
                    st.image.layers.extend(layer);
                    continue;
                }
            }
            // A config-only step: "cached" when this exact prefix was built before.
            let cached = !req.no_cache && self.store.build_step(&caller.tenant, &st.key)?.is_some();
            self.store.put_build_step(&caller.tenant, &st.key, &StepResult { layer: None }.json(), now_ms())?;
            step(cached);
        }
        let st = state.ok_or_else(|| Error::invalid("the Dockerfile has no FROM"))?;
        let blobs = Arc::clone(images.blobs());
        let image = {
            let image = st.image;
            tokio::task::spawn_blocking(move || finish_image(&blobs, &image))
                .await
                .map_err(|e| Error::internal(format!("the image task: {e}")))??
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let forward = {
            let events = events.clone();
            tokio::spawn(async move {
                while let Some(e) = rx.recv().await {
                    let _ = events.send(match e {
                        PullEvent::Unpacking { index } => BuildEvent::Unpacking { index },
                        PullEvent::Unpacked { index, cached, .. } => BuildEvent::Unpacked { index, cached },
                        _ => continue,
                    });
                }
            })
        };
        let stored = self.store_image(caller, &req.name, None, image, req.public, &tx, &mut upload.charge).await;
        drop(tx);
        let _ = forward.await;
        let row = stored?;
        self.audit(
            &caller.tenant,
            None,
            "image.build",
            &json!({"name": req.name, "digest": row.digest, "steps": raws.len(), "sandboxes": sandboxes,
                    "no_cache": req.no_cache, "allow": req.allow, "unused_build_args": vars.unused_build_args(),
                    "ms": t0.elapsed().as_secs_f64() * 1000.0}),
        )?;
        drop(_shared);
        self.collect_in_background();
        Ok(info(&row)?)
    }

    /// The image a `FROM` names, and the start of its cache key (its config digest, or `scratch`).
    fn base_image(&self, caller: &Caller, name: &str) -> Result<(Image, String)> {
        if name == "scratch" {
            return Ok((empty_image(), "scratch".into()));
        }
        if name == HOST_IMAGE {
            return Err(Error::invalid(
                "FROM host: `host` is the host's /usr and cannot be part of an image; build FROM an OCI image or scratch",
            ));
        }
        let row = self.image_row(caller, name)?.ok_or_else(|| {
            Error::invalid(format!(
                "FROM {name}: unknown image; pull or import it first (GET /v1/images lists what you have)"
            ))
        })?;
        let image: Image = serde_json::from_str(&row.image)
            .map_err(|e| Error::internal(format!("stored image {name} is unreadable: {e}")))?;
        Ok((image.clone(), image.config_digest.to_string()))
    }

    /// The cached result of step `key`, if the tenant has one whose layer is still stored.
    fn cached_step(&self, tenant: &str, key: &str) -> Result<Option<StepResult>> {
        let Some(json) = self.store.build_step(tenant, key)? else { return Ok(None) };
        let Ok(layer) = serde_json::from_str::<Option<Layer>>(&json) else { return Ok(None) };
        let result = StepResult { layer };
        let blobs = self.images()?.blobs();
        // A layer collected since (its image deleted) makes the entry a miss, not a broken image.
        Ok(result.layer.as_ref().map_or(true, |l| blobs.contains(&l.digest)).then_some(result))
    }

    /// Runs one `RUN` in a build sandbox over the current layers; returns the layer it made.
    #[allow(clippy::too_many_arguments)]
    async fn run_step(
        self: &Arc<Self>,
        caller: &Caller,
        req: &BuildImage,
        limits: sandlot_api::Limits,
        network: &NetworkSpec,
        st: &State,
        cmd: &Command,
        run_args: &BTreeMap<String, String>,
        user: Chown,
        line: usize,
        events: &UnboundedSender<BuildEvent>,
    ) -> std::result::Result<Option<Layer>, BuildFailure> {
        let images = self.images()?;
        // The root of the layers so far, named by what they hold (the chain id of their diff ids), never
        // by the step's cache key: the key says which instructions ran, not what they wrote, and roots
        // are shared by every tenant.
        let diff_ids: Vec<String> = st.image.layers.iter().map(|l| l.diff_id.to_string()).collect();
        let root_key = sandlot_engine::driver::chain_ids(&diff_ids).pop().unwrap_or_else(|| EMPTY_ROOT.to_string());
        // The layers so far unpack within what the tenant's image quota leaves (they are its image's).
        let budget = self.image_budget(caller, &req.name, false).map_err(|e| at_line(line, e))?;
        let forward = events.clone();
        let prepared = self
            .prepare_root(images, &caller.tenant, &root_key, &st.image.layers, budget, move |e| {
                let _ = forward.send(match e {
                    PrepareEvent::Unpacking { index, .. } => BuildEvent::Unpacking { index },
                    PrepareEvent::Unpacked { index, report } => {
                        BuildEvent::Unpacked { index, cached: report.is_none() }
                    }
                });
            })
            .await;
        prepared.map_err(|e| at_line(line, Error::invalid(format!("the image so far cannot be unpacked: {e}"))))?;

        let mut rec = new_record(&caller.tenant, &format!("build:{}", req.name), limits.clone(), &BTreeMap::new());
        rec.image_key = Some(root_key);
        rec.network = network.clone();
        rec.info.network = network.info(0, 0);
        rec.info.metadata.insert("build".into(), req.name.clone());
        rec.info.metadata.insert("build_line".into(), line.to_string());
        let id = rec.info.id.clone();
        // A RUN is an exec like any other for the audit log (its command line; build args are in its
        // environment, whose values never reach the log).
        let mut row = sandlot_store::audit_argv(&cmd.argv());
        row["build"] = json!(req.name);
        row["line"] = json!(line);
        row["user"] = json!(user.uid);
        // Detached: a client that goes away mid-step must not leave the build sandbox behind.
        let this = Arc::clone(self);
        let (st_image, cmd, run_args) = (st.image.clone(), cmd.clone(), run_args.clone());
        let events = events.clone();
        let timeout_s = limits.timeout_s;
        let tenant = caller.tenant.clone();
        tokio::spawn(async move {
            let started = this.start_record(Plan { rec, source: LayerSource::Fresh, policy: None }).await;
            if started.is_ok() {
                let _ = this.audit(&tenant, Some(&id), "exec", &row);
            }
            let outcome = match started {
                Ok(_) => this.run_in(&id, &st_image, &cmd, &run_args, user, timeout_s, line, &events).await,
                Err(e) => Err(at_line(line, e)),
            };
            let layer = match outcome {
                Ok(()) => this.export_step(&tenant, &id, line).await,
                Err(e) => Err(e),
            };
            // Whatever happened: the build sandbox goes (its record stays, `deleted`, for the audit log).
            if let Ok(Some(rec)) = this.store.get_sandbox_any(&tenant, &id) {
                if let Err(e) = this.remove(&rec, "sandbox.delete", Some("build step finished")).await {
                    tracing::warn!(sandbox = %id, "removing a build sandbox: {}", e.message);
                }
            }
            layer
        })
        .await
        .map_err(|e| Error::internal(format!("the build step task: {e}")))?
    }

    /// Runs the step's command in build sandbox `id` and streams its output; a failure carries the
    /// output's tail.
    #[allow(clippy::too_many_arguments)]
    async fn run_in(
        &self,
        id: &str,
        image: &Image,
        cmd: &Command,
        run_args: &BTreeMap<String, String>,
        user: Chown,
        timeout_s: u64,
        line: usize,
        events: &UnboundedSender<BuildEvent>,
    ) -> std::result::Result<(), BuildFailure> {
        let sb = self.engine.get(id).ok_or_else(|| at_line(line, Error::internal("the build sandbox is gone")))?;
        let cwd = image.config.working_dir.clone().filter(|w| w.starts_with('/')).unwrap_or_else(|| "/".into());
        // WORKDIR makes its directory when a step first needs it, as Docker does.
        if cwd != "/" {
            sb.mkdir(&cwd, 0, sandlot_engine::MkdirMode::Parents)
                .await
                .map_err(|e| at_line(line, Error::invalid(format!("WORKDIR {cwd} cannot be made: {e}"))))?;
        }
        let home = if user.uid == 0 { "/root" } else { "/" };
        let mut env: BTreeMap<String, String> = [("PATH", DEFAULT_PATH), ("HOME", home)]
            .into_iter()
            .chain(self.engine.tls_env().iter().copied())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.extend(image.config.env.iter().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())));
        env.extend(run_args.clone());
        let spec = ExecSpec {
            argv: cmd.argv(),
            env: env.into_iter().collect(),
            cwd,
            uid: user.uid,
            gid: Some(user.gid),
            timeout_ms: Some(timeout_s * 1000),
            stdin: None,
            keep_stdin: false,
            max_output: self.cfg.max_output_bytes as usize,
            scrollback: false,
            pty: None,
            meta: sandlot_engine::ProcessMeta::default(),
        };
        let proc = sb.spawn(spec).await.map_err(|e| at_line(line, Error::from(e)))?;
        let mut follow = proc.follow();
        let mut tail = String::new();
        let mut keep = |data: &str| {
            tail.push_str(data);
            if tail.len() > 2 * TAIL_BYTES {
                let mut cut = tail.len() - TAIL_BYTES;
                while !tail.is_char_boundary(cut) {
                    cut += 1;
                }
                tail.drain(..cut);
            }
        };
        let mut ended = None;
        while let Some(ev) = follow.next().await {
            match ev {
                ExecEvent::Stdout { data } => {
                    keep(&data);
                    let _ = events.send(BuildEvent::Output { stream: "stdout".into(), data });
                }
                ExecEvent::Stderr { data } => {
                    keep(&data);
                    let _ = events.send(BuildEvent::Output { stream: "stderr".into(), data });
                }
                ExecEvent::Exited { status, exit_code, .. } => ended = Some((status, exit_code)),
                _ => {}
            }
        }
        let tail = {
            let mut cut = tail.len().saturating_sub(TAIL_BYTES);
            while !tail.is_char_boundary(cut) {
                cut += 1;
            }
            tail[cut..].to_string()
        };
        let why = match ended {
            Some((ExitStatus::Exited, 0)) => return Ok(()),
            Some((ExitStatus::Exited, code)) => format!("exited with status {code}"),
            Some((ExitStatus::Timeout, _)) => format!("ran past its {timeout_s} s limit (timeout_s)"),
            Some((ExitStatus::Oom, _)) => "ran out of memory (memory_mb)".to_string(),
            Some((s, code)) => format!("ended {} (exit code {code})", s.as_str()),
            None => "ended without an exit status".to_string(),
        };
        Err(BuildFailure {
            error: Error::invalid(format!("Dockerfile line {line}: RUN {why}; no image was stored")),
            line: Some(line),
            tail: Some(tail),
        })
    }

    /// Stops build sandbox `id` and stores its writable layer as a blob.
    async fn export_step(
        &self,
        tenant: &str,
        id: &str,
        line: usize,
    ) -> std::result::Result<Option<Layer>, BuildFailure> {
        let images = self.images()?;
        let rec = self
            .store
            .get_sandbox_any(tenant, id)?
            .ok_or_else(|| Error::internal("the build sandbox's record is gone"))?;
        // Stopped first: no process may write the layer while it is read.
        let rec = self.stop(&rec, Some("build step finished")).await?;
        let slot = rec.slot;
        let (r, w) = pipe()?;
        let export = self.engine.export_layer(ExportFrom::Sandbox { id: id.to_string(), slot }, w);
        let (blobs, max) = (Arc::clone(images.blobs()), self.max_import_bytes());
        let store = tokio::task::spawn_blocking(move || blobs.put(r, max));
        let (exported, stored) = tokio::join!(export, store);
        let report = exported.map_err(|e| at_line(line, Error::from(e)))?;
        let (digest, size) = stored
            .map_err(|e| Error::internal(format!("the layer task: {e}")))?
            .map_err(|e| at_line(line, Error::new(Kind::TooLarge, format!("the step's layer: {e}"))))?;
        if !report.skipped.is_empty() || !report.remapped.is_empty() {
            tracing::info!(
                sandbox = id,
                "build layer: left out {:?}, owners outside the range {:?}",
                report.skipped,
                report.remapped
            );
        }
        Ok(Some(Layer { diff_id: digest.clone(), digest, size, media_type: manifest::OCI_LAYER_TAR.to_string() }))
    }
}

impl Control {
    /// `POST /v1/snapshots/{id}/image`: the caller's snapshot `snapshot` as an image `name`: the image
    /// its sandbox booted with the snapshot's writable layer on top (a template from a configured
    /// sandbox).
    pub async fn snapshot_image(self: &Arc<Self>, caller: &Caller, snapshot: &str, name: &str) -> Result<ImageInfo> {
        let images = self.images()?;
        check_name(name)?;
        let (snap, owner) = self
            .store
            .get_snapshot(&caller.tenant, snapshot)?
            .ok_or_else(|| Error::not_found(&format!("snapshot {snapshot}")))?;
        let Some(key) = self.store.snapshot_image_key(&snap.id)? else {
            return Err(Error::invalid(
                "`host` is the host's /usr and cannot be part of an image; make the sandbox from an OCI image                  (`image` in POST /v1/sandboxes), configure it, and snapshot that",
            ));
        };
        let parent = self.store.image_root_image(&key)?.ok_or_else(|| {
            Error::invalid(format!(
                "the image snapshot {snapshot} was taken over was stored without its layers (by an older server);                  pull or import it again and make the sandbox anew"
            ))
        })?;
        let mut image: Image = serde_json::from_str(&parent)
            .map_err(|e| Error::internal(format!("the stored image of root {key} is unreadable: {e}")))?;
        let _shared = images.collection_lock().read().await;
        let (r, w) = pipe()?;
        let export = self.engine.export_layer(ExportFrom::Snapshot { id: snap.id.clone(), owner }, w);
        // At most what the tenant's quota leaves: the layer is on disk before the image is recorded.
        let max = self.max_import_bytes().min(self.image_budget(caller, name, false)?);
        let blobs = Arc::clone(images.blobs());
        let store = tokio::task::spawn_blocking(move || blobs.put(r, max));
        let (exported, stored) = tokio::join!(export, store);
        let report = exported?;
        let (digest, size) = stored
            .map_err(|e| Error::internal(format!("the layer task: {e}")))?
            .map_err(|e| Error::new(Kind::TooLarge, format!("the snapshot's layer: {e}")))?;
        image.layers.push(Layer { diff_id: digest.clone(), digest, size, media_type: manifest::OCI_LAYER_TAR.into() });
        let blobs = Arc::clone(images.blobs());
        let image = tokio::task::spawn_blocking(move || finish_image(&blobs, &image))
            .await
            .map_err(|e| Error::internal(format!("the image task: {e}")))??;
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut charge = images.charges.charge(&caller.tenant);
        let row = self.store_image(caller, name, None, image, false, &tx, &mut charge).await?;
        self.audit(
            &caller.tenant,
            Some(&snap.sandbox_id),
            "image.from_snapshot",
            &json!({"name": name, "snapshot": snap.id, "digest": row.digest,
                    "left_out": report.skipped, "owners_remapped": report.remapped}),
        )?;
        drop(_shared);
        self.collect_in_background();
        info(&row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_key_chains_every_part_in_order() {
        assert_ne!(chain(&["a", "b"]), chain(&["b", "a"]));
        assert_ne!(chain(&["ab"]), chain(&["a", "b"]));
        assert!(chain(&["scratch"]).starts_with("sha256:"));
        assert_eq!(chain(&["x"]).len(), 7 + 64);
    }

    #[test]
    fn an_unchanged_image_has_the_same_config_blob() {
        let mut image = empty_image();
        image.config.exposed_ports = vec!["80/tcp".into()];
        image.config.cmd = Some(vec!["/bin/sh".into()]);
        let a = config_blob(&image, &[]);
        assert_eq!(a, config_blob(&image, &[]));
        let parsed = manifest::parse_config(&a).unwrap();
        assert_eq!(parsed.config.exposed_ports, ["80/tcp"]);
        assert_eq!(parsed.config.cmd, image.config.cmd);
    }
}

/// The directories of an image being built (`LayerDirs`), with how many of its layers are applied.
#[derive(Default)]
struct DirIndex {
    known: sandlot_oci::layer_dirs::LayerDirs,
    applied: usize,
}

impl DirIndex {
    /// The index with every layer of `layers` applied (reading only those it had not seen).
    async fn caught_up(
        mut self,
        blobs: Arc<sandlot_oci::BlobStore>,
        layers: &[sandlot_oci::image::Layer],
    ) -> Result<DirIndex> {
        let pending: Vec<sandlot_oci::Digest> = layers.iter().skip(self.applied).map(|l| l.digest.clone()).collect();
        tokio::task::spawn_blocking(move || {
            for digest in pending {
                let blob = blobs.open_blob(&digest).map_err(|e| Error::internal(format!("layer {digest}: {e}")))?;
                self.known
                    .apply(blob)
                    .map_err(|e| Error::invalid(format!("layer {digest} is not a tar this build can read: {e}")))?;
                self.applied += 1;
            }
            Ok(self)
        })
        .await
        .map_err(|e| Error::internal(format!("reading the image's layers: {e}")))?
    }
}
