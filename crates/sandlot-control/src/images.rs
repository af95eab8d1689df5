//! Images: pull from a registry, import an archive, list, inspect, delete, and collect what nothing
//! uses any more.
//!
//! Blobs (compressed layers, configs, manifests) are content-addressed in the blob store, shared by
//! every tenant; the engine unpacks each image's layers once into a root shared by every sandbox of it.
//! Ownership is the `images` table's: a tenant sees its own images and the public ones, and another
//! tenant's image is `not_found`. What may be removed is decided here: a root is kept while an image,
//! a sandbox or a snapshot names it; a layer chain and a blob while an image does.
//!
//! A pull or import holds the collection lock shared, a collection holds it exclusively, so a
//! collection never removes what a pull has fetched but not yet recorded.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use sandlot_api::{ImageInfo, ImageLayer, ImageList, ImageOwner, ImageRunConfig, PullEvent, PullImage};
use sandlot_engine::driver::{chain_ids, LayerBlob, PrepareEvent};
use sandlot_oci::{BlobStore, Credentials, Image, PullErrorKind, Reference, Registry};
use sandlot_store::{ImageRow, PUBLIC};
use serde_json::json;
use tokio::sync::mpsc::UnboundedSender;

use sandlot_store::now_ms;

use crate::charges::{Charge, Charges, ImageUpload, SpoolBudget, TenantLocks};
use crate::{Caller, Control, Error, Kind, Result};

/// The built-in image: the host's `/usr`, read-only.
pub const HOST_IMAGE: &str = "host";
/// Longest image name.
const MAX_NAME: usize = 255;

/// How an image root runs, as recorded in `image_roots` for as long as anything boots it.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct RootConfig {
    /// The image's config as the API shows it.
    #[serde(flatten)]
    pub run: ImageRunConfig,
    /// Its `USER`, resolved in its own account files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<sandlot_engine::driver::ImageUser>,
    /// Why `USER` could not be resolved (commands must then name `user` or `root`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_error: Option<String>,
}

/// The image side of the control layer: the registry client, the blob store and the collection lock.
pub struct Images {
    registry: Registry,
    blobs: Arc<BlobStore>,
    gc: tokio::sync::RwLock<()>,
    max_import_bytes: u64,
    credentials: HashMap<String, ConfiguredCredentials>,
    /// One pull or import per tenant at a time.
    turns: TenantLocks,
    /// One image recorded per tenant at a time: its quota is checked, the image unpacked and recorded
    /// as one step, so concurrent builds and imports of a tenant cannot all pass the same check.
    storing: TenantLocks,
    /// One unpacking per tenant at a time, so one tenant never holds every unpack place.
    unpack_turns: TenantLocks,
    /// What tenants are charged beyond their stored images.
    pub(crate) charges: Charges,
    /// Bytes all uploads being spooled may hold together.
    spool: SpoolBudget,
    /// Pulls and imports the server runs at once.
    running: tokio::sync::Semaphore,
    /// Images unpacking at once (each takes a core and, for its tree, memory).
    unpacking: tokio::sync::Semaphore,
    /// How long one image's unpacking may hold its place.
    unpack_timeout: std::time::Duration,
    /// Whether a collection is waiting for its turn on a task of its own.
    collect_pending: std::sync::atomic::AtomicBool,
}

/// Pulls and imports of all tenants together that run at once (each holds a blocking thread, two
/// download threads and, while it unpacks, a core).
pub const MAX_CONCURRENT_PULLS: usize = 4;

/// Build-cache rows each tenant keeps (its newest); one per instruction of each build.
const BUILD_CACHE_ROWS_PER_TENANT: u64 = 10_000;

/// Images that unpack at once, all tenants together.
pub const MAX_CONCURRENT_UNPACKS: usize = 2;

/// How long one image's layers may take to unpack (a 10 GiB CUDA image takes about three minutes on
/// this project's 2-core CI machine).
pub const DEFAULT_UNPACK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(900);

/// Credentials the admin configured for a registry, and who may pull with them.
#[derive(Clone)]
pub struct ConfiguredCredentials {
    /// The credentials.
    pub credentials: Credentials,
    /// Tenants whose pulls use them (besides admin keys, which always do). Empty: admin keys only,
    /// so a tenant cannot pull a private repository by naming the admin's registry.
    pub tenants: Vec<String>,
}

/// A tenant's turn at pulling or importing, and a place among the server's concurrent ones.
pub(crate) struct Turn<'a> {
    _tenant: Option<tokio::sync::OwnedMutexGuard<()>>,
    _slot: tokio::sync::SemaphorePermit<'a>,
}

