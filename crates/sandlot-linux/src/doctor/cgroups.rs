//! The cgroup checks: which hierarchy the engine will use, the controllers it needs there, and whether
//! the daemon's own cgroup can hold its sandboxes.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{check, ok, Check, Verdict};
use crate::cgroup::{
    join_cgroup, other_pids, own_path, parse_mountinfo, v2_root_in_place, MountEntry, DAEMON_LEAF, V1_CONTROLLERS,
    V2_CONTROLLERS,
};

/// What the cgroup checks read from cgroupfs, so unit tests can answer for a host they describe.
pub(crate) trait CgroupRead {
    /// The contents of a cgroupfs file.
    fn read(&self, path: &Path) -> io::Result<String>;
    /// Whether the daemon may create directories in `dir`.
    fn writable(&self, dir: &Path) -> bool;
}

pub(super) struct Cgroupfs;

impl CgroupRead for Cgroupfs {
    fn read(&self, path: &Path) -> io::Result<String> {
        fs::read_to_string(path)
    }

    fn writable(&self, dir: &Path) -> bool {
        // access(2) honours read-only mounts (EROFS), the usual way a container withholds cgroups.
        dir.is_dir() && nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
    }
}

const DELEGATE_FIX: &str = "give sandlot a cgroup of its own with memory, pids and cpu delegated: `systemctl \
     start sandlot` (packaging/sandlot.service, Delegate=yes), or `systemd-run --unit sandlot -p Delegate=yes \
     sandlot serve …`, or by hand (docs/DEPLOYING.md): `mkdir -p /sys/fs/cgroup/sandlot/sandlot-daemon && sh -c \
     'echo $$ > /sys/fs/cgroup/sandlot/sandlot-daemon/cgroup.procs && exec sandlot serve …'`";

/// The three cgroup checks: mode, controllers, placement. Which hierarchy is chosen mirrors
/// `cgroup::Cgroups::detect`: v1 when the memory controller is mounted as v1, else cgroup2.
pub(crate) fn cgroups(proc_cgroup: &str, mountinfo: &str, own_pid: u32, fs: &dyn CgroupRead) -> Vec<Check> {
    let mounts = parse_mountinfo(mountinfo);
    let v1: Vec<(&str, String, PathBuf)> = V1_CONTROLLERS
        .iter()
        .filter_map(|ctrl| {
            let mnt = mounts.iter().find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == *ctrl))?;
            let path = own_path(proc_cgroup, |ctrls| ctrls.split(',').any(|c| c == *ctrl))?;
            let dir = join_cgroup(&mnt.point, &path, &mnt.root);
            Some((*ctrl, path, dir))
        })
        .collect();
    let cgroup2 = mounts.iter().find(|m| m.fstype == "cgroup2");
    if v1.iter().any(|(c, _, _)| *c == "memory") {
        return cgroups_v1(&v1, cgroup2, fs);
    }
    let Some(mnt) = cgroup2 else {
        return vec![check(
            "cgroup-mode",
            Verdict::Missing,
            "neither cgroup2 nor the v1 memory hierarchy is mounted",
            "mount cgroup2: `mount -t cgroup2 cgroup2 /sys/fs/cgroup` (systemd does it at boot)",
        )];
    };
    let Some(own) = own_path(proc_cgroup, |ctrls| ctrls.is_empty()) else {
        return vec![check(
            "cgroup-mode",
            Verdict::Missing,
            "cgroup2 is mounted but /proc/self/cgroup has no `0::` line",
            "mount cgroup2 at /sys/fs/cgroup and run sandlot in the host's cgroup namespace",
        )];
    };
    let v1_mounts: Vec<&str> = mounts
        .iter()
        .filter(|m| m.fstype == "cgroup")
        .flat_map(|m| m.options.split(',').filter(|o| V1_CONTROLLERS.contains(o)))
        .collect();
    let mode = if v1_mounts.is_empty() {
        format!("pure v2 (cgroup2 at {})", mnt.point.display())
    } else {
        format!("v2 (cgroup2 at {}; {} on v1, unused)", mnt.point.display(), v1_mounts.join(", "))
    };
    let mut out = vec![ok("cgroup-mode", mode)];
    out.extend(cgroups_v2(mnt, &own, own_pid, fs));
    out
}

