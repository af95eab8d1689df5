//! A sandbox cgroup's figures for metrics, read from the kernel's files of either hierarchy: CPU use and
//! throttling, memory (now, peak, limit, OOM kills) and processes (now, limit).
//!
//! What is read where (`<id>` is the sandbox's cgroup, `<id>/work` the leaf its commands run in, which
//! holds the limits proper; see [`crate::cgroup`]):
//!
//! | figure | cgroup v2 | cgroup v1 |
//! | --- | --- | --- |
//! | CPU time | `<id>/cpu.stat` `usage_usec` | `cpuacct/<id>/cpuacct.usage` (ns) |
//! | throttling | `<id>/cpu.stat` `nr_periods`, `nr_throttled`, `throttled_usec` | `cpu/<id>/cpu.stat` `nr_periods`, `nr_throttled`, `throttled_time` (ns) |
//! | memory now | `<id>/memory.current` | `memory/<id>/memory.usage_in_bytes` |
//! | page cache | `<id>/memory.stat` `file` | `memory/<id>/memory.stat` `total_cache` |
//! | memory peak | `<id>/memory.peak` (Linux 5.19+) | `memory/<id>/memory.max_usage_in_bytes` |
//! | memory limit | `<id>/work/memory.max` | `memory/<id>/work/memory.limit_in_bytes` |
//! | OOM kills | `<id>/work/memory.events` `oom_kill` | `memory/<id>/work/memory.oom_control` `oom_kill` |
//! | processes now | `<id>/pids.current` | `pids/<id>/pids.current` |
//! | process limit | `<id>/work/pids.max` | `pids/<id>/work/pids.max` |
//!
//! "Now" and "peak" cover the whole sandbox (the supervisor in its headroom included); limits and OOM
//! kills are the command leaf's, the limits the sandbox was created with. A file the kernel does not
//! offer (an older kernel, a controller not mounted) leaves its figure `None`; nothing is guessed.

use std::fs;
use std::path::{Path, PathBuf};

/// One reading of a sandbox cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupStats {
    /// CPU time used since the cgroup was made, microseconds.
    pub cpu_usec: Option<u64>,
    /// CPU quota periods that have elapsed with runnable tasks.
    pub cpu_periods: Option<u64>,
    /// Of those, periods in which the quota ran out (the sandbox was throttled).
    pub cpu_throttled_periods: Option<u64>,
    /// Time the sandbox's tasks spent throttled, microseconds.
    pub cpu_throttled_usec: Option<u64>,
    /// Memory charged now, page cache included, bytes.
    pub memory_bytes: Option<u64>,
    /// Of that, page cache, bytes.
    pub cache_bytes: u64,
    /// Most memory charged at once since the cgroup was made, bytes.
    pub memory_peak_bytes: Option<u64>,
    /// Memory limit of the command leaf, bytes (`None`: unlimited or unknown).
    pub memory_limit_bytes: Option<u64>,
    /// Processes the kernel's OOM killer has killed in the command leaf.
    pub oom_kills: Option<u64>,
    /// Processes and threads now.
    pub pids: Option<u64>,
    /// Process limit of the command leaf (`None`: unlimited or unknown).
    pub pids_limit: Option<u64>,
}

/// The value of `key` in a flat-keyed file (`key value` per line: `cpu.stat`, `memory.stat`,
/// `memory.events`, `memory.oom_control`).
pub fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// A single-value file: a number, or `max` (no limit, `None`). v1's "no limit" is a huge number
/// (`PAGE_COUNTER_MAX` pages), also `None`.
pub fn single(text: &str) -> Option<u64> {
    let t = text.trim();
    if t == "max" {
        return None;
    }
    t.parse().ok().filter(|v| *v < V1_UNLIMITED)
}

/// At or above this, a v1 limit means "none" (the kernel writes `PAGE_COUNTER_MAX * PAGE_SIZE`,
/// 9223372036854771712 on 64-bit hosts).
const V1_UNLIMITED: u64 = 1 << 62;

fn read(p: PathBuf) -> Option<String> {
    fs::read_to_string(p).ok()
}