impl Images {
    /// The blob store.
    pub(crate) fn blobs(&self) -> &Arc<BlobStore> {
        &self.blobs
    }

    /// The collection lock, held shared by whatever makes trees or blobs a collection must not take
    /// before they are recorded (a pull, an import, a build).
    pub(crate) fn collection_lock(&self) -> &tokio::sync::RwLock<()> {
        &self.gc
    }

    /// Images over the blob store at `blob_dir`, pulling with `registry`; imports may be at most
    /// `max_import_bytes`.
    pub fn new(
        registry: Registry,
        blob_dir: PathBuf,
        max_import_bytes: u64,
        credentials: HashMap<String, ConfiguredCredentials>,
    ) -> std::io::Result<Images> {
        let blobs = Arc::new(BlobStore::open(&blob_dir)?);
        Ok(Images {
            registry,
            blobs,
            gc: Default::default(),
            max_import_bytes,
            credentials,
            turns: Default::default(),
            storing: Default::default(),
            unpack_turns: Default::default(),
            charges: Default::default(),
            spool: SpoolBudget::new(max_import_bytes.saturating_mul(2)),
            running: tokio::sync::Semaphore::new(MAX_CONCURRENT_PULLS),
            unpacking: tokio::sync::Semaphore::new(MAX_CONCURRENT_UNPACKS),
            unpack_timeout: DEFAULT_UNPACK_TIMEOUT,
            collect_pending: Default::default(),
        })
    }

    /// Bounds how long one image's layers may take to unpack, once they have a place (default
    /// [`DEFAULT_UNPACK_TIMEOUT`]).
    pub fn with_unpack_timeout(mut self, timeout: std::time::Duration) -> Images {
        self.unpack_timeout = timeout;
        self
    }

    /// Bounds the bytes all uploads being spooled may hold together (default: twice the import limit).
    pub fn with_spool_budget(mut self, bytes: u64) -> Images {
        self.spool = SpoolBudget::new(bytes);
        self
    }

    /// Waits for `tenant`'s turn and a free place among the server's pulls and imports.
    pub(crate) async fn turn(&self, tenant: &str) -> Turn<'_> {
        let tenant = self.turns.lock(tenant).await;
        let slot = self.running.acquire().await.expect("the semaphore is never closed");
        Turn { _tenant: Some(tenant), _slot: slot }
    }

    /// A free place among the server's pulls and imports, for one that already holds its tenant's turn.
    async fn slot(&self) -> Turn<'_> {
        let slot = self.running.acquire().await.expect("the semaphore is never closed");
        Turn { _tenant: None, _slot: slot }
    }

    /// The admin's configured credentials for `reference`'s registry, if `caller` may use them.
    fn configured_credentials(&self, caller: &Caller, reference: &Reference) -> Option<Credentials> {
        let entry = self.credentials.get(&reference.registry).or_else(|| self.credentials.get(reference.api_host()))?;
        (caller.admin || entry.tenants.contains(&caller.tenant)).then(|| entry.credentials.clone())
    }
}

fn pull_error(e: sandlot_oci::PullError) -> Error {
    let kind = match e.kind {
        PullErrorKind::NotFound => Kind::NotFound,
        PullErrorKind::Unauthorized | PullErrorKind::Denied => Kind::RegistryDenied,
        PullErrorKind::Tls | PullErrorKind::Network | PullErrorKind::Corrupt => Kind::RegistryUnavailable,
        PullErrorKind::TooLarge => Kind::TooLarge,
        PullErrorKind::OverBudget => {
            return Error::limit(format!(
            "{}: that is past the tenant's image quota (--image-quota-mb); delete images (sandlot image rm) and retry",
            e.message
        ))
        }
        _ => Kind::Invalid,
    };
    Error::new(kind, e.message)
}

/// Whose image `caller` stores: its tenant's, or every tenant's when published.
fn image_owner(caller: &Caller, public: bool) -> &str {
    if public {
        PUBLIC
    } else {
        &caller.tenant
    }
}

pub(crate) fn check_publish(caller: &Caller, public: bool) -> Result<()> {
    if public && !caller.admin {
        return Err(Error::new(Kind::Forbidden, "only an admin key may publish an image to every tenant"));
    }
    Ok(())
}

pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME || name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(Error::invalid(format!(
            "image name {name:?} must be 1-{MAX_NAME} characters without spaces or control characters"
        )));
    }
    if name == HOST_IMAGE {
        return Err(Error::invalid("`host` is the built-in image; choose another name"));
    }
    Ok(())
}

