//! What a tenant's image quota is charged besides the images it has stored: uploads being spooled,
//! builds' layers being written, and deleted or failed images whose blobs and trees no collection has
//! removed yet. Without these, a tenant's quota would count only what is recorded, while the disk
//! holds what is in flight and what is waiting to be collected as well.
//!
//! Every check and charge happens under one mutex, so concurrent uploads, builds and imports of a
//! tenant share what its quota leaves instead of each seeing all of it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

use crate::{lock, Error, Kind, Result};

/// Builds one tenant runs at once.
pub const MAX_BUILDS_PER_TENANT: usize = 2;
/// Longest one upload (an import archive, a build context) may take to arrive.
pub const UPLOAD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1800);
/// Longest an upload may send nothing before it is cut off.
pub const UPLOAD_IDLE: std::time::Duration = std::time::Duration::from_secs(30);
/// Unit of the server-wide spool budget.
const SPOOL_UNIT: u64 = 1 << 20;

/// Per-tenant locks, made as they are first asked for and forgotten when nobody holds or waits for one.
#[derive(Default)]
pub(crate) struct TenantLocks(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl TenantLocks {
    /// Waits for `tenant`'s lock.
    pub(crate) async fn lock(&self, tenant: &str) -> OwnedMutexGuard<()> {
        let l = {
            let mut all = lock(&self.0);
            all.retain(|_, l| Arc::strong_count(l) > 1);
            Arc::clone(all.entry(tenant.to_string()).or_default())
        };
        l.lock_owned().await
    }
}

#[derive(Debug, Default)]
struct Held {
    /// Bytes of uploads and builds in flight.
    pending: u64,
    /// Bytes of images deleted or failed since the last collection.
    uncollected: u64,
    /// Builds running.
    builds: usize,
}

impl Held {
    fn is_empty(&self) -> bool {
        self.pending == 0 && self.uncollected == 0 && self.builds == 0
    }
}

/// The image side's charges beyond stored images, by tenant.
#[derive(Clone, Default)]
pub(crate) struct Charges(Arc<Mutex<HashMap<String, Held>>>);

impl Charges {
    /// What `tenant` is charged beyond its stored images.
    pub(crate) fn held(&self, tenant: &str) -> u64 {
        lock(&self.0).get(tenant).map_or(0, |h| h.pending + h.uncollected)
    }

    /// A charge of nothing yet, for `tenant`.
    pub(crate) fn charge(&self, tenant: &str) -> Charge {
        Charge { charges: self.clone(), tenant: tenant.to_string(), bytes: 0, in_blobs: false, recorded: false }
    }

    /// `bytes` of `tenant`'s stay on disk until the next collection (a deleted image's).
    pub(crate) fn add_uncollected(&self, tenant: &str, bytes: u64) {
        let mut all = lock(&self.0);
        let h = all.entry(tenant.to_string()).or_default();
        h.uncollected = h.uncollected.saturating_add(bytes);
    }

    /// Takes every tenant's uncollected bytes: a collection that succeeds removes them.
    pub(crate) fn take_uncollected(&self) -> HashMap<String, u64> {
        let mut all = lock(&self.0);
        let taken = all.iter_mut().map(|(t, h)| (t.clone(), std::mem::take(&mut h.uncollected))).collect();
        all.retain(|_, h| !h.is_empty());
        taken
    }

    /// Gives back what [`Charges::take_uncollected`] took, when the collection failed.
    pub(crate) fn restore_uncollected(&self, taken: HashMap<String, u64>) {
        for (t, b) in taken.into_iter().filter(|(_, b)| *b > 0) {
            self.add_uncollected(&t, b);
        }
    }

    /// A place among `tenant`'s builds, or why there is none.
    pub(crate) fn begin_build(&self, tenant: &str) -> Result<BuildSlot> {
        let mut all = lock(&self.0);
        let h = all.entry(tenant.to_string()).or_default();
        if h.builds >= MAX_BUILDS_PER_TENANT {
            return Err(Error::limit(format!(
                "tenant {tenant} already runs {MAX_BUILDS_PER_TENANT} builds, the most at once; retry when one ends"
            )));
        }
        h.builds += 1;
        Ok(BuildSlot { charges: self.clone(), tenant: tenant.to_string() })
    }
}

/// Bytes charged to a tenant's image quota while an upload, build or import runs. Dropped after
/// [`Charge::in_blobs`] and before [`Charge::recorded`], its bytes stay charged as uncollected (what
/// it wrote is in the blob store until the next collection); after `recorded`, they are the stored
/// image's; otherwise (a refused upload: its spool file is gone) they are simply given back.
pub(crate) struct Charge {
    charges: Charges,
    tenant: String,
    bytes: u64,
    in_blobs: bool,
    recorded: bool,
}

impl Charge {
    /// Bytes charged so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Charges `n` bytes more if the tenant's charges, this one's included, stay within `room` (its
    /// quota less its stored images); otherwise charges nothing and returns what the tenant would hold.
    pub(crate) fn add(&mut self, n: u64, room: u64) -> std::result::Result<(), u64> {
        let mut all = lock(&self.charges.0);
        let h = all.entry(self.tenant.clone()).or_default();
        let total = (h.pending + h.uncollected).saturating_add(n);
        if total > room {
            return Err(total);
        }
        h.pending += n;
        self.bytes += n;
        Ok(())
    }

    /// Stops charging what was charged so far, which is gone or bounded elsewhere (a build's context,
    /// capped at the tenant's room while it arrived and held by one of its few builds).
    pub(crate) fn release(&mut self) {
        let mut all = lock(&self.charges.0);
        if let Some(h) = all.get_mut(&self.tenant) {
            h.pending = h.pending.saturating_sub(self.bytes);
        }
        self.bytes = 0;
    }

    /// What is charged is (or is about to be) written to the blob store, where it stays until a
    /// collection removes it if no image records it.
    pub(crate) fn in_blobs(&mut self) {
        self.in_blobs = true;
    }

    /// The image is recorded: its bytes are charged as a stored image from now on.
    pub(crate) fn recorded(&mut self) {
        self.recorded = true;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let mut all = lock(&self.charges.0);
        if let Some(h) = all.get_mut(&self.tenant) {
            h.pending = h.pending.saturating_sub(self.bytes);
            if self.in_blobs && !self.recorded {
                h.uncollected = h.uncollected.saturating_add(self.bytes);
            }
            if h.is_empty() {
                all.remove(&self.tenant);
            }
        }
    }
}

/// One of a tenant's [`MAX_BUILDS_PER_TENANT`] places, given back when dropped.
pub(crate) struct BuildSlot {
    charges: Charges,
    tenant: String,
}

impl Drop for BuildSlot {
    fn drop(&mut self) {
        let mut all = lock(&self.charges.0);
        if let Some(h) = all.get_mut(&self.tenant) {
            h.builds = h.builds.saturating_sub(1);
            if h.is_empty() {
                all.remove(&self.tenant);
            }
        }
    }
}

/// The server-wide bound on bytes spooled from request bodies at once, in [`SPOOL_UNIT`]s.
pub(crate) struct SpoolBudget(Arc<Semaphore>);

impl SpoolBudget {
    pub(crate) fn new(bytes: u64) -> SpoolBudget {
        let units = (bytes / SPOOL_UNIT).clamp(1, Semaphore::MAX_PERMITS as u64) as usize;
        SpoolBudget(Arc::new(Semaphore::new(units)))
    }
}

/// An upload being spooled (an import archive, a build context), admitted before its body is read:
/// it holds the tenant's turn (imports) or one of its build places, and charges every byte to the
/// tenant's image quota and to the server's spool budget as it arrives.
pub struct ImageUpload {
    pub(crate) _turn: Option<OwnedMutexGuard<()>>,
    pub(crate) _build: Option<BuildSlot>,
    pub(crate) charge: Charge,
    /// The tenant's quota less its stored images (`u64::MAX` for a public image).
    pub(crate) room: u64,
    /// The server's import limit.
    pub(crate) max: u64,
    spool: Arc<Semaphore>,
    spooled: Option<OwnedSemaphorePermit>,
    written: u64,
}

impl ImageUpload {
    pub(crate) fn new(
        turn: Option<OwnedMutexGuard<()>>,
        build: Option<BuildSlot>,
        charge: Charge,
        room: u64,
        max: u64,
        spool: &SpoolBudget,
    ) -> ImageUpload {
        ImageUpload {
            _turn: turn,
            _build: build,
            charge,
            room,
            max,
            spool: Arc::clone(&spool.0),
            spooled: None,
            written: 0,
        }
    }

    /// Bytes taken so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Takes `n` more bytes of the body, or says which bound they would pass.
    pub fn take(&mut self, n: u64) -> Result<()> {
        let written = self.written.saturating_add(n);
        if written > self.max {
            return Err(Error::new(
                Kind::TooLarge,
                format!("the upload is over the server's limit of {} MiB (--max-import-mb)", self.max >> 20),
            ));
        }
        let units = written.div_ceil(SPOOL_UNIT);
        let have = self.spooled.as_ref().map_or(0, |p| p.num_permits() as u64);
        if units > have {
            let more = u32::try_from(units - have).unwrap_or(u32::MAX);
            let permit = Arc::clone(&self.spool).try_acquire_many_owned(more).map_err(|_| {
                Error::new(
                    Kind::ServerFull,
                    "server busy: uploads being received fill this server's spool budget (--spool-budget-mb); \
                     retry later",
                )
            })?;
            match &mut self.spooled {
                Some(p) => p.merge(permit),
                None => self.spooled = Some(permit),
            }
        }
        if let Err(total) = self.charge.add(n, self.room) {
            return Err(Error::limit(format!(
                "the upload would take the tenant's images to {} MiB, past its image quota (--image-quota-mb); \
                 delete images (sandlot image rm) and retry",
                total.div_ceil(1 << 20)
            )));
        }
        self.written = written;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_charges_of_a_tenant_share_its_room_and_failed_ones_stay_until_collected() {
        let charges = Charges::default();
        let mut a = charges.charge("alice");
        let mut b = charges.charge("alice");
        a.add(60, 100).unwrap();
        b.in_blobs();
        assert_eq!(b.add(41, 100), Err(101));
        b.add(40, 100).unwrap();
        // Bob's room is his own.
        charges.charge("bob").add(100, 100).unwrap();
        // A refused upload's bytes are gone with its spool file.
        assert_eq!(charges.held("bob"), 0);
        // A recorded one stops being charged here; a failed one stays until a collection.
        a.recorded();
        drop(a);
        drop(b);
        assert_eq!(charges.held("alice"), 40);
        let taken = charges.take_uncollected();
        assert_eq!(charges.held("alice"), 0);
        charges.restore_uncollected(taken);
        assert_eq!(charges.held("alice"), 40);
        charges.take_uncollected();
        assert!(lock(&charges.0).is_empty(), "{:?}", lock(&charges.0));
    }

    #[test]
    fn a_tenant_runs_at_most_its_builds_and_uploads_stay_within_the_spool_budget() {
        let charges = Charges::default();
        let slots: Vec<_> = (0..MAX_BUILDS_PER_TENANT).map(|_| charges.begin_build("alice").unwrap()).collect();
        assert_eq!(charges.begin_build("alice").err().map(|e| e.kind), Some(Kind::LimitReached));
        charges.begin_build("bob").unwrap();
        drop(slots);
        charges.begin_build("alice").unwrap();

        let spool = SpoolBudget::new(3 << 20);
        let mut one = ImageUpload::new(None, None, charges.charge("alice"), u64::MAX, 10 << 20, &spool);
        let mut two = ImageUpload::new(None, None, charges.charge("bob"), u64::MAX, 10 << 20, &spool);
        one.take(2 << 20).unwrap();
        two.take(1).unwrap();
        assert_eq!(two.take(1 << 20).unwrap_err().kind, Kind::ServerFull);
        drop(one);
        two.take(1 << 20).unwrap();
        assert_eq!(two.take(9 << 20).unwrap_err().kind, Kind::TooLarge);
        let mut three = ImageUpload::new(None, None, charges.charge("carol"), 5, 10 << 20, &spool);
        assert_eq!(three.take(6).unwrap_err().kind, Kind::LimitReached);
    }
}
