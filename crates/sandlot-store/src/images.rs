//! The `images` table: images pulled, imported or built, by owner. The image itself (manifest and
//! config digests, layers, config) is kept as the control layer's JSON, opaque here.

use std::collections::HashSet;

use rusqlite::{params, OptionalExtension};

use crate::{Result, SqliteStore};

/// The owner of images every tenant may use (published by an admin). Tenant names are never empty.
pub const PUBLIC: &str = "";

/// One stored image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRow {
    /// Owning tenant, or [`PUBLIC`].
    pub tenant: String,
    /// The name it is used by (`python:3.12`, `registry:5000/team/base:1`, an import's name).
    pub name: String,
    /// The fully qualified reference it was pulled from; `None` for imports and builds.
    pub reference: Option<String>,
    /// Digest of its manifest.
    pub digest: String,
    /// Digest of its config: the key of its unpacked root.
    pub image_key: String,
    /// The control layer's JSON of the image.
    pub image: String,
    /// Its size: its blobs (compressed layers and config), what its layers added to the layers
    /// volume, and its rows here. A tenant is charged this less the blobs another of its images
    /// already holds ([`Images::image_usage`]).
    pub bytes: u64,
    /// The blobs it names (layers and config) and their sizes, bytes: what is charged once however
    /// many of the owner's images share them (a common base image).
    pub blobs: Vec<(String, u64)>,
    /// When it was stored.
    pub created_ms: i64,
}

const COLUMNS: &str = "SELECT tenant, name, reference, digest, image_key, image, bytes, created_ms, blobs FROM images";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ImageRow> {
    Ok(ImageRow {
        tenant: r.get(0)?,
        name: r.get(1)?,
        reference: r.get(2)?,
        digest: r.get(3)?,
        image_key: r.get(4)?,
        image: r.get(5)?,
        bytes: r.get::<_, i64>(6)? as u64,
        created_ms: r.get(7)?,
        blobs: serde_json::from_str(&r.get::<_, String>(8)?).unwrap_or_default(),
    })
}

/// Images, their unpacked roots and the build cache.
pub trait Images {
    /// Stores `image`, replacing the owner's image of the same name (a tag pulled again).
    fn put_image(&self, image: &ImageRow) -> Result<()>;

    /// `owner`'s image called `name` (exactly; the control layer tries the tenant, then [`PUBLIC`]).
    fn get_image(&self, owner: &str, name: &str) -> Result<Option<ImageRow>>;

    /// The images `tenant` may use: its own and the public ones, by name.
    fn list_images(&self, tenant: &str) -> Result<Vec<ImageRow>>;

    /// Calls `f` with each stored image's JSON, of every owner, one row in memory at a time (garbage
    /// collection keeps what these use).
    fn each_image(&self, f: &mut dyn FnMut(&str)) -> Result<()>;

    /// Removes `owner`'s image `name`; `false` if there was none.
    fn delete_image(&self, owner: &str, name: &str) -> Result<bool>;

    /// How many images `tenant` owns, and the bytes it is charged for images: those it owns, with a
    /// blob several of them share (a base image's layers) counted once, plus the roots its sandboxes
    /// and snapshots keep that none of its own or the public images name (an image deleted while a
    /// snapshot pins its files still takes their room).
    fn image_usage(&self, tenant: &str) -> Result<(u64, u64)>;

    /// [`Images::image_usage`] as if `tenant`'s image `without` were gone (the image a new one of that
    /// name replaces).
    fn image_usage_without(&self, tenant: &str, without: Option<&str>) -> Result<(u64, u64)>;

    /// The blobs `tenant`'s images name, but for image `without`: what a new image of the tenant's
    /// sharing them is not charged again.
    fn image_blobs(&self, tenant: &str, without: Option<&str>) -> Result<HashSet<String>>;

    /// Records how image root `key` runs (its config, the control layer's JSON) and the image it
    /// was made from (its layers, for an image built on top of it): kept as long as anything boots
    /// the root, even after every image naming it is deleted. `bytes` is what the root is charged to
    /// a tenant that keeps it without an image naming it.
    fn put_image_root(&self, key: &str, config: &str, image: &str, bytes: u64, at_ms: i64) -> Result<()>;

    /// The image (the control layer's JSON) root `key` was made from, if recorded (roots recorded by
    /// an older server have none).
    fn image_root_image(&self, key: &str) -> Result<Option<String>>;

    /// The build cache's result for step `key` of `tenant`'s builds (the control layer's JSON).
    fn build_step(&self, tenant: &str, key: &str) -> Result<Option<String>>;

    /// Keeps each tenant's `keep` newest build-cache rows and drops the rest (the cache must not grow
    /// with every Dockerfile ever built); returns how many went.
    fn prune_build_cache(&self, keep: u64) -> Result<usize>;