fn run_config(image: &Image) -> ImageRunConfig {
    let c = &image.config;
    ImageRunConfig {
        env: c.env.clone(),
        working_dir: c.working_dir.clone().filter(|w| !w.is_empty()),
        user: c.user.clone().filter(|u| !u.is_empty()),
        entrypoint: c.entrypoint.clone(),
        cmd: c.cmd.clone(),
        labels: c.labels.clone(),
        exposed_ports: c.exposed_ports.clone(),
    }
}

pub(crate) fn info(row: &ImageRow) -> Result<ImageInfo> {
    let image: Image = serde_json::from_str(&row.image)
        .map_err(|e| Error::internal(format!("stored image {} is unreadable: {e}", row.name)))?;
    let p = &image.platform;
    Ok(ImageInfo {
        name: row.name.clone(),
        reference: row.reference.clone(),
        digest: Some(row.digest.clone()),
        id: Some(row.image_key.clone()),
        platform: Some(match &p.variant {
            Some(v) => format!("{}/{}/{v}", p.os, p.architecture),
            None => format!("{}/{}", p.os, p.architecture),
        }),
        owner: if row.tenant == PUBLIC { ImageOwner::Public } else { ImageOwner::Tenant },
        size_bytes: row.bytes,
        layers: image.layers.iter().map(|l| ImageLayer { digest: l.digest.to_string(), size_bytes: l.size }).collect(),
        config: run_config(&image),
        created_at_ms: row.created_ms,
    })
}

fn host_info() -> ImageInfo {
    ImageInfo {
        name: HOST_IMAGE.into(),
        reference: None,
        digest: None,
        id: None,
        platform: None,
        owner: ImageOwner::Builtin,
        size_bytes: 0,
        layers: vec![],
        config: ImageRunConfig::default(),
        created_at_ms: 0,
    }
}

impl Control {
    /// The largest image archive an import takes, bytes (0 without an image store).
    pub fn max_import_bytes(&self) -> u64 {
        self.images.as_ref().map_or(0, |i| i.max_import_bytes)
    }

    pub(crate) fn images(&self) -> Result<&Images> {
        self.images.as_ref().ok_or_else(|| Error::invalid("this server has no image store"))
    }

    /// The caller's image `name`, else the public one of that name.
    pub(crate) fn image_row(&self, caller: &Caller, name: &str) -> Result<Option<ImageRow>> {
        if let Some(row) = self.store.get_image(&caller.tenant, name)? {
            return Ok(Some(row));
        }
        Ok(self.store.get_image(PUBLIC, name)?)
    }

    /// What a create's `image` boots: `(name, key)`, the key `None` for `host`.
    pub(crate) fn resolve_image(&self, caller: &Caller, name: Option<&str>) -> Result<(String, Option<String>)> {
        let name = name.unwrap_or(&self.cfg.default_image);
        if name == HOST_IMAGE {
            return Ok((name.to_string(), None));
        }
        let row = self.image_row(caller, name)?.ok_or_else(|| {
            Error::invalid(format!(
                "unknown image {name:?}: pull it first (`sandlot image pull {name}` or POST /v1/images/pull); \
                 GET /v1/images lists what you have"
            ))
        })?;
        if !self.engine.has_image(&row.image_key) {
            return Err(Error::internal(format!(
                "image {name:?} is recorded but its files are not on this host; pull or import it again"
            )));
        }
        Ok((row.name, Some(row.image_key)))
    }

    /// How the image root `key` runs (`None` for `host` or a root without a recorded config).
    pub(crate) fn image_run_config(&self, key: Option<&str>) -> Result<Option<RootConfig>> {
        let Some(key) = key else { return Ok(None) };
        match self.store.image_root_config(key)? {
            Some(json) => Ok(serde_json::from_str(&json).ok()),
            None => Ok(None),
        }
    }

    /// `GET /v1/usage` (the caller's tenant) or, for an admin, `GET /v1/tenants/{tenant}/usage`: what
    /// the tenant holds and is charged.
    pub fn usage(&self, caller: &Caller, tenant: Option<&str>) -> Result<sandlot_api::TenantUsage> {
        let tenant = match tenant {
            Some(t) if t != caller.tenant && !caller.admin => {
                return Err(Error::new(Kind::Forbidden, "only an admin key may read another tenant's usage"))
            }
            Some(t) => t,
            None => caller.tenant.as_str(),
        };
        let (snapshots, snapshot_bytes) = self.store.snapshot_usage(tenant)?;
        let (images, image_bytes) = self.store.image_usage(tenant)?;
        Ok(sandlot_api::TenantUsage {
            tenant: tenant.to_string(),
            sandboxes: self.store.list_sandboxes(tenant)?.len() as u64,
            snapshots,
            snapshot_bytes,
            images,
            image_bytes,
        })
    }

