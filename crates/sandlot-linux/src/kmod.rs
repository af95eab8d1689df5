//! Kernel features the daemon needs loaded before it uses them: `overlay` for every sandbox's root,
//! `btrfs` and loop devices for the layers volume. Many hosts build them as modules that nothing has
//! loaded yet (minimal images, containers, a fresh boot); a mount then fails with an EPERM or ENODEV that
//! names neither. The daemon runs as root, so it loads what is missing itself and, when it cannot, says
//! exactly what is missing and what to do.

use std::fs;
use std::io;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::Duration;

/// How long a freshly loaded `loop` module may take to get its `/dev/loop-control` node from devtmpfs.
const DEVICE_NODE_WAIT: Duration = Duration::from_secs(2);

/// Makes sure the kernel knows filesystem `name` (listed in `/proc/filesystems`), loading its module
/// when it does not. `otherwise` is what the operator can do instead, for the error.
pub fn filesystem(name: &str, otherwise: &str) -> io::Result<()> {
    if filesystem_listed(name) {
        return Ok(());
    }
    let loaded = modprobe(name);
    if filesystem_listed(name) {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "the kernel has no {name} filesystem: it is not in /proc/filesystems and {}; load the {name} module \
         (`modprobe {name}`, or install the kernel's modules package){otherwise}",
        outcome(name, loaded),
    )))
}

/// Makes sure loop devices can be allocated (`/dev/loop-control` exists), loading `loop` when it does not.
pub fn loop_devices(otherwise: &str) -> io::Result<()> {
    let control = Path::new("/dev/loop-control");
    if control.exists() {
        return Ok(());
    }
    let loaded = modprobe("loop");
    let mut waited = Duration::ZERO;
    while !control.exists() && waited < DEVICE_NODE_WAIT {
        thread::sleep(Duration::from_millis(20));
        waited += Duration::from_millis(20);
    }
    if control.exists() {
        return Ok(());
    }
    let why = match &loaded {
        // Loaded, yet no node: /dev is not a devtmpfs (a container's, say) and nobody made the node.
        Ok(()) if Path::new("/sys/module/loop").exists() => {
            "the loop module is loaded but /dev has no loop-control node (is /dev a devtmpfs?); create it with \
             `mknod /dev/loop-control c 10 237` or give the host's /dev"
                .to_string()
        }
        _ => format!("{}; load the loop module (`modprobe loop`)", outcome("loop", loaded)),
    };
    Err(io::Error::other(format!("no loop devices: /dev/loop-control is missing and {why}{otherwise}")))
}

/// Whether `/proc/filesystems` lists `name`.
fn filesystem_listed(name: &str) -> bool {
    fs::read_to_string("/proc/filesystems").is_ok_and(|list| lists_filesystem(&list, name))
}

/// Whether a `/proc/filesystems` text lists `name` (lines are `nodev\tNAME` or `\tNAME`).
fn lists_filesystem(list: &str, name: &str) -> bool {
    list.lines().any(|l| l.split_whitespace().last() == Some(name))
}

/// Runs `modprobe module`; `Err` carries what went wrong, its output included.
fn modprobe(module: &str) -> Result<(), String> {
    let out = Command::new("modprobe").arg(module).output().map_err(|e| format!("cannot run modprobe: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
}

fn outcome(module: &str, loaded: Result<(), String>) -> String {
    match loaded {
        Ok(()) => format!("`modprobe {module}` succeeded without providing it"),
        Err(why) if why.is_empty() => format!("`modprobe {module}` failed"),
        Err(why) => format!("`modprobe {module}` failed ({why})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_filesystems_lines() {
        let list = "nodev\tsysfs\nnodev\toverlay\n\text4\n\tbtrfs\nnodev\tfuse\n\tfuseblk\n";
        assert!(lists_filesystem(list, "overlay"));
        assert!(lists_filesystem(list, "btrfs"));
        assert!(lists_filesystem(list, "fuse"));
        assert!(!lists_filesystem(list, "fuse.sshfs"));
        assert!(!lists_filesystem(list, "xfs"));
    }

    /// On the test host (the suites run as root) the features the daemon uses are there, loaded if
    /// they were not.
    #[test]
    fn this_host_has_overlay_btrfs_and_loop_devices() {
        filesystem("overlay", "").unwrap();
        filesystem("btrfs", "").unwrap();
        loop_devices("").unwrap();
    }

    #[test]
    fn a_filesystem_no_module_provides_is_an_error_that_says_what_to_do() {
        let err = filesystem("sandlot-no-such-fs", "; or pass --no-disk-quota").unwrap_err().to_string();
        assert!(err.contains("the kernel has no sandlot-no-such-fs filesystem"), "{err}");
        assert!(err.contains("`modprobe sandlot-no-such-fs` failed"), "{err}");
        assert!(err.ends_with("; or pass --no-disk-quota"), "{err}");
    }
}
