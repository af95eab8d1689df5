//! The egress policy compiler (sandlot-netproxy::policy): a tenant's network spec (JSON, as the API
//! takes it) compiled, then asked about a few attempts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandlot_api::NetworkSpec;
use sandlot_netproxy::policy::{Attempt, HostNetworks, Policy};

fuzz_target!(|data: &[u8]| {
    let Ok(spec) = serde_json::from_slice::<NetworkSpec>(data) else { return };
    let host = HostNetworks::of(&["192.0.2.10/32"]);
    let Ok(policy) = Policy::compile(&spec, &host, &["10.0.0.0/8".to_string()]) else { return };
    let names: Vec<String> = spec.allow.iter().take(4).cloned().collect();
    for ip in ["203.0.113.5", "10.1.2.3", "192.0.2.10", "169.254.169.254", "::1", "2001:db8::5"] {
        for server_name in [None, names.first().map(String::as_str)] {
            let a = Attempt { ip: ip.parse().unwrap(), port: 443, names: &names, server_name, admin_mapped: false };
            let _ = policy.decide(&a);
        }
    }
    for n in &names {
        let _ = (policy.name_allowed(n), policy.brokers(n), policy.rule_for(n));
    }
});