    /// `GET /v1/images`: the caller's images, the public ones and `host`.
    pub fn list_images(&self, caller: &Caller) -> Result<ImageList> {
        let mut images = vec![host_info()];
        let mut seen = HashSet::new();
        // The tenant's own image shadows a public one of the same name (it is what a create boots).
        let rows = self.store.list_images(&caller.tenant)?;
        for row in rows.iter().filter(|r| r.tenant != PUBLIC).chain(rows.iter().filter(|r| r.tenant == PUBLIC)) {
            if seen.insert(row.name.clone()) {
                images.push(info(row)?);
            }
        }
        images[1..].sort_by(|a, b| a.name.cmp(&b.name));
        Ok(ImageList { images })
    }

    /// `GET /v1/images/{name}`.
    pub fn get_image(&self, caller: &Caller, name: &str) -> Result<ImageInfo> {
        if name == HOST_IMAGE {
            return Ok(host_info());
        }
        let row = self.image_row(caller, name)?.ok_or_else(|| Error::not_found(&format!("image {name:?}")))?;
        info(&row)
    }

    /// `DELETE /v1/images/{name}`: the caller's image (an admin may delete a public one). Sandboxes and
    /// snapshots of it keep working: their root stays until they are gone.
    pub async fn delete_image(self: &Arc<Self>, caller: &Caller, name: &str) -> Result<()> {
        if name == HOST_IMAGE {
            return Err(Error::invalid("`host` is built in and cannot be deleted"));
        }
        let owner = if self.store.get_image(&caller.tenant, name)?.is_some() {
            caller.tenant.clone()
        } else if caller.admin && self.store.get_image(PUBLIC, name)?.is_some() {
            PUBLIC.to_string()
        } else {
            return Err(Error::not_found(&format!("image {name:?}")));
        };
        // Its blobs and tree stay on disk until a collection removes them, and stay charged till then.
        if let Some(row) = self.store.get_image(&owner, name)? {
            self.images()?.charges.add_uncollected(&owner, row.bytes);
        }
        self.store.delete_image(&owner, name)?;
        self.audit(&caller.tenant, None, "image.delete", &json!({"name": name, "public": owner == PUBLIC}))?;
        if !self.collect_images().await {
            self.collect_in_background();
        }
        Ok(())
    }

    /// What a pull fetches and stores under which name, checked before anything is fetched.
    fn pull_target(&self, caller: &Caller, req: &PullImage) -> Result<(Reference, sandlot_oci::Platform, String)> {
        self.images()?;
        let reference = Reference::parse(&req.reference)
            .map_err(|e| Error::invalid(format!("ref {:?} is not an image reference: {e}", req.reference)))?;
        let platform = match &req.platform {
            Some(p) => sandlot_oci::Platform::parse(p)
                .map_err(|e| Error::invalid(format!("platform {p:?}: {e} (write it as os/arch, e.g. linux/amd64)")))?,
            None => sandlot_oci::Platform::host(),
        };
        check_publish(caller, req.public)?;
        let name = req.name.clone().unwrap_or_else(|| reference.familiar());
        check_name(&name)?;
        Ok((reference, platform, name))
    }

    /// Refuses a pull the caller may not make, before a surface commits to a streamed answer.
    pub fn check_pull(&self, caller: &Caller, req: &PullImage) -> Result<()> {
        self.pull_target(caller, req).map(|_| ())
    }

    /// Refuses an import the caller may not make, before its archive is read.
    pub fn check_import(&self, caller: &Caller, name: Option<&str>, public: bool) -> Result<()> {
        self.images()?;
        check_publish(caller, public)?;
        name.map_or(Ok(()), check_name)
    }