fn cgroups_v1(v1: &[(&str, String, PathBuf)], cgroup2: Option<&MountEntry>, fs: &dyn CgroupRead) -> Vec<Check> {
    let names: Vec<&str> = v1.iter().map(|(c, _, _)| *c).collect();
    let mode = match cgroup2 {
        Some(m) => format!("v1 hybrid ({} on v1; cgroup2 at {} unused)", names.join(", "), m.point.display()),
        None => format!("v1 ({})", names.join(", ")),
    };
    let mut out = vec![ok("cgroup-mode", mode)];
    let lacks = |c: &str| !names.contains(&c);
    let mount_fix = |c: &[&str]| {
        c.iter()
            .map(|c| format!("`mkdir -p /sys/fs/cgroup/{c} && mount -t cgroup -o {c} cgroup /sys/fs/cgroup/{c}`"))
            .collect::<Vec<_>>()
            .join(" and ")
    };
    out.push(if lacks("pids") {
        check(
            "cgroup-controllers",
            Verdict::Missing,
            format!("{} mounted; no pids: a sandbox's fork bomb would reach the host's pid_max", names.join(", ")),
            mount_fix(&["pids"]),
        )
    } else {
        let absent: Vec<&str> = ["cpu", "freezer"].into_iter().filter(|c| lacks(c)).collect();
        if absent.is_empty() {
            ok("cgroup-controllers", names.join(", "))
        } else {
            let what: Vec<&str> = absent
                .iter()
                .map(|c| if *c == "cpu" { "no cpu: sandboxes get no CPU limit" } else { "no freezer: pause fails" })
                .collect();
            check(
                "cgroup-controllers",
                Verdict::Degraded,
                format!("{}; {}", names.join(", "), what.join("; ")),
                mount_fix(&absent),
            )
        }
    });
    let unusable: Vec<String> = v1
        .iter()
        .filter(|(_, _, dir)| !fs.writable(dir))
        .map(|(c, _, dir)| format!("{c} ({})", dir.display()))
        .collect();
    out.push(if unusable.is_empty() {
        // Group the controllers by the cgroup the daemon is in for each.
        let mut by_path: Vec<(String, Vec<&str>)> = Vec::new();
        for (c, path, _) in v1 {
            match by_path.iter_mut().find(|(p, _)| p == path) {
                Some((_, cs)) => cs.push(c),
                None => by_path.push((path.clone(), vec![c])),
            }
        }
        let places: Vec<String> = by_path.iter().map(|(p, cs)| format!("{p} ({})", cs.join(", "))).collect();
        ok("cgroup-placement", format!("sandbox cgroups go below {}", places.join(", ")))
    } else {
        check(
            "cgroup-placement",
            Verdict::Missing,
            format!("cannot create cgroups in {}", unusable.join(", ")),
            "run sandlot where cgroupfs is writable (in a container: a private cgroup namespace and a writable /sys/fs/cgroup)",
        )
    });
    out
}

