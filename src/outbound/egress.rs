//! The egress policy: which destination addresses outbound HTTP may reach. A decision
//! core (an address and the policy in, a verdict out), so every class is a plain
//! `#[test]`.
//!
//! Why: an outbound URL is often supplied by a user (a webhook subscription's
//! endpoint), and a URL naming `127.0.0.1`, `10.0.0.5` or `169.254.169.254` (a cloud's
//! metadata service) would let that user reach what sits beside the runtime. So the
//! addresses no public endpoint has are refused unless the operator allow-lists their
//! network: loopback, private (RFC 1918), shared (CGNAT, 100.64/10), link-local,
//! unique-local (fc00::/7), unspecified, multicast, reserved and broadcast, and the same
//! addresses written inside IPv6 (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible,
//! NAT64 `64:ff9b::/96`, 6to4 `2002::/16`). The verdict is taken on the *resolved*
//! address (see `outbound::resolve`), so a DNS name cannot smuggle one in.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A network in CIDR notation (`10.0.0.0/8`, `fd00::/8`; a bare address is a `/32` or
/// `/128`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `addr/prefix` or a bare address. The address's bits past the prefix
    /// must be zero, so `10.1.2.3/8` (probably a typo) is refused rather than guessed.
    pub(crate) fn parse(text: &str) -> Result<Cidr, String> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let net: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not an IP network such as 10.0.0.0/8"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.trim().parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("{text:?}: the prefix length must be 0 to {max}")),
            },
        };
        let cidr = Cidr { net, prefix };
        if cidr.masked(net) != bits(net) {
            return Err(format!(
                "{text:?} has address bits set past its /{prefix}; write the network's first address"
            ));
        }
        Ok(cidr)
    }

    fn mask(&self) -> u128 {
        let width = if self.net.is_ipv4() { 32 } else { 128 };
        let ones = u128::MAX
            .checked_shl(u32::from(width - self.prefix))
            .unwrap_or(0);
        if width == 32 {
            ones & u128::from(u32::MAX)
        } else {
            ones
        }
    }

    fn masked(&self, ip: IpAddr) -> u128 {
        bits(ip) & self.mask()
    }

    /// Whether `ip` lies in this network (same family only).
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.net.is_ipv4() && self.masked(ip) == self.masked(self.net)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

fn bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The runtime-wide policy: the networks allowed beside the public internet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EgressPolicy {
    /// Networks allowed even though their addresses are of a refused class.
    pub(crate) allow: Vec<Cidr>,
}

/// Why an address was refused: the address and its class, for an error a person can
/// act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The address.
    pub(crate) ip: IpAddr,
    /// Its class: `loopback`, `private`, `link-local`, …
    pub(crate) class: &'static str,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the egress policy refuses {} ({} {} address); if this destination is intended, allow its network in switchboard.toml: [outbound] allow = [\"{}\"]",
            self.ip,
            article(self.class),
            self.class,
            suggestion(self.ip)
        )
    }
}

impl std::error::Error for Refusal {}

/// The indefinite article of a class name, by how it is spoken: "an unspecified",
/// "an IETF …" (said "eye"), but "a unique-local" (said "you"), so not by its first
/// letter alone.
fn article(class: &str) -> &'static str {
    if class.starts_with("unspecified") || class.starts_with("IETF") {
        "an"
    } else {
        "a"
    }
}

/// The network to suggest allow-listing: the address alone.
fn suggestion(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(_) => format!("{ip}/32"),
        IpAddr::V6(_) => format!("{ip}/128"),
    }
}

/// Whether outbound HTTP may connect to `ip` under `policy`.
pub(crate) fn allowed(ip: IpAddr, policy: &EgressPolicy) -> Result<(), Refusal> {
    let Some(class) = refused_class(ip) else {
        return Ok(());
    };
    let embedded = match ip {
        IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
        IpAddr::V4(_) => None,
    };
    let listed = |a: IpAddr| policy.allow.iter().any(|c| c.contains(a));
    if listed(ip) || embedded.is_some_and(listed) {
        Ok(())
    } else {
        Err(Refusal { ip, class })
    }
}

/// The class of a refused address, or `None` for an address a public endpoint may have.
fn refused_class(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_class(v4),
        IpAddr::V6(v6) => v6_class(v6),
    }
}