    /// `POST /v1/images/pull`: fetches the image, unpacks it and stores it under its name, sending
    /// progress on `events` as it goes. A tenant's pulls and imports run one at a time (its quota is
    /// checked against what it holds, with nothing of its own in flight), and the server runs at most
    /// [`MAX_CONCURRENT_PULLS`] of them at once; every outcome is audited.
    pub async fn pull_image(
        self: &Arc<Self>,
        caller: &Caller,
        req: PullImage,
        events: UnboundedSender<PullEvent>,
    ) -> Result<ImageInfo> {
        let images = self.images()?;
        let (reference, platform, name) = self.pull_target(caller, &req)?;
        let _turn = images.turn(&caller.tenant).await;
        let result = self.pull_locked(caller, &req, &reference, platform, &name, &events).await;
        let mut row = json!({"name": name, "ref": reference.to_string(), "public": req.public});
        match &result {
            Ok(info) => row["digest"] = json!(info.digest),
            Err(e) => row["error"] = json!(e.code()),
        }
        self.audit(&caller.tenant, None, "image.pull", &row)?;
        // A refused or failed pull leaves blobs nothing names; a replacing one, trees: collect them,
        // without making the answer wait for other tenants' pulls to let the collection in.
        self.collect_in_background();
        result
    }

    async fn pull_locked(
        self: &Arc<Self>,
        caller: &Caller,
        req: &PullImage,
        reference: &Reference,
        platform: sandlot_oci::Platform,
        name: &str,
        events: &UnboundedSender<PullEvent>,
    ) -> Result<ImageInfo> {
        let images = self.images()?;
        let auth = match &req.auth {
            Some(a) => Some(Credentials { username: a.username.clone(), password: a.password.clone() }),
            None => images.configured_credentials(caller, reference),
        };
        let budget = self.image_budget(caller, name, req.public)?;
        let _shared = images.gc.read().await;
        // Stored layers this tenant may use without fetching them: those of its own and the public
        // images. Any other is fetched again, so a registry naming a digest gains nothing by it.
        let reusable: HashSet<sandlot_oci::Digest> = self
            .store
            .list_images(&caller.tenant)?
            .iter()
            .filter_map(|r| serde_json::from_str::<Image>(&r.image).ok())
            .flat_map(|i| i.layers.into_iter().map(|l| l.digest))
            .collect();
        let image = {
            let (this, reference, tx) = (Arc::clone(self), reference.clone(), events.clone());
            tokio::task::spawn_blocking(move || {
                let images = this.images.as_ref().expect("checked above");
                let reuse = |d: &sandlot_oci::Digest| reusable.contains(d);
                images.registry.pull(&reference, &platform, auth.as_ref(), &images.blobs, &reuse, budget, &mut |e| {
                    let _ = tx.send(progress(e));
                })
            })
            .await
            .map_err(|e| Error::internal(format!("pull task: {e}")))?
            .map_err(pull_error)?
        };
        let mut charge = images.charges.charge(image_owner(caller, req.public));
        let row =
            self.store_image(caller, name, Some(reference.to_string()), image, req.public, events, &mut charge).await?;
        info(&row)
    }

    /// Bytes a new image called `name` may take: the tenant's quota less what its other images hold
    /// (the image it replaces is not counted). Public images are the admin's and not limited here.
    pub(crate) fn image_budget(&self, caller: &Caller, name: &str, public: bool) -> Result<u64> {
        if public {
            return Ok(u64::MAX);
        }
        self.check_image_count(&caller.tenant, name)?;
        let quota = self.cfg.image_quota_bytes;
        let held = quota - self.image_room(&caller.tenant, name)? + self.images()?.charges.held(&caller.tenant);
        if held >= quota {
            return Err(Error::limit(format!(
                "tenant {}'s images already take {} MiB of {} MiB (--image-quota-mb): delete images \
                 (sandlot image rm) and retry",
                caller.tenant,
                held.div_ceil(1 << 20),
                quota >> 20
            )));
        }
        Ok(quota - held)
    }

    /// Refuses a new image of `tenant` called `name` when the tenant keeps `--max-images-per-tenant`
    /// already (replacing one of them is fine): each image root costs the layers volume and the
    /// database a share that bytes alone would not count.
    fn check_image_count(&self, tenant: &str, name: &str) -> Result<()> {
        let (count, _) = self.store.image_usage(tenant)?;
        let max = self.cfg.max_images_per_tenant;
        if count >= max && self.store.get_image(tenant, name)?.is_none() {
            return Err(Error::limit(format!(
                "tenant {tenant} keeps {count} images, the most this server allows (--max-images-per-tenant): \
                 delete images (sandlot image rm) and retry"
            )));
        }
        Ok(())
    }

    /// The tenant's image quota less what its stored images take (the image `name` replaces is not
    /// counted).
    fn image_room(&self, tenant: &str, name: &str) -> Result<u64> {
        let (_, held) = self.store.image_usage_without(tenant, Some(name))?;
        Ok(self.cfg.image_quota_bytes.saturating_sub(held))
    }

