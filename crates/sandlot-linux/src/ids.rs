//! Host uid/gid ranges for sandboxes, allocated host-wide.
//!
//! Each range ("slot") is claimed by holding an exclusive `flock` on `/run/sandlot/slots/<n>` for the life
//! of the sandbox. The kernel drops the lock when the holder dies, so a crashed daemon frees its slots,
//! and two daemons on one host (or parallel test servers) can never hand out the same host ids.

use std::fs::{self, File};
use std::io;
use std::path::Path;

use crate::IdRange;

/// Directory of the slot lock files.
pub const SLOT_DIR: &str = "/run/sandlot/slots";
/// Slots available: 4096 sandboxes at once per host, ids up to 0x10000000 + 4096 * 65536 = 0x20000000.
pub const SLOTS: u32 = 4096;

/// A claimed uid range; dropping it frees the slot.
#[derive(Debug)]
pub struct UidSlot {
    /// Slot number.
    pub n: u32,
    _lock: File,
}

impl UidSlot {
    /// The host id range of this slot.
    pub fn ids(&self) -> IdRange {
        IdRange::for_slot(self.n)
    }
}

fn try_lock(dir: &Path, n: u32) -> io::Result<Option<UidSlot>> {
    Ok(crate::try_flock(&dir.join(n.to_string()))?.map(|file| UidSlot { n, _lock: file }))
}

/// Claims `preferred` if free, else the lowest free slot.
pub fn claim(preferred: Option<u32>) -> io::Result<UidSlot> {
    let dir = Path::new(SLOT_DIR);
    fs::create_dir_all(dir)?;
    if let Some(p) = preferred.filter(|p| *p < SLOTS) {
        if let Some(s) = try_lock(dir, p)? {
            return Ok(s);
        }
    }
    for n in 0..SLOTS {
        if let Some(s) = try_lock(dir, n)? {
            return Ok(s);
        }
    }
    Err(io::Error::other(format!("all {SLOTS} host uid ranges are in use")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_slot_is_not_handed_out_twice() {
        let a = claim(Some(4000)).unwrap();
        let b = claim(Some(4000)).unwrap();
        assert_eq!(a.n, 4000);
        assert_ne!(b.n, 4000);
        drop(a);
        let c = claim(Some(4000)).unwrap();
        assert_eq!(c.n, 4000);
    }
}