fn cgroups_v2(mnt: &MountEntry, own: &str, own_pid: u32, fs: &dyn CgroupRead) -> Vec<Check> {
    let own_dir = join_cgroup(&mnt.point, own, &mnt.root);
    // Start-up's own rule: the true root or the parent of a `sandlot-daemon` leaf holds the sandboxes
    // in place; any other cgroup must be the daemon's alone.
    let (root, settled) = match v2_root_in_place(&own_dir, fs.read(&own_dir.join("cgroup.type")).is_ok()) {
        Some(root) => (root, true),
        None => (own_dir.clone(), false),
    };
    let shown = |dir: &Path| dir.strip_prefix(&mnt.point).map(|p| format!("/{}", p.display())).unwrap_or_default();
    let controllers_file = root.join("cgroup.controllers");
    let controllers = match fs.read(&controllers_file) {
        Ok(s) => check_v2_controllers(&s, &shown(&root)),
        Err(e) => check(
            "cgroup-controllers",
            Verdict::Missing,
            format!("cannot read {}: {e}", controllers_file.display()),
            DELEGATE_FIX,
        ),
    };
    let placement = if settled {
        if fs.writable(&root) {
            ok("cgroup-placement", format!("sandbox cgroups go below {}", shown(&root)))
        } else {
            check("cgroup-placement", Verdict::Missing, format!("{} is not writable", root.display()), DELEGATE_FIX)
        }
    } else {
        let procs_file = own_dir.join("cgroup.procs");
        match fs.read(&procs_file) {
            Err(e) => check(
                "cgroup-placement",
                Verdict::Missing,
                format!("cannot read {}: {e}", procs_file.display()),
                DELEGATE_FIX,
            ),
            Ok(procs) => {
                let others = other_pids(&procs, own_pid);
                if !others.is_empty() {
                    let shown_pids: Vec<String> = others.iter().take(5).map(u32::to_string).collect();
                    let more = if others.len() > 5 { ", …" } else { "" };
                    check(
                        "cgroup-placement",
                        Verdict::Missing,
                        format!(
                            "{own} also holds {} other process{} (pid {}{more}): a daemon started here refuses \
                             rather than move them",
                            others.len(),
                            if others.len() == 1 { "" } else { "es" },
                            shown_pids.join(", ")
                        ),
                        DELEGATE_FIX,
                    )
                } else if !fs.writable(&own_dir) {
                    check("cgroup-placement", Verdict::Missing, format!("{own} is not writable"), DELEGATE_FIX)
                } else {
                    ok(
                        "cgroup-placement",
                        format!("alone in {own}: serve moves itself to {own}/{DAEMON_LEAF}, sandboxes go beside it"),
                    )
                }
            }
        }
    };
    vec![controllers, placement]
}