    /// Admits an import before its archive is read: waits for the tenant's turn, then charges every
    /// byte the surface spools to the tenant's quota and the server's spool budget.
    pub async fn begin_import(&self, caller: &Caller, name: Option<&str>, public: bool) -> Result<ImageUpload> {
        self.check_import(caller, name, public)?;
        let images = self.images()?;
        let turn = images.turns.lock(&caller.tenant).await;
        let room = if public { u64::MAX } else { self.image_room(&caller.tenant, name.unwrap_or(""))? };
        let charge = images.charges.charge(image_owner(caller, public));
        Ok(ImageUpload::new(Some(turn), None, charge, room, images.max_import_bytes, &images.spool))
    }

    /// Admits a build before its context is read: one of the tenant's build places, and every byte of
    /// the context and of the layers the build writes charged to its image quota. A `public` build
    /// (admin keys only, refused here before a byte is read) is charged as a public import is.
    pub fn begin_build(&self, caller: &Caller, name: &str, public: bool) -> Result<ImageUpload> {
        let images = self.images()?;
        check_name(name)?;
        check_publish(caller, public)?;
        let slot = images.charges.begin_build(&caller.tenant)?;
        let room = if public { u64::MAX } else { self.image_room(&caller.tenant, name)? };
        let charge = images.charges.charge(image_owner(caller, public));
        Ok(ImageUpload::new(None, Some(slot), charge, room, images.max_import_bytes, &images.spool))
    }

    /// `POST /v1/images/import`: a `docker save` tarball, an OCI archive, or a root filesystem tar, read
    /// from the file `archive` (the surface spools the request body there). Returns the images stored.
    pub async fn import_image(
        self: &Arc<Self>,
        caller: &Caller,
        mut upload: ImageUpload,
        archive: std::fs::File,
        name: Option<String>,
        public: bool,
        events: UnboundedSender<PullEvent>,
    ) -> Result<Vec<ImageInfo>> {
        let images = self.images()?;
        self.check_import(caller, name.as_deref(), public)?;
        // The tenant's turn came with the upload; only a place among the server's imports is missing.
        let _slot = images.slot().await;
        let others = images.charges.held(image_owner(caller, public)).saturating_sub(upload.charge.bytes());
        let budget = upload.room.saturating_sub(others);
        let shared = images.gc.read().await;
        let stored = async {
            let (blobs, max) = (Arc::clone(&images.blobs), upload.max.min(budget));
            // What the archive holds goes to the blob store: charged until an image records it or a
            // collection removes it.
            upload.charge.in_blobs();
            let imported =
                tokio::task::spawn_blocking(move || sandlot_oci::import(std::io::BufReader::new(archive), &blobs, max))
                    .await
                    .map_err(|e| Error::internal(format!("import task: {e}")))?
                    .map_err(|e| Error::invalid(format!("import: {e}")))?;
            if imported.len() > 1 && name.is_some() {
                return Err(Error::invalid(format!(
                    "the archive holds {} images; leave `name` out to store each under its own",
                    imported.len()
                )));
            }
            let mut out = Vec::new();
            for im in imported {
                let Some(n) = name.clone().or(im.name.clone()) else {
                    return Err(Error::invalid("the archive names no image: give one with `name` (--name)"));
                };
                check_name(&n)?;
                let row = self.store_image(caller, &n, None, im.image, public, &events, &mut upload.charge).await?;
                self.audit(
                    &caller.tenant,
                    None,
                    "image.import",
                    &json!({"name": n, "digest": row.digest, "public": public}),
                )?;
                out.push(info(&row)?);
            }
            Ok::<_, Error>(out)
        }
        .await;
        drop(shared);
        // Whatever the outcome, blobs no image names (a refused or failed import's) go.
        self.collect_in_background();
        stored
    }