    /// Records the result of build step `key` for `tenant` (each tenant has its own cache: one never
    /// learns from a hit what another built).
    fn put_build_step(&self, tenant: &str, key: &str, result: &str, at_ms: i64) -> Result<()>;

    /// How image root `key` runs, if it is recorded.
    fn image_root_config(&self, key: &str) -> Result<Option<String>>;

    /// Forgets image roots not in `keep`; returns how many went.
    fn forget_image_roots(&self, keep: &HashSet<String>) -> Result<usize>;

    /// Image roots something still boots or may boot: stored images, sandboxes not deleted, and
    /// snapshots not deleted (a snapshot's sandboxes boot the root it was taken over).
    fn image_keys_in_use(&self) -> Result<HashSet<String>>;
}

impl Images for SqliteStore {
    fn put_image(&self, image: &ImageRow) -> Result<()> {
        self.conn().execute(
            "INSERT OR REPLACE INTO images(tenant, name, reference, digest, image_key, image, bytes, created_ms, blobs)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                image.tenant,
                image.name,
                image.reference,
                image.digest,
                image.image_key,
                image.image,
                image.bytes as i64,
                image.created_ms,
                serde_json::to_string(&image.blobs).expect("serialisable"),
            ],
        )?;
        Ok(())
    }

    fn get_image(&self, owner: &str, name: &str) -> Result<Option<ImageRow>> {
        let sql = format!("{COLUMNS} WHERE tenant = ?1 AND name = ?2");
        Ok(self.conn().query_row(&sql, params![owner, name], row).optional()?)
    }

    fn list_images(&self, tenant: &str) -> Result<Vec<ImageRow>> {
        let sql = format!("{COLUMNS} WHERE tenant = ?1 OR tenant = ?2 ORDER BY name, tenant DESC");
        let conn = self.conn();
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map(params![tenant, PUBLIC], row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    fn each_image(&self, f: &mut dyn FnMut(&str)) -> Result<()> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT image FROM images")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let json: String = r.get(0)?;
            f(&json);
        }
        Ok(())
    }

    fn delete_image(&self, owner: &str, name: &str) -> Result<bool> {
        Ok(self.conn().execute("DELETE FROM images WHERE tenant = ?1 AND name = ?2", params![owner, name])? > 0)
    }

    fn image_usage(&self, tenant: &str) -> Result<(u64, u64)> {
        self.image_usage_without(tenant, None)
    }

    fn image_usage_without(&self, tenant: &str, without: Option<&str>) -> Result<(u64, u64)> {
        // Each image's own share (its size less its blobs), then each distinct blob once.
        let (n, bytes): (i64, i64) = self.conn().query_row(
            "SELECT COUNT(*), COALESCE(SUM(bytes - (SELECT COALESCE(SUM(json_extract(b.value, '$[1]')), 0)
                                                    FROM json_each(images.blobs) AS b)), 0)
               FROM images WHERE tenant = ?1 AND name IS NOT ?2",
            params![tenant, without],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let blobs: i64 = self.conn().query_row(
            "SELECT COALESCE(SUM(size), 0) FROM (
                 SELECT json_extract(b.value, '$[0]') AS blob, MAX(json_extract(b.value, '$[1]')) AS size
                   FROM images, json_each(images.blobs) AS b
                  WHERE images.tenant = ?1 AND images.name IS NOT ?2
                  GROUP BY blob)",
            params![tenant, without],
            |r| r.get(0),
        )?;
        let bytes = bytes + blobs;
        let pinned: i64 = self.conn().query_row(
            "SELECT COALESCE(SUM(bytes), 0) FROM image_roots WHERE image_key IN (
                 SELECT image_key FROM sandboxes WHERE tenant = ?1 AND state != 'deleted' AND image_key IS NOT NULL
                 UNION SELECT image_key FROM snapshots WHERE tenant = ?1 AND deleted = 0 AND image_key IS NOT NULL)
             AND image_key NOT IN (SELECT image_key FROM images WHERE tenant = ?1 OR tenant = ?2)",
            params![tenant, PUBLIC],
            |r| r.get(0),
        )?;
        Ok((n as u64, (bytes + pinned) as u64))
    }

    fn image_blobs(&self, tenant: &str, without: Option<&str>) -> Result<HashSet<String>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT DISTINCT json_extract(b.value, '$[0]') FROM images, json_each(images.blobs) AS b
              WHERE images.tenant = ?1 AND images.name IS NOT ?2",
        )?;
        let rows = stmt.query_map(params![tenant, without], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<rusqlite::Result<HashSet<_>>>()?)
    }

    fn put_image_root(&self, key: &str, config: &str, image: &str, bytes: u64, at_ms: i64) -> Result<()> {
        self.conn().execute(
            "INSERT INTO image_roots(image_key, config, image, created_ms, bytes) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT(image_key) DO UPDATE SET config = ?2, image = ?3, bytes = max(bytes, ?5)",
            params![key, config, image, at_ms, bytes as i64],
        )?;
        Ok(())
    }

    fn image_root_image(&self, key: &str) -> Result<Option<String>> {
        Ok(self
            .conn()
            .query_row("SELECT image FROM image_roots WHERE image_key = ?1", params![key], |r| r.get(0))
            .optional()?
            .flatten())
    }

    fn build_step(&self, tenant: &str, key: &str) -> Result<Option<String>> {
        Ok(self
            .conn()
            .query_row("SELECT result FROM build_cache WHERE tenant = ?1 AND key = ?2", params![tenant, key], |r| {
                r.get(0)
            })
            .optional()?)
    }

    fn prune_build_cache(&self, keep: u64) -> Result<usize> {
        Ok(self.conn().execute(
            "DELETE FROM build_cache WHERE rowid IN (
                 SELECT rowid FROM (
                     SELECT rowid, ROW_NUMBER() OVER (PARTITION BY tenant ORDER BY created_ms DESC, rowid DESC) AS n
                     FROM build_cache)
                 WHERE n > ?1)",
            params![keep as i64],
        )?)
    }

    fn put_build_step(&self, tenant: &str, key: &str, result: &str, at_ms: i64) -> Result<()> {
        self.conn().execute(
            "INSERT OR REPLACE INTO build_cache(tenant, key, result, created_ms) VALUES (?1, ?2, ?3, ?4)",
            params![tenant, key, result, at_ms],
        )?;
        Ok(())
    }

    fn image_root_config(&self, key: &str) -> Result<Option<String>> {
        Ok(self
            .conn()
            .query_row("SELECT config FROM image_roots WHERE image_key = ?1", params![key], |r| r.get(0))
            .optional()?)
    }

    fn forget_image_roots(&self, keep: &HashSet<String>) -> Result<usize> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT image_key FROM image_roots")?;
        let all: Vec<String> = stmt.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
        let mut n = 0;
        for key in all.iter().filter(|k| !keep.contains(*k)) {
            n += conn.execute("DELETE FROM image_roots WHERE image_key = ?1", params![key])?;
        }
        Ok(n)
    }

    fn image_keys_in_use(&self) -> Result<HashSet<String>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT image_key FROM images
             UNION SELECT image_key FROM sandboxes WHERE state != 'deleted' AND image_key IS NOT NULL
             UNION SELECT image_key FROM snapshots WHERE deleted = 0 AND image_key IS NOT NULL",
        )?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<rusqlite::Result<HashSet<_>>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::*;

    fn image(tenant: &str, name: &str, key: &str) -> ImageRow {
        ImageRow {
            tenant: tenant.into(),
            name: name.into(),
            reference: None,
            digest: format!("sha256:{}", "d".repeat(64)),
            image_key: key.into(),
            image: "{}".into(),
            bytes: 10,
            created_ms: 1,
            blobs: Vec::new(),
        }
    }

    #[test]
    fn a_blob_several_of_a_tenants_images_share_is_charged_once() {
        let store = SqliteStore::open_in_memory().unwrap();
        let with = |name: &str, blobs: &[(&str, u64)]| ImageRow {
            bytes: 100 + blobs.iter().map(|b| b.1).sum::<u64>(),
            blobs: blobs.iter().map(|(d, s)| (d.to_string(), *s)).collect(),
            ..image("a", name, name)
        };
        // Two images on one 1000-byte base layer, each with a layer of its own and 100 bytes unpacked.
        store.put_image(&with("one", &[("base", 1000), ("l1", 10)])).unwrap();
        store.put_image(&with("two", &[("base", 1000), ("l2", 20)])).unwrap();
        assert_eq!(store.image_usage("a").unwrap(), (2, 100 + 100 + 1000 + 10 + 20));
        assert_eq!(store.get_image("a", "two").unwrap().unwrap().bytes, 1120, "an image's own size is whole");
        // Replacing `two` frees only what is its alone.
        assert_eq!(store.image_usage_without("a", Some("two")).unwrap(), (1, 1110));
        let held = store.image_blobs("a", Some("two")).unwrap();
        assert_eq!(held, HashSet::from(["base".to_string(), "l1".to_string()]));
        // Another tenant's image on the same base is charged to it in full.
        store.put_image(&ImageRow { tenant: "b".into(), ..with("three", &[("base", 1000)]) }).unwrap();
        assert_eq!(store.image_usage("b").unwrap(), (1, 1100));
        store.delete_image("a", "one").unwrap();
        assert_eq!(store.image_usage("a").unwrap(), (1, 1120));
    }

    #[test]
    fn images_are_per_owner_and_public_ones_are_listed_for_everyone() {
        let store = SqliteStore::open_in_memory().unwrap();
        store.put_image(&image("a", "py", "k1")).unwrap();
        store.put_image(&image(PUBLIC, "base", "k2")).unwrap();
        store.put_image(&image("b", "py", "k3")).unwrap();
        assert_eq!(store.get_image("a", "py").unwrap().unwrap().image_key, "k1");
        assert!(store.get_image("a", "base").unwrap().is_none());
        let names: Vec<_> = store.list_images("a").unwrap().into_iter().map(|i| (i.tenant, i.name)).collect();
        assert_eq!(names, vec![(PUBLIC.to_string(), "base".to_string()), ("a".into(), "py".into())]);
        // Pulled again: replaced, not duplicated.
        store.put_image(&image("a", "py", "k4")).unwrap();
        assert_eq!(store.list_images("a").unwrap().len(), 2);
        assert_eq!(store.image_usage("a").unwrap(), (1, 10));
        assert!(store.delete_image("a", "py").unwrap());
        assert!(!store.delete_image("a", "py").unwrap());
        let keys = store.image_keys_in_use().unwrap();
        assert_eq!(keys, HashSet::from(["k2".to_string(), "k3".to_string()]));
    }

    #[test]
    fn a_root_a_sandbox_keeps_is_charged_once_no_image_of_the_tenant_names_it() {
        let store = SqliteStore::open_in_memory().unwrap();
        store.create_key("a", false).unwrap();
        let rec = crate::conformance::record("sb_1", "a", Some("n"));
        let key = rec.image_key.clone().unwrap();
        store.insert_sandbox(&rec).unwrap();
        store.put_image_root(&key, "{}", "{}", 500, 1).unwrap();
        store.put_image(&image("a", "py", &key)).unwrap();
        assert_eq!(store.image_usage("a").unwrap(), (1, 10), "charged as the image while it exists");
        store.delete_image("a", "py").unwrap();
        assert_eq!(store.image_usage("a").unwrap(), (0, 500), "the pinned root is charged");
        store.put_image(&image(PUBLIC, "base", &key)).unwrap();
        assert_eq!(store.image_usage("a").unwrap(), (0, 0), "a public image's root is the admin's");
    }

    #[test]
    fn the_build_cache_keeps_each_tenants_newest_rows() {
        let store = SqliteStore::open_in_memory().unwrap();
        for i in 0..5 {
            store.put_build_step("a", &format!("k{i}"), "{}", i).unwrap();
        }
        store.put_build_step("b", "only", "{}", 0).unwrap();
        assert_eq!(store.prune_build_cache(3).unwrap(), 2);
        assert!(store.build_step("a", "k0").unwrap().is_none() && store.build_step("a", "k1").unwrap().is_none());
        assert!(store.build_step("a", "k4").unwrap().is_some() && store.build_step("a", "k2").unwrap().is_some());
        assert!(store.build_step("b", "only").unwrap().is_some(), "another tenant's rows are its own");
    }

    #[test]
    fn a_root_config_outlives_its_images_until_forgotten() {
        let store = SqliteStore::open_in_memory().unwrap();
        store.put_image_root("k1", r#"{"env":["A=1"]}"#, r#"{"layers":[]}"#, 10, 1).unwrap();
        store.put_image_root("k2", "{}", "{}", 10, 1).unwrap();
        assert_eq!(store.image_root_config("k1").unwrap().as_deref(), Some(r#"{"env":["A=1"]}"#));
        assert_eq!(store.image_root_image("k1").unwrap().as_deref(), Some(r#"{"layers":[]}"#));
        assert_eq!(store.image_root_image("k9").unwrap(), None);
        assert_eq!(store.forget_image_roots(&HashSet::from(["k2".to_string()])).unwrap(), 1);
        assert_eq!(store.image_root_config("k1").unwrap(), None);
        assert!(store.image_root_config("k2").unwrap().is_some());
    }

    #[test]
    fn the_build_cache_is_per_tenant() {
        let store = SqliteStore::open_in_memory().unwrap();
        store.put_build_step("t1", "sha256:k", r#"{"layer":null}"#, 1).unwrap();
        assert_eq!(store.build_step("t1", "sha256:k").unwrap().as_deref(), Some(r#"{"layer":null}"#));
        assert_eq!(store.build_step("t2", "sha256:k").unwrap(), None);
    }
}