fn check_v2_controllers(available: &str, cgroup: &str) -> Check {
    let have: Vec<&str> = available.split_whitespace().collect();
    let lacking: Vec<&str> = V2_CONTROLLERS.into_iter().filter(|c| !have.contains(c)).collect();
    if lacking.is_empty() {
        ok("cgroup-controllers", format!("{} delegated to {cgroup}", V2_CONTROLLERS.join(", ")))
    } else {
        check(
            "cgroup-controllers",
            Verdict::Missing,
            if have.is_empty() {
                format!("{cgroup} has no controllers: {} not delegated", lacking.join(", "))
            } else {
                format!("{cgroup} has {}; {} not delegated", have.join(" "), lacking.join(", "))
            },
            DELEGATE_FIX,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A cgroupfs described by its files; every directory named in `writable` may be written.
    struct FakeCgroupfs {
        files: HashMap<PathBuf, String>,
        writable: Vec<PathBuf>,
    }

    impl CgroupRead for FakeCgroupfs {
        fn read(&self, path: &Path) -> io::Result<String> {
            self.files.get(path).cloned().ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }
        fn writable(&self, dir: &Path) -> bool {
            self.writable.iter().any(|w| w == dir)
        }
    }

    fn fake(files: &[(&str, &str)], writable: &[&str]) -> FakeCgroupfs {
        FakeCgroupfs {
            files: files.iter().map(|(p, s)| (PathBuf::from(p), s.to_string())).collect(),
            writable: writable.iter().map(PathBuf::from).collect(),
        }
    }

    fn by_name<'a>(checks: &'a [Check], name: &str) -> &'a Check {
        checks.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no {name} in {checks:?}"))
    }

    // This machine's: memory, pids, cpu, cpuacct, freezer on v1, an empty cgroup2 at /sys/fs/cgroup/unified.
    const HYBRID_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_CGROUP: &str =
        "9:name=systemd:/\n8:pids:/\n6:freezer:/\n4:memory:/process_api/abc\n2:cpuacct:/\n1:cpu:/\n0::/\n";
    // Debian 12 / systemd: one cgroup2 at /sys/fs/cgroup.
    const V2_MOUNTINFO: &str =
        "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";

    #[test]
    fn this_hosts_v1_hybrid_is_ok_with_sandboxes_below_each_controllers_cgroup() {
        let fs = fake(
            &[],
            &[
                "/sys/fs/cgroup/memory/process_api/abc",
                "/sys/fs/cgroup/pids",
                "/sys/fs/cgroup/cpu",
                "/sys/fs/cgroup/cpuacct",
                "/sys/fs/cgroup/freezer",
            ],
        );
        let checks = cgroups(HYBRID_CGROUP, HYBRID_MOUNTINFO, 42, &fs);
        let mode = by_name(&checks, "cgroup-mode");
        assert_eq!(mode.verdict, Verdict::Ok);
        assert!(mode.found.starts_with("v1 hybrid (memory, pids, cpu, cpuacct, freezer on v1"), "{mode:?}");
        assert_eq!(by_name(&checks, "cgroup-controllers").verdict, Verdict::Ok);
        let placement = by_name(&checks, "cgroup-placement");
        assert_eq!(placement.verdict, Verdict::Ok, "{placement:?}");
        assert!(
            placement.found.contains("/process_api/abc (memory)")
                && placement.found.contains("/ (pids, cpu, cpuacct, freezer)")
        );
    }

    #[test]
    fn v1_without_pids_is_missing_and_without_freezer_degraded() {
        let no_pids: String =
            HYBRID_MOUNTINFO.lines().filter(|l| !l.ends_with("rw,pids")).map(|l| format!("{l}\n")).collect();
        let fs = fake(&[], &["/sys/fs/cgroup/memory/process_api/abc", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/freezer"]);
        let c = cgroups(HYBRID_CGROUP, &no_pids, 42, &fs);
        let ctrl = by_name(&c, "cgroup-controllers");
        assert_eq!(ctrl.verdict, Verdict::Missing, "{ctrl:?}");
        assert!(ctrl.fix.contains("mount -t cgroup -o pids"), "{ctrl:?}");

        let no_freezer: String =
            HYBRID_MOUNTINFO.lines().filter(|l| !l.ends_with("rw,freezer")).map(|l| format!("{l}\n")).collect();
        let c = cgroups(HYBRID_CGROUP, &no_freezer, 42, &fs);
        let ctrl = by_name(&c, "cgroup-controllers");
        assert_eq!(ctrl.verdict, Verdict::Degraded, "{ctrl:?}");
        assert!(ctrl.found.contains("pause fails"), "{ctrl:?}");
    }

    #[test]
    fn v1_read_only_cgroupfs_is_missing() {
        let c = cgroups(HYBRID_CGROUP, HYBRID_MOUNTINFO, 42, &fake(&[], &[]));
        let p = by_name(&c, "cgroup-placement");
        assert_eq!(p.verdict, Verdict::Missing);
        assert!(p.found.contains("/sys/fs/cgroup/memory/process_api/abc"), "{p:?}");
    }

    #[test]
    fn pure_v2_delegated_service_cgroup_alone_is_ok() {
        let own = "0::/system.slice/sandlot.service\n";
        let dir = "/sys/fs/cgroup/system.slice/sandlot.service";
        let fs = fake(
            &[
                (&format!("{dir}/cgroup.controllers"), "cpuset cpu io memory pids\n"),
                (&format!("{dir}/cgroup.procs"), "42\n"),
                (&format!("{dir}/cgroup.type"), "domain\n"),
            ],
            &[dir],
        );
        let c = cgroups(own, V2_MOUNTINFO, 42, &fs);
        assert_eq!(by_name(&c, "cgroup-mode").found, "pure v2 (cgroup2 at /sys/fs/cgroup)");
        let ctrl = by_name(&c, "cgroup-controllers");
        assert_eq!(
            (ctrl.verdict, ctrl.found.as_str()),
            (Verdict::Ok, "memory, pids, cpu delegated to /system.slice/sandlot.service")
        );
        let p = by_name(&c, "cgroup-placement");
        assert_eq!(p.verdict, Verdict::Ok, "{p:?}");
        assert!(p.found.contains("sandlot.service/sandlot-daemon"), "{p:?}");
    }

    #[test]
    fn pure_v2_restarted_in_its_own_leaf_uses_the_parent() {
        let own = "0::/system.slice/sandlot.service/sandlot-daemon\n";
        let dir = "/sys/fs/cgroup/system.slice/sandlot.service";
        let fs = fake(
            &[
                (&format!("{dir}/cgroup.controllers"), "memory pids cpu\n"),
                (&format!("{dir}/sandlot-daemon/cgroup.type"), "domain\n"),
            ],
            &[dir],
        );
        let c = cgroups(own, V2_MOUNTINFO, 42, &fs);
        assert_eq!(by_name(&c, "cgroup-controllers").verdict, Verdict::Ok);
        let p = by_name(&c, "cgroup-placement");
        assert_eq!(
            (p.verdict, p.found.as_str()),
            (Verdict::Ok, "sandbox cgroups go below /system.slice/sandlot.service")
        );
    }

    #[test]
    fn pure_v2_session_scope_shared_with_the_shell_is_missing_with_what_to_do() {
        // `sudo sandlot serve` from a login shell: the scope holds the shell and sudo too, and systemd
        // delegates no controllers to a session scope.
        let own = "0::/user.slice/user-1000.slice/session-2.scope\n";
        let dir = "/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope";
        let fs = fake(
            &[
                (&format!("{dir}/cgroup.controllers"), "memory pids\n"),
                (&format!("{dir}/cgroup.procs"), "811\n900\n42\n"),
                (&format!("{dir}/cgroup.type"), "domain\n"),
            ],
            &[dir],
        );
        let c = cgroups(own, V2_MOUNTINFO, 42, &fs);
        let ctrl = by_name(&c, "cgroup-controllers");
        assert_eq!(ctrl.verdict, Verdict::Missing);
        assert_eq!(ctrl.found, "/user.slice/user-1000.slice/session-2.scope has memory pids; cpu not delegated");
        let p = by_name(&c, "cgroup-placement");
        assert_eq!(p.verdict, Verdict::Missing);
        assert!(p.found.contains("also holds 2 other processes (pid 811, 900)"), "{p:?}");
        assert!(p.fix.contains("Delegate=yes") && p.fix.contains("packaging/sandlot.service"), "{p:?}");
    }

    #[test]
    fn pure_v2_true_root_holds_the_sandboxes_but_a_cgroup_namespaces_root_must_be_alone() {
        // The hierarchy's root has no cgroup.type: the daemon may stay there beside anything.
        let fs = fake(
            &[("/sys/fs/cgroup/cgroup.controllers", "cpu memory pids\n"), ("/sys/fs/cgroup/cgroup.procs", "1\n42\n")],
            &["/sys/fs/cgroup"],
        );
        let c = cgroups("0::/\n", V2_MOUNTINFO, 42, &fs);
        assert_eq!(by_name(&c, "cgroup-placement").verdict, Verdict::Ok, "{c:?}");
        // A container's `/` is the root of its cgroup namespace, an ordinary cgroup shared with its pid 1.
        let fs = fake(
            &[
                ("/sys/fs/cgroup/cgroup.controllers", "cpu memory pids\n"),
                ("/sys/fs/cgroup/cgroup.procs", "1\n42\n"),
                ("/sys/fs/cgroup/cgroup.type", "domain\n"),
            ],
            &["/sys/fs/cgroup"],
        );
        let p = by_name(&cgroups("0::/\n", V2_MOUNTINFO, 42, &fs), "cgroup-placement").clone();
        assert_eq!(p.verdict, Verdict::Missing, "{p:?}");
        assert!(p.found.contains("also holds 1 other process (pid 1)"), "{p:?}");
    }

    #[test]
    fn no_cgroup_hierarchy_at_all_is_missing() {
        let c = cgroups("0::/\n", "22 1 0:5 / /proc rw - proc proc rw\n", 42, &fake(&[], &[]));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].verdict, Verdict::Missing);
        assert!(c[0].fix.contains("mount -t cgroup2"));
    }
}