    /// Makes the root `key` of `layers` (bottom first) within the server's bound on unpacks running at
    /// once, writing at most `max_bytes` of files, with each progress event given to `on_event` as it
    /// comes; returns the bytes unpacked.
    pub(crate) async fn prepare_root(
        &self,
        images: &Images,
        tenant: &str,
        key: &str,
        layers: &[sandlot_oci::Layer],
        max_bytes: u64,
        on_event: impl Fn(PrepareEvent) + Send + 'static,
    ) -> std::result::Result<u64, sandlot_engine::EngineError> {
        let blobs: Vec<LayerBlob> = layers
            .iter()
            .map(|l| LayerBlob { path: images.blobs.path(&l.digest), diff_id: l.diff_id.to_string() })
            .collect();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let forward = tokio::spawn(async move {
            while let Some(e) = rx.recv().await {
                on_event(e);
            }
        });
        let prepared = {
            // The tenant's turn first: one tenant's unpackings wait for each other, not for a place.
            let _mine = images.unpack_turns.lock(tenant).await;
            let _core = images.unpacking.acquire().await.expect("the semaphore is never closed");
            // The deadline starts with the unpack place: waiting for one is not the image's fault.
            let deadline = std::time::Instant::now() + images.unpack_timeout;
            self.engine.prepare_image(key.to_string(), blobs, max_bytes, deadline, tx).await
        };
        let _ = forward.await;
        prepared
    }

