//! What every sandbox's network shares: the egress CA and TLS broker, the admin's resolver overrides,
//! the host's always-denied networks and the dialer. Built once by the daemon from its settings.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use sandlot_netproxy::cidr::Cidr;
use sandlot_netproxy::egress::{EgressShared, TcpDialer};
use sandlot_netproxy::policy::HostNetworks;

pub use sandlot_netproxy::egress::NetEvent;
pub use sandlot_netproxy::policy::{Policy, PolicyError};

/// The daemon's network settings, as the admin gave them.
#[derive(Debug, Clone, Default)]
pub struct NetworkSettings {
    /// Where the egress CA lives (made on first start).
    pub ca_dir: PathBuf,
    /// `NAME=IP` mappings: for that name only, the address may be private or loopback.
    pub resolve: HashMap<String, Vec<IpAddr>>,
    /// Extra CA certificates (PEM files) trusted for upstream TLS of brokered hosts.
    pub extra_ca: Vec<PathBuf>,
    /// Refuse to dial anything outside loopback (tests).
    pub loopback_only: bool,
    /// With `loopback_only`: addresses dialled as other (loopback) ones, the tests' internet.
    pub test_redirect: HashMap<IpAddr, IpAddr>,
    /// The daemon's descriptor limit, of which proxied connections may use a share.
    pub fd_limit: u64,
}

/// Why the shared network could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum NetworkSetupError {
    /// The egress CA could not be read or made.
    #[error("loading the egress CA in {dir}: {source}")]
    Ca {
        /// Its directory.
        dir: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The TLS broker could not be built (an `--extra-ca` file, the system roots).
    #[error("setting up TLS brokering: {0}")]
    Broker(std::io::Error),
}

/// The network every sandbox shares, and the egress CA's certificate (PEM) for the images' trust store;
/// `gateway` is the address inside each sandbox where the daemon answers DNS (the driver's).
pub fn shared(
    settings: &NetworkSettings,
    host_networks: Vec<(IpAddr, u8)>,
    gateway: std::net::Ipv4Addr,
) -> Result<(Arc<EgressShared>, String), NetworkSetupError> {
    let ca = sandlot_netproxy::broker::Ca::load_or_create(&settings.ca_dir)
        .map_err(|source| NetworkSetupError::Ca { dir: settings.ca_dir.clone(), source })?;
    let broker =
        sandlot_netproxy::broker::Broker::new(Arc::new(ca), &settings.extra_ca).map_err(NetworkSetupError::Broker)?;
    let ca_pem = broker.ca_pem().to_string();
    let net = Arc::new(EgressShared {
        broker: Some(Arc::new(broker)),
        gateway,
        overrides: settings.resolve.clone(),
        host_nets: HostNetworks::new(cidrs(host_networks)),
        dialer: Arc::new(TcpDialer { loopback_only: settings.loopback_only, redirect: settings.test_redirect.clone() }),
        open_total: Default::default(),
        max_open_total: EgressShared::total_cap(settings.fd_limit),
    });
    Ok((net, ca_pem))
}

/// A network shared by sandboxes that never get one (the fake driver's): no broker, no host
/// networks, a dialer that reaches loopback only.
pub fn offline() -> Arc<EgressShared> {
    Arc::new(EgressShared {
        broker: None,
        // Never dialled: these sandboxes have no network link.
        gateway: std::net::Ipv4Addr::UNSPECIFIED,
        overrides: HashMap::new(),
        host_nets: HostNetworks::new(Vec::new()),
        dialer: Arc::new(TcpDialer::new(true)),
        open_total: Default::default(),
        max_open_total: 64,
    })
}

/// Addresses with prefixes as the policy's networks.
pub(crate) fn cidrs(nets: Vec<(IpAddr, u8)>) -> Vec<Cidr> {
    nets.into_iter().filter_map(|(ip, prefix)| Cidr::new(ip, prefix)).collect()
}
