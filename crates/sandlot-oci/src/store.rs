//! A content-addressed blob store: `dir/sha256/<hex>`, each file written whole or not at all.
//!
//! A blob is copied into a temporary file in the same directory while it is hashed and counted; it is
//! fsynced and renamed to its digest only when the digest is the expected one and the size cap held.
//! Any other outcome removes the temporary file, so a reader never sees a partial or wrong blob, and a
//! crash leaves only temporary files, which [`BlobStore::open`] removes.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest as _, Sha256};

use crate::Digest;

/// Prefix of temporary files; no digest hex starts with '.'.
const TEMP_PREFIX: &str = ".tmp-";

/// Why a blob was not stored.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Reading the source failed (for a pull: the network).
    #[error("reading the blob failed: {0}")]
    Read(#[source] io::Error),
    /// Writing the store failed.
    #[error("writing the blob store failed: {0}")]
    Write(#[source] io::Error),
    /// The source had more than `max` bytes.
    #[error("the blob is larger than its limit of {max} bytes")]
    TooLarge {
        /// The cap that was exceeded.
        max: u64,
    },
    /// The bytes do not hash to the expected digest.
    #[error("the blob's content has digest {actual}, not the expected {expected}; it was corrupted or tampered with")]
    DigestMismatch {
        /// The digest that was named.
        expected: Digest,
        /// The digest of what arrived.
        actual: Digest,
    },
}

/// Blobs under `dir/sha256`, named by their hex digest.
#[derive(Debug)]
pub struct BlobStore {
    blobs: PathBuf,
    next_temp: AtomicU64,
}

impl BlobStore {
    /// Opens (creating) the store in `dir` and removes temporary files an earlier process left.
    pub fn open(dir: &Path) -> io::Result<BlobStore> {
        let blobs = dir.join("sha256");
        fs::create_dir_all(&blobs)?;
        for entry in fs::read_dir(&blobs)? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
                fs::remove_file(entry.path())?;
            }
        }
        Ok(BlobStore { blobs, next_temp: AtomicU64::new(0) })
    }

    /// Where the blob `d` is (or would be).
    pub fn path(&self, d: &Digest) -> PathBuf {
        self.blobs.join(d.hex())
    }

    /// Whether the blob `d` is stored.
    pub fn contains(&self, d: &Digest) -> bool {
        fs::symlink_metadata(self.path(d)).is_ok_and(|m| m.is_file())
    }

    /// Opens the blob `d` for reading.
    pub fn open_blob(&self, d: &Digest) -> io::Result<File> {
        File::open(self.path(d))
    }

    /// Copies `r` into the store while hashing; the blob appears (fsync + rename) only if it matches
    /// `expected` and `max_bytes` was not exceeded; otherwise nothing is left behind.
    /// `progress(bytes_so_far)` is called after every chunk. Returns the blob's size.
    pub fn put_verified(
        &self,
        r: impl Read,
        expected: &Digest,
        max_bytes: u64,
        progress: &mut dyn FnMut(u64),
    ) -> Result<u64, StoreError> {
        let (temp, actual, size) = self.spool(r, max_bytes, progress)?;
        if &actual != expected {
            let _ = fs::remove_file(&temp);
            return Err(StoreError::DigestMismatch { expected: expected.clone(), actual });
        }
        self.publish(&temp, &actual)?;
        Ok(size)
    }

    /// Copies `r` into the store, computing its digest (for imports and built layers).
    pub fn put(&self, r: impl Read, max_bytes: u64) -> Result<(Digest, u64), StoreError> {
        let (temp, digest, size) = self.spool(r, max_bytes, &mut |_| {})?;
        self.publish(&temp, &digest)?;
        Ok((digest, size))
    }

    /// Copies `r` into a temporary file in the store, hashing, without publishing it: the caller
    /// inspects it and either [`Spooled::keep`]s it as a blob or drops it (which removes it).
    pub fn spool_temp(&self, r: impl Read, max_bytes: u64) -> Result<Spooled<'_>, StoreError> {
        let (path, digest, size) = self.spool(r, max_bytes, &mut |_| {})?;
        Ok(Spooled { store: self, path, digest, size, kept: false })
    }

    /// Stores `bytes` (small documents: manifests, configs).
    pub fn put_bytes(&self, bytes: &[u8]) -> Result<Digest, StoreError> {
        self.put(bytes, bytes.len() as u64).map(|(d, _)| d)
    }

    /// Reads a whole blob of at most `max_bytes` into memory, checking its digest again (a store file
    /// could have been damaged on disk since it was written).
    pub fn read_verified(&self, d: &Digest, max_bytes: u64) -> io::Result<Vec<u8>> {
        let file = self.open_blob(d)?;
        let len = file.metadata()?.len();
        if len > max_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("blob {d} has {len} bytes, over the {max_bytes}-byte limit"),
            ));
        }
        let mut bytes = Vec::with_capacity(len as usize);
        file.take(max_bytes + 1).read_to_end(&mut bytes)?;
        if &Digest::of(&bytes) != d {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("stored blob {d} does not match its digest; remove it and pull again"),
            ));
        }
        Ok(bytes)
    }

    /// Removes the blob `d`; a missing blob is not an error.
    pub fn remove(&self, d: &Digest) -> io::Result<()> {
        match fs::remove_file(self.path(d)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    /// Every stored blob, sorted.
    pub fn list(&self) -> io::Result<Vec<Digest>> {
        let mut v = Vec::new();
        for entry in fs::read_dir(&self.blobs)? {
            let name = entry?.file_name();
            // Temporary files and anything foreign are not blobs.
            if let Some(d) = name.to_str().and_then(|n| Digest::parse(&format!("sha256:{n}")).ok()) {
                v.push(d);
            }
        }
        v.sort();
        Ok(v)
    }

    /// A new temporary file in the store, already unlinked (it goes when closed): where a build
    /// spools the files it copies from a stage.
    pub fn scratch_file(&self) -> io::Result<File> {
        let n = self.next_temp.fetch_add(1, Ordering::Relaxed);
        let temp = self.blobs.join(format!("{TEMP_PREFIX}{}-{n}", std::process::id()));
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&temp)?;
        fs::remove_file(&temp)?;
        Ok(file)
    }

    /// The size in bytes of the blob `d`.
    pub fn size(&self, d: &Digest) -> io::Result<u64> {
        Ok(fs::metadata(self.path(d))?.len())
    }

    /// Copies at most `max_bytes` of `r` into a new temporary file, hashing; removes it on any error.
    fn spool(
        &self,
        mut r: impl Read,
        max_bytes: u64,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(PathBuf, Digest, u64), StoreError> {
        let n = self.next_temp.fetch_add(1, Ordering::Relaxed);
        let temp = self.blobs.join(format!("{TEMP_PREFIX}{}-{n}", std::process::id()));
        let mut file = OpenOptions::new().write(true).create_new(true).open(&temp).map_err(StoreError::Write)?;
        let result = (|| {
            let mut hasher = Sha256::new();
            let mut size = 0u64;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let got = match r.read(&mut buf) {
                    Ok(0) => break,
                    Ok(got) => got,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(StoreError::Read(e)),
                };
                size += got as u64;
                if size > max_bytes {
                    return Err(StoreError::TooLarge { max: max_bytes });
                }
                hasher.update(&buf[..got]);
                file.write_all(&buf[..got]).map_err(StoreError::Write)?;
                progress(size);
            }
            file.sync_all().map_err(StoreError::Write)?;
            Ok((Digest::from_hasher(hasher), size))
        })();
        match result {
            Ok((d, size)) => Ok((temp, d, size)),
            Err(e) => {
                let _ = fs::remove_file(&temp);
                Err(e)
            }
        }
    }

    /// Renames a verified temporary file to its digest and makes the rename durable.
    fn publish(&self, temp: &Path, d: &Digest) -> Result<(), StoreError> {
        if let Err(e) = fs::rename(temp, self.path(d)) {
            let _ = fs::remove_file(temp);
            return Err(StoreError::Write(e));
        }
        File::open(&self.blobs).and_then(|dir| dir.sync_all()).map_err(StoreError::Write)
    }
}