    /// Unpacks `image` into its root (once per config digest) and records it under `name`. `charge`
    /// is what the operation storing it is charged already (its upload, its layers): not counted twice.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn store_image(
        &self,
        caller: &Caller,
        name: &str,
        reference: Option<String>,
        image: Image,
        public: bool,
        events: &UnboundedSender<PullEvent>,
        charge: &mut Charge,
    ) -> Result<ImageRow> {
        let images = self.images()?;
        let blobs: Vec<(String, u64)> = image
            .layers
            .iter()
            .map(|l| (l.digest.to_string(), l.size))
            .chain(std::iter::once((
                image.config_digest.to_string(),
                images.blobs().size(&image.config_digest).unwrap_or(0),
            )))
            .collect();
        let blob_bytes = blobs.iter().map(|b| b.1).sum::<u64>();
        let owner = image_owner(caller, public).to_string();
        // Checked, unpacked and recorded under the owner's lock: two images of one tenant cannot both
        // pass the check against the same room.
        let _storing = images.storing.lock(&owner).await;
        if !public {
            self.check_image_count(&owner, name)?;
        }
        // What the tenant already holds (stored, in flight, not yet collected), less the image this one
        // replaces; checked before unpacking, so a refused image takes no room on the layers volume
        // (its blobs go with the next collection).
        let quota = self.cfg.image_quota_bytes;
        let others = images.charges.held(&owner).saturating_sub(charge.bytes());
        let free = self.image_room(&owner, name)?.saturating_sub(others);
        let held = quota - free;
        // A blob another of the owner's images holds is charged once: only the new ones count here.
        let shared = self.store.image_blobs(&owner, Some(name))?;
        let new_blob_bytes = blobs.iter().filter(|b| !shared.contains(&b.0)).map(|b| b.1).sum::<u64>();
        if !public && new_blob_bytes > free {
            return Err(Error::limit(format!(
                "image {name:?} adds {} MiB of blobs; tenant {}'s images already take {} MiB of {} MiB (--image-quota-mb): \
                 delete images (sandlot image rm) and retry",
                new_blob_bytes.div_ceil(1 << 20),
                caller.tenant,
                held.div_ceil(1 << 20),
                quota >> 20
            )));
        }
        let key = image.config_digest.to_string();
        // What the layers unpack to is charged too (a small compressed layer can be a big tree on the
        // layers volume), so the unpacking may write at most the rest of the quota.
        let unpack_budget = if public { u64::MAX } else { free - new_blob_bytes };
        let events = events.clone();
        let prepared = self
            .prepare_root(images, &owner, &key, &image.layers, unpack_budget, move |e| {
                let _ = events.send(match e {
                    PrepareEvent::Unpacking { index, .. } => PullEvent::Unpacking { index },
                    PrepareEvent::Unpacked { index, report } => PullEvent::Unpacked {
                        index,
                        cached: report.is_none(),
                        dropped: report.map(|r| r.dropped).unwrap_or_default(),
                    },
                });
            })
            .await;
        let unpacked = prepared.map_err(|e| {
            let over = !public && e.to_string().contains("max_bytes");
            let hint = if over { " (over the tenant's --image-quota-mb once unpacked)" } else { "" };
            Error::invalid(format!("image {name:?} cannot be unpacked{hint}: {e}"))
        })?;
        let run = run_config(&image);
        let (identity, identity_error) = match &run.user {
            Some(spec) => match self.engine.image_user(key.clone(), spec.clone()).await {
                Ok(id) => (Some(id), None),
                Err(e) => (None, Some(e.to_string())),
            },
            None => (None, None),
        };
        let config = serde_json::to_string(&RootConfig { run, identity, identity_error }).expect("serialisable");
        let image_json = serde_json::to_string(&image).expect("serialisable");
        // The database keeps the image twice (its row, its root's row) and its run config once more:
        // charged as well (bounded by MAX_RUN_CONFIG_BYTES and MAX_LAYERS, so at most a few hundred KiB).
        let bytes = blob_bytes + unpacked + (config.len() + 2 * image_json.len()) as u64;
        self.store.put_image_root(&key, &config, &image_json, bytes, now_ms())?;
        let row = ImageRow {
            tenant: owner,
            name: name.to_string(),
            reference,
            digest: image.manifest_digest.to_string(),
            image_key: key,
            image: image_json,
            bytes,
            created_ms: now_ms(),
            blobs,
        };
        self.store.put_image(&row)?;
        charge.recorded();
        Ok(row)
    }

    /// Runs [`Control::collect_images`] on a task of its own, again every two seconds while pulls,
    /// imports or builds keep it out; one such task at a time.
    pub(crate) fn collect_in_background(self: &Arc<Self>) {
        let Ok(images) = self.images() else { return };
        if images.collect_pending.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            while !this.collect_images().await {
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            }
            if let Ok(images) = this.images() {
                images.collect_pending.store(false, std::sync::atomic::Ordering::SeqCst);
            }
        });
    }

    /// Removes image roots, layer chains and blobs that nothing uses any more (see the module
    /// documentation for what keeps what). Best effort: a failure is logged and retried next time.
    ///
    /// It never waits for the lock: a collection queued as a writer would hold up every pull, import
    /// and build behind it for as long as the longest one in flight runs. When the lock is busy it
    /// returns `false` (and a collection started in the background tries again).
    pub async fn collect_images(&self) -> bool {
        let Ok(images) = self.images() else { return true };
        let Ok(_exclusive) = images.gc.try_write() else { return false };
        // What was deleted or failed before this point is removed by this collection.
        let uncollected = images.charges.take_uncollected();
        let result = async {
            let roots = self.store.image_keys_in_use()?;
            let mut chains = HashSet::new();
            let mut blobs = HashSet::new();
            // One row at a time: every tenant's images together may be far more than one answer.
            self.store.each_image(&mut |json| {
                let Ok(image) = serde_json::from_str::<Image>(json) else { return };
                let diff_ids: Vec<String> = image.layers.iter().map(|l| l.diff_id.to_string()).collect();
                chains.extend(chain_ids(&diff_ids));
                blobs.insert(image.manifest_digest.clone());
                blobs.insert(image.config_digest.clone());
                blobs.extend(image.layers.iter().map(|l| l.digest.clone()));
            })?;
            self.store.forget_image_roots(&roots)?;
            self.store.prune_build_cache(BUILD_CACHE_ROWS_PER_TENANT)?;
            let blob_names: HashSet<String> = blobs.iter().map(|d| d.to_string()).collect();
            let gone = self.engine.remove_unused_images(roots, chains, blob_names).await?;
            let mut removed_blobs = 0;
            for d in images.blobs.list().map_err(|e| Error::internal(format!("listing blobs: {e}")))? {
                if !blobs.contains(&d) && images.blobs.remove(&d).is_ok() {
                    removed_blobs += 1;
                }
            }
            if !gone.is_empty() || removed_blobs > 0 {
                tracing::info!("image collection removed {} trees and {removed_blobs} blobs", gone.len());
            }
            Ok::<(), Error>(())
        }
        .await;
        if let Err(e) = result {
            tracing::warn!("image collection: {e}");
            images.charges.restore_uncollected(uncollected);
        }
        true
    }
}

fn progress(e: sandlot_oci::PullEvent) -> PullEvent {
    match e {
        sandlot_oci::PullEvent::Resolved { manifest, platform, layers } => PullEvent::Resolved {
            digest: manifest.to_string(),
            platform: match platform.variant {
                Some(v) => format!("{}/{}/{v}", platform.os, platform.architecture),
                None => format!("{}/{}", platform.os, platform.architecture),
            },
            layers: layers
                .into_iter()
                .map(|(d, size)| ImageLayer { digest: d.to_string(), size_bytes: size })
                .collect(),
        },
        sandlot_oci::PullEvent::Layer { digest, done, total } => {
            PullEvent::Download { digest: digest.to_string(), done, total }
        }
        sandlot_oci::PullEvent::LayerDone { digest, cached } => {
            PullEvent::Downloaded { digest: digest.to_string(), cached }
        }
    }
}