fn v4_class(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => "unspecified (\"this network\")",
        (127, _, _) => "loopback",
        (10, _, _) | (192, 168, _) => "private",
        (172, 16..=31, _) => "private",
        (100, 64..=127, _) => "shared (carrier-grade NAT)",
        (169, 254, _) => "link-local",
        (192, 0, 0) => "IETF protocol assignment",
        (198, 18..=19, _) => "benchmarking",
        (224..=239, _, _) => "multicast",
        (255, 255, 255) if ip == Ipv4Addr::BROADCAST => "broadcast",
        (240..=255, _, _) => "reserved",
        _ => return None,
    })
}

/// The IPv4 address an IPv6 address stands for, where it is one: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, deprecated), NAT64
/// (`64:ff9b::a.b.c.d`) or 6to4 (`2002:AABB:CCDD::`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low),
        [0, 0, 0, 0, 0, 0, _, _] if u128::from(ip) > 1 => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

fn v6_class(ip: Ipv6Addr) -> Option<&'static str> {
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    if let Some(v4) = embedded_v4(ip) {
        // What the IPv4 address is, written inside IPv6.
        return v4_class(v4);
    }
    let first = ip.segments()[0];
    Some(match first {
        0xfe80..=0xfebf => "link-local",
        0xfec0..=0xfeff => "site-local (deprecated)",
        0xfc00..=0xfdff => "unique-local",
        0xff00..=0xffff => "multicast",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn policy(allow: &[&str]) -> EgressPolicy {
        EgressPolicy {
            allow: allow.iter().map(|c| Cidr::parse(c).unwrap()).collect(),
        }
    }

    #[test]
    fn public_addresses_pass_with_no_allow_list() {
        for a in [
            "93.184.216.34",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700:4700::1111",
        ] {
            assert_eq!(allowed(ip(a), &EgressPolicy::default()), Ok(()), "{a}");
        }
    }

    #[test]
    fn every_internal_class_is_refused_by_default_with_its_class_named() {
        let cases = [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "shared (carrier-grade NAT)"),
            ("169.254.169.254", "link-local"),
            ("0.0.0.0", "unspecified (\"this network\")"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("240.0.0.1", "reserved"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fe80::1", "link-local"),
            ("fc00::1", "unique-local"),
            ("fd12:3456::1", "unique-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::127.0.0.1", "loopback"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("2002:7f00:1::", "loopback"),
        ];
        for (a, class) in cases {
            let r = allowed(ip(a), &EgressPolicy::default());
            assert_eq!(r.as_ref().map_err(|e| e.class), Err(class), "{a}");
        }
    }

    #[test]
    fn an_allow_listed_network_passes_and_its_neighbours_do_not() {
        let p = policy(&["127.0.0.0/8", "10.1.0.0/16", "fd00::/8"]);
        for a in ["127.0.0.1", "10.1.200.3", "fd00::5", "::ffff:127.0.0.1"] {
            assert_eq!(allowed(ip(a), &p), Ok(()), "{a}");
        }
        for a in [
            "10.2.0.1",
            "192.168.0.1",
            "fc00::1",
            "::1",
            "169.254.169.254",
        ] {
            assert!(allowed(ip(a), &p).is_err(), "{a}");
        }
    }

    #[test]
    fn the_refusal_says_how_to_allow_the_address() {
        let e = allowed(ip("127.0.0.1"), &EgressPolicy::default()).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("127.0.0.1 (a loopback address)"), "{text}");
        assert!(text.contains("allow = [\"127.0.0.1/32\"]"), "{text}");
    }

    #[test]
    fn the_refusal_reads_with_the_right_article() {
        for (a, phrase) in [
            (
                "0.0.0.0",
                "0.0.0.0 (an unspecified (\"this network\") address)",
            ),
            ("::", ":: (an unspecified address)"),
            ("192.0.0.8", "(an IETF protocol assignment address)"),
            ("fd00::1", "(a unique-local address)"),
            ("10.0.0.1", "(a private address)"),
        ] {
            let text = allowed(ip(a), &EgressPolicy::default())
                .unwrap_err()
                .to_string();
            assert!(text.contains(phrase), "{text}");
        }
    }

    #[test]
    fn cidrs_parse_strictly() {
        assert_eq!(Cidr::parse("10.0.0.0/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(Cidr::parse("::1").unwrap().to_string(), "::1/128");
        assert_eq!(Cidr::parse("0.0.0.0/0").unwrap().to_string(), "0.0.0.0/0");
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        assert!(Cidr::parse("::/0").unwrap().contains(ip("::1")));
        for bad in [
            "10.1.2.3/8",
            "10.0.0.0/33",
            "localhost",
            "10.0.0.0/x",
            "fd00::1/8",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
        assert!(!Cidr::parse("10.0.0.0/8")
            .unwrap()
            .contains(ip("::ffff:10.0.0.1")));
    }
}