/// Reads the figures of a cgroup v2 sandbox whose cgroup is `dir`.
pub(crate) fn read_v2(dir: &Path, work: &str) -> CgroupStats {
    let cpu = read(dir.join("cpu.stat")).unwrap_or_default();
    let events = read(dir.join(work).join("memory.events")).unwrap_or_default();
    CgroupStats {
        cpu_usec: keyed(&cpu, "usage_usec"),
        cpu_periods: keyed(&cpu, "nr_periods"),
        cpu_throttled_periods: keyed(&cpu, "nr_throttled"),
        cpu_throttled_usec: keyed(&cpu, "throttled_usec"),
        memory_bytes: read(dir.join("memory.current")).as_deref().and_then(single),
        cache_bytes: read(dir.join("memory.stat")).and_then(|s| keyed(&s, "file")).unwrap_or(0),
        memory_peak_bytes: read(dir.join("memory.peak")).as_deref().and_then(single),
        memory_limit_bytes: read(dir.join(work).join("memory.max")).as_deref().and_then(single),
        oom_kills: keyed(&events, "oom_kill"),
        pids: read(dir.join("pids.current")).as_deref().and_then(single),
        pids_limit: read(dir.join(work).join("pids.max")).as_deref().and_then(single),
    }
}

/// Reads the figures of a cgroup v1 sandbox from its directory in each hierarchy (`dir_of(controller)`;
/// a hierarchy not mounted gives `None` and its figures stay unknown).
pub(crate) fn read_v1(dir_of: impl Fn(&str) -> Option<PathBuf>, work: &str) -> CgroupStats {
    let cpu = dir_of("cpu").and_then(|d| read(d.join("cpu.stat"))).unwrap_or_default();
    let mem = dir_of("memory");
    let mem_file =
        |leaf: bool, f: &str| mem.as_ref().and_then(|d| read(if leaf { d.join(work).join(f) } else { d.join(f) }));
    let pids = dir_of("pids");
    let pids_file =
        |leaf: bool, f: &str| pids.as_ref().and_then(|d| read(if leaf { d.join(work).join(f) } else { d.join(f) }));
    CgroupStats {
        cpu_usec: dir_of("cpuacct")
            .and_then(|d| read(d.join("cpuacct.usage")))
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(|ns| ns / 1000),
        cpu_periods: keyed(&cpu, "nr_periods"),
        cpu_throttled_periods: keyed(&cpu, "nr_throttled"),
        cpu_throttled_usec: keyed(&cpu, "throttled_time").map(|ns| ns / 1000),
        memory_bytes: mem_file(false, "memory.usage_in_bytes").as_deref().and_then(single),
        // Hierarchical: the `sup` and `work` leaves count too.
        cache_bytes: mem_file(false, "memory.stat").and_then(|s| keyed(&s, "total_cache")).unwrap_or(0),
        memory_peak_bytes: mem_file(false, "memory.max_usage_in_bytes").as_deref().and_then(single),
        memory_limit_bytes: mem_file(true, "memory.limit_in_bytes").as_deref().and_then(single),
        oom_kills: mem_file(true, "memory.oom_control").and_then(|s| keyed(&s, "oom_kill")),
        pids: pids_file(false, "pids.current").as_deref().and_then(single),
        pids_limit: pids_file(true, "pids.max").as_deref().and_then(single),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // File contents as Linux 6.1 (v2) and 6.18 (v1 hierarchies of a hybrid host) write them.
    const V2_CPU_STAT: &str = "usage_usec 2503117\nuser_usec 2391950\nsystem_usec 111167\n\
core_sched.force_idle_usec 0\nnr_periods 41\nnr_throttled 17\nthrottled_usec 1520338\nnr_bursts 0\nburst_usec 0\n";
    const V2_MEMORY_EVENTS: &str = "low 0\nhigh 0\nmax 212\noom 3\noom_kill 3\noom_group_kill 0\n";
    const V2_MEMORY_STAT: &str = "anon 131072000\nfile 4096000\nkernel 1196032\nkernel_stack 65536\n";
    const V1_CPU_STAT: &str = "nr_periods 120\nnr_throttled 33\nthrottled_time 2100400500\nnr_bursts 0\nburst_time 0\n";
    const V1_OOM_CONTROL: &str = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
    const V1_MEMORY_STAT: &str = "cache 8192\nrss 1000\ntotal_cache 4096000\ntotal_rss 131072000\n";

    fn put(dir: &Path, files: &[(&str, &str)]) {
        fs::create_dir_all(dir.join("work")).unwrap();
        for (name, text) in files {
            fs::write(dir.join(name), text).unwrap();
        }
    }

    #[test]
    fn keyed_and_single_value_files_parse_as_the_kernel_writes_them() {
        assert_eq!(keyed(V2_CPU_STAT, "usage_usec"), Some(2_503_117));
        assert_eq!(keyed(V2_CPU_STAT, "nr_throttled"), Some(17));
        // A key that is a prefix of another is not confused with it.
        assert_eq!(keyed(V2_MEMORY_EVENTS, "oom"), Some(3));
        assert_eq!(keyed(V2_MEMORY_EVENTS, "oom_group_kill"), Some(0));
        assert_eq!(keyed(V1_OOM_CONTROL, "oom_kill"), Some(2));
        assert_eq!(keyed(V1_OOM_CONTROL, "missing"), None);
        assert_eq!(single("536870912\n"), Some(512 << 20));
        assert_eq!(single("max\n"), None, "v2: no limit");
        assert_eq!(single("9223372036854771712\n"), None, "v1: no limit");
        assert_eq!(single("garbage"), None);
    }

    #[test]
    fn v2_figures_come_from_the_sandbox_and_its_command_leaf() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        put(
            d,
            &[
                ("cpu.stat", V2_CPU_STAT),
                ("memory.current", "140000000\n"),
                ("memory.stat", V2_MEMORY_STAT),
                ("memory.peak", "210000000\n"),
                ("pids.current", "7\n"),
                ("work/memory.max", "134217728\n"),
                ("work/memory.events", V2_MEMORY_EVENTS),
                ("work/pids.max", "256\n"),
            ],
        );
        let s = read_v2(d, "work");
        assert_eq!(
            s,
            CgroupStats {
                cpu_usec: Some(2_503_117),
                cpu_periods: Some(41),
                cpu_throttled_periods: Some(17),
                cpu_throttled_usec: Some(1_520_338),
                memory_bytes: Some(140_000_000),
                cache_bytes: 4_096_000,
                memory_peak_bytes: Some(210_000_000),
                memory_limit_bytes: Some(128 << 20),
                oom_kills: Some(3),
                pids: Some(7),
                pids_limit: Some(256),
            }
        );
        // A kernel before 5.19 has no memory.peak; unlimited leaves say `max`.
        fs::remove_file(d.join("memory.peak")).unwrap();
        fs::write(d.join("work/pids.max"), "max\n").unwrap();
        let s = read_v2(d, "work");
        assert_eq!((s.memory_peak_bytes, s.pids_limit), (None, None));
    }

    #[test]
    fn v1_figures_come_from_each_hierarchy_in_its_units() {
        let tmp = tempfile::tempdir().unwrap();
        let at = |c: &str| tmp.path().join(c).join("sb");
        put(&at("cpu"), &[("cpu.stat", V1_CPU_STAT)]);
        put(&at("cpuacct"), &[("cpuacct.usage", "2503117999\n")]);
        put(
            &at("memory"),
            &[
                ("memory.usage_in_bytes", "140000000\n"),
                ("memory.max_usage_in_bytes", "210000000\n"),
                ("memory.stat", V1_MEMORY_STAT),
                ("work/memory.limit_in_bytes", "134217728\n"),
                ("work/memory.oom_control", V1_OOM_CONTROL),
            ],
        );
        put(&at("pids"), &[("pids.current", "7\n"), ("work/pids.max", "256\n")]);
        let s = read_v1(|c| Some(at(c)), "work");
        assert_eq!(
            s,
            CgroupStats {
                cpu_usec: Some(2_503_117),
                cpu_periods: Some(120),
                cpu_throttled_periods: Some(33),
                cpu_throttled_usec: Some(2_100_400),
                memory_bytes: Some(140_000_000),
                cache_bytes: 4_096_000,
                memory_peak_bytes: Some(210_000_000),
                memory_limit_bytes: Some(128 << 20),
                oom_kills: Some(2),
                pids: Some(7),
                pids_limit: Some(256),
            }
        );
        // Without the cpuacct and pids hierarchies: unknown, not zero.
        let s = read_v1(|c| (c != "cpuacct" && c != "pids").then(|| at(c)), "work");
        assert_eq!((s.cpu_usec, s.pids, s.pids_limit), (None, None, None));
        assert_eq!(s.memory_bytes, Some(140_000_000));
    }

    #[test]
    fn a_gone_cgroup_reads_as_unknown() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(read_v2(&tmp.path().join("gone"), "work"), CgroupStats::default());
        assert_eq!(read_v1(|c| Some(tmp.path().join(c)), "work"), CgroupStats::default());
    }
}
