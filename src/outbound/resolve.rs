//! The outbound client's DNS resolver: resolves a name, then keeps only the addresses
//! the egress policy allows, so the connection goes to an address that was checked,
//! never to one a second lookup might return (DNS rebinding). A name whose every
//! address is refused fails with [`HostRefused`], which `outbound::http` finds in the
//! error chain and reports as an egress refusal.
//!
//! Why a resolver and not a check before the request: a check resolves once and the
//! client resolves again to connect; between the two, a hostile name server can
//! answer differently. Filtering inside the client's own resolution leaves no gap.
//! URLs with a literal IP skip resolvers altogether, so `outbound::http` checks those
//! itself, before the request and at each redirect.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::egress::{allowed, EgressPolicy, Refusal};

/// A name that resolved only to refused addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostRefused {
    /// The name.
    pub(crate) host: String,
    /// The first refused address and its class.
    pub(crate) refusal: Refusal,
}

impl std::fmt::Display for HostRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} resolves to {}; {}",
            self.host, self.refusal.ip, self.refusal
        )
    }
}

impl std::error::Error for HostRefused {}

/// Resolves through the system resolver (or, for names in `hosts`, to the addresses
/// given there: tests pointing a made-up name at an address), then filters by the
/// policy.
#[derive(Debug, Clone)]
pub(crate) struct EgressResolver {
    policy: Arc<EgressPolicy>,
    hosts: Arc<HashMap<String, Vec<IpAddr>>>,
}

impl EgressResolver {
    /// A resolver enforcing `policy`, with `hosts` resolved from the map.
    pub(crate) fn new(
        policy: Arc<EgressPolicy>,
        hosts: HashMap<String, Vec<IpAddr>>,
    ) -> EgressResolver {
        EgressResolver {
            policy,
            hosts: Arc::new(hosts),
        }
    }

    /// The allowed addresses of `host`, or why there are none.
    pub(crate) async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, BoxError> {
        let found: Vec<IpAddr> = match self.hosts.get(&host.to_ascii_lowercase()) {
            Some(addrs) => addrs.clone(),
            None => tokio::net::lookup_host((host, 0))
                .await?
                .map(|a| a.ip())
                .collect(),
        };
        let mut first_refusal = None;
        let kept: Vec<IpAddr> = found
            .into_iter()
            .filter(|ip| match allowed(*ip, &self.policy) {
                Ok(()) => true,
                Err(r) => {
                    first_refusal.get_or_insert(r);
                    false
                }
            })
            .collect();
        match (kept.is_empty(), first_refusal) {
            (false, _) => Ok(kept),
            (true, Some(refusal)) => Err(Box::new(HostRefused {
                host: host.to_owned(),
                refusal,
            })),
            (true, None) => Err(format!("{host} has no address").into()),
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Resolve for EgressResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let this = self.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let ips = this.lookup(&host).await?;
            let addrs: Addrs = Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbound::egress::Cidr;

    fn resolver(allow: &[&str]) -> EgressResolver {
        let policy = EgressPolicy {
            allow: allow.iter().map(|c| Cidr::parse(c).unwrap()).collect(),
        };
        let hosts = HashMap::from([
            ("inside.test".to_owned(), vec!["10.0.0.7".parse().unwrap()]),
            (
                "mixed.test".to_owned(),
                vec![
                    "127.0.0.1".parse().unwrap(),
                    "93.184.216.34".parse().unwrap(),
                ],
            ),
        ]);
        EgressResolver::new(Arc::new(policy), hosts)
    }

    #[tokio::test]
    async fn a_name_resolving_to_a_private_address_is_refused_naming_both() {
        let e = resolver(&[]).lookup("inside.test").await.unwrap_err();
        let refused = e.downcast_ref::<HostRefused>().expect("a HostRefused");
        assert_eq!(refused.refusal.class, "private");
        let text = e.to_string();
        assert!(
            text.starts_with("inside.test resolves to 10.0.0.7;"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn localhost_through_the_system_resolver_is_refused_unless_allowed() {
        let e = resolver(&[]).lookup("localhost").await.unwrap_err();
        assert!(e.downcast_ref::<HostRefused>().is_some(), "{e}");
        let ips = resolver(&["127.0.0.0/8", "::1/128"])
            .lookup("localhost")
            .await
            .unwrap();
        assert!(ips.iter().all(|ip| ip.is_loopback()), "{ips:?}");
    }

    #[tokio::test]
    async fn only_the_allowed_addresses_of_a_mixed_answer_are_kept() {
        let ips = resolver(&[]).lookup("mixed.test").await.unwrap();
        assert_eq!(ips, vec!["93.184.216.34".parse::<IpAddr>().unwrap()]);
        let ips = resolver(&["10.0.0.0/8"])
            .lookup("inside.test")
            .await
            .unwrap();
        assert_eq!(ips, vec!["10.0.0.7".parse::<IpAddr>().unwrap()]);
    }
}
