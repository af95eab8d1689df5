//! Virtual addresses: every allowed name the sandbox resolves gets an address of its own, so a
//! connection's destination says which name it is for.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// Virtual addresses handed out in DNS answers (198.18.0.0/15, the benchmarking range, never routed).
///
/// Every allowed name gets its own address in the sandbox's view, so a connection says by its
/// destination alone which name it is for; the proxy dials the real address it resolved. This also
/// lets an admin map a name to a loopback or private service of the host (which the sandbox could not
/// address itself: its 127.0.0.1 is its own).
#[derive(Default)]
pub(super) struct Vips {
    pub(super) by_name: HashMap<String, Ipv4Addr>,
    pub(super) by_vip: HashMap<Ipv4Addr, Target>,
    next: u32,
}

#[derive(Clone)]
pub(super) struct Target {
    pub(super) name: String,
    pub(super) addrs: Vec<IpAddr>,
    pub(super) admin_mapped: bool,
    /// When the address was last handed out for this name.
    since: tokio::time::Instant,
}

/// How long an answered virtual address stays bound to its name (the answers' TTL): it is not given
/// to another name before, or a client still holding the old answer would reach the new name.
const VIP_TTL: Duration = Duration::from_secs(60);

const VIP_BASE: u32 = u32::from_be_bytes([198, 18, 0, 0]);

const VIP_COUNT: u32 = 1 << 17;

impl Vips {
    /// The virtual address for `name`; `None` when every address was handed out within [`VIP_TTL`]
    /// (more than 131,070 new names a minute).
    pub(super) fn assign(&mut self, name: &str, addrs: Vec<IpAddr>, admin_mapped: bool) -> Option<Ipv4Addr> {
        let target = Target { name: name.to_string(), addrs, admin_mapped, since: tokio::time::Instant::now() };
        if let Some(v) = self.by_name.get(name) {
            self.by_vip.insert(*v, target);
            return Some(*v);
        }
        // Wrap around when the pool is spent: the oldest mapping is replaced, once its answers expired
        // (a name asked again and again keeps its address; the next few are tried past it).
        let start = self.next;
        let mut vip = Ipv4Addr::from(VIP_BASE + 1 + self.next % (VIP_COUNT - 2));
        let mut tries = 0;
        while self.by_vip.get(&vip).is_some_and(|old| old.since.elapsed() < VIP_TTL) {
            tries += 1;
            if tries == 64 {
                self.next = start;
                return None;
            }
            self.next += 1;
            vip = Ipv4Addr::from(VIP_BASE + 1 + self.next % (VIP_COUNT - 2));
        }
        self.next += 1;
        if let Some(old) = self.by_vip.insert(vip, target) {
            self.by_name.remove(&old.name);
        }
        self.by_name.insert(name.to_string(), vip);
        Some(vip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_virtual_address_is_not_reused_while_its_answer_may_be_cached() {
        let mut vips = Vips::default();
        let first = vips.assign("n0.test", vec![], false).unwrap();
        assert_eq!(vips.assign("n0.test", vec![], false), Some(first), "a name keeps its address");
        for i in 1..(VIP_COUNT - 2) {
            assert!(vips.assign(&format!("n{i}.test"), vec![], false).is_some());
        }
        // The pool is spent and every address was answered just now: no address for a new name.
        assert_eq!(vips.assign("late.test", vec![], false), None);
        // Once the answers have expired, the oldest address goes to the new name.
        let past = tokio::time::Instant::now().checked_sub(VIP_TTL * 2).unwrap();
        for t in vips.by_vip.values_mut() {
            t.since = past;
        }
        assert_eq!(vips.assign("late.test", vec![], false), Some(first));
        assert!(!vips.by_name.contains_key("n0.test"));
    }
}