/// A hashed temporary file in the store, removed on drop unless kept.
#[derive(Debug)]
pub struct Spooled<'a> {
    store: &'a BlobStore,
    path: PathBuf,
    /// The digest of its content.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
    kept: bool,
}

impl Spooled<'_> {
    /// Where the temporary file is (for reading it again).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Publishes the file as the blob [`Spooled::digest`].
    pub fn keep(mut self) -> Result<Digest, StoreError> {
        self.kept = true;
        self.store.publish(&self.path, &self.digest)?;
        Ok(self.digest.clone())
    }
}

impl Drop for Spooled<'_> {
    fn drop(&mut self) {
        if !self.kept {
            let _ = fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(store: &BlobStore) -> Vec<String> {
        let mut v: Vec<String> =
            fs::read_dir(&store.blobs).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    }

    #[test]
    fn verified_put_stores_under_the_digest() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path()).unwrap();
        let d = Digest::of(b"hello");
        let mut seen = Vec::new();
        assert_eq!(store.put_verified(&b"hello"[..], &d, 5, &mut |n| seen.push(n)).unwrap(), 5);
        assert_eq!(seen, vec![5]);
        assert!(store.contains(&d));
        assert_eq!(fs::read(store.path(&d)).unwrap(), b"hello");
        assert_eq!(store.path(&d), dir.path().join("sha256").join(d.hex()));
        assert_eq!(store.list().unwrap(), vec![d.clone()]);
        assert_eq!(store.size(&d).unwrap(), 5);
        assert_eq!(store.read_verified(&d, 5).unwrap(), b"hello");
        store.remove(&d).unwrap();
        store.remove(&d).unwrap();
        assert!(!store.contains(&d));
    }

    #[test]
    fn wrong_digest_or_too_many_bytes_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path()).unwrap();
        let d = Digest::of(b"hello");
        let err = store.put_verified(&b"hellO"[..], &d, 100, &mut |_| {}).unwrap_err();
        assert!(
            matches!(err, StoreError::DigestMismatch { ref actual, .. } if *actual == Digest::of(b"hellO")),
            "{err}"
        );
        let err = store.put_verified(&b"hello"[..], &d, 4, &mut |_| {}).unwrap_err();
        assert!(matches!(err, StoreError::TooLarge { max: 4 }), "{err}");
        let err = store.put(&b"hello"[..], 4).unwrap_err();
        assert!(matches!(err, StoreError::TooLarge { max: 4 }), "{err}");
        assert_eq!(entries(&store), Vec::<String>::new());
    }

    #[test]
    fn open_removes_leftover_temp_files_and_list_ignores_foreign_names() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path()).unwrap();
        fs::write(store.blobs.join(".tmp-1-0"), b"partial").unwrap();
        fs::write(store.blobs.join("not-a-digest"), b"x").unwrap();
        let (d, n) = store.put(&b"abc"[..], 3).unwrap();
        assert_eq!((d.clone(), n), (Digest::of(b"abc"), 3));
        let store = BlobStore::open(dir.path()).unwrap();
        assert_eq!(entries(&store), vec![d.hex().to_owned(), "not-a-digest".to_owned()]);
        assert_eq!(store.list().unwrap(), vec![d]);
    }

    #[test]
    fn spooled_files_are_removed_unless_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path()).unwrap();
        let dropped = store.spool_temp(&b"one"[..], 10).unwrap();
        assert_eq!(fs::read(dropped.path()).unwrap(), b"one");
        drop(dropped);
        assert_eq!(entries(&store), Vec::<String>::new());
        let kept = store.spool_temp(&b"two"[..], 10).unwrap();
        assert_eq!(kept.size, 3);
        let d = kept.keep().unwrap();
        assert_eq!(entries(&store), vec![d.hex().to_owned()]);
    }

    #[test]
    fn read_verified_notices_a_damaged_blob() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path()).unwrap();
        let d = store.put_bytes(b"abc").unwrap();
        fs::write(store.path(&d), b"abd").unwrap();
        assert!(store.read_verified(&d, 10).unwrap_err().to_string().contains("does not match"));
        assert!(store.read_verified(&d, 2).unwrap_err().to_string().contains("limit"));
    }
}
