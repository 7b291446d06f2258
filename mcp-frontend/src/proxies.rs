//! Who a request comes from, behind proxies the installer trusts.
//!
//! A TCP peer is a fact; a `Forwarded` or `X-Forwarded-For` header is a claim
//! anyone can write. The claim is believed only when the peer is a proxy in
//! `--trusted-proxies` (none by default), and then only as far as the
//! trusted chain reaches: the client is the rightmost address that no
//! trusted proxy stands for (each proxy appends the address it received
//! from, so everything left of that is the client's own say).

use std::net::IpAddr;

use ipnet::IpNet;

/// The proxies whose forwarded addresses are believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Parses a comma-separated list of CIDRs or single addresses.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut nets = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let net = part
                .parse::<IpNet>()
                .or_else(|_| part.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| format!("{part:?} is neither an address nor a CIDR (e.g. 10.0.0.0/8)"))?;
            nets.push(net);
        }
        Ok(Self(nets))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `address` is one of the trusted proxies.
    pub fn contains(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        self.0.iter().any(|net| net.contains(&address))
    }

    /// The client a request stands for (pure): its TCP `peer`, unless the
    /// peer is a trusted proxy; then the rightmost forwarded address that
    /// is not a trusted proxy. `Forwarded` (RFC 7239) is read when present,
    /// else `X-Forwarded-For`. A header that cannot be read names no one:
    /// the last address believed stands.
    pub fn client(&self, peer: IpAddr, forwarded: Option<&str>, forwarded_for: Option<&str>) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.contains(peer) {
            return peer;
        }
        let chain: Vec<Option<IpAddr>> = match forwarded {
            Some(header) => forwarded_elements(header),
            None => forwarded_for
                .map(|h| h.split(',').map(|a| parse_address(a.trim())).collect())
                .unwrap_or_default(),
        };
        let mut client = peer;
        for hop in chain.into_iter().rev() {
            let Some(address) = hop else { return client };
            client = address.to_canonical();
            if !self.contains(client) {
                return client;
            }
        }
        client
    }
}

/// The `for=` addresses of a `Forwarded` header, left to right; `None` for
/// one that names no address (`unknown`, an obfuscated name, garbage).
fn forwarded_elements(header: &str) -> Vec<Option<IpAddr>> {
    header
        .split(',')
        .map(|element| {
            element.split(';').find_map(|pair| {
                let (key, value) = pair.trim().split_once('=')?;
                key.trim()
                    .eq_ignore_ascii_case("for")
                    .then(|| parse_address(value.trim().trim_matches('"')))?
            })
        })
        .collect()
}

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:4711`,
/// `2001:db8::1`, `[2001:db8::1]:4711`.
fn parse_address(text: &str) -> Option<IpAddr> {
    if let Ok(address) = text.parse::<IpAddr>() {
        return Some(address);
    }
    if let Some(rest) = text.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    text.rsplit_once(':')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_forwarded_address_is_believed_only_from_a_trusted_peer() {
        let none = TrustedProxies::default();
        assert_eq!(
            none.client(ip("10.1.2.3"), None, Some("203.0.113.9")),
            ip("10.1.2.3"),
            "no proxies: the peer"
        );
        let trusted = TrustedProxies::parse("10.0.0.0/8, 192.168.1.1").unwrap();
        assert_eq!(trusted.client(ip("10.1.2.3"), None, Some("203.0.113.9")), ip("203.0.113.9"));
        // A forged header from an untrusted peer changes nothing.
        assert_eq!(trusted.client(ip("198.51.100.7"), None, Some("203.0.113.9")), ip("198.51.100.7"));
    }

    #[test]
    fn the_client_is_the_rightmost_address_no_trusted_proxy_stands_for() {
        let trusted = TrustedProxies::parse("10.0.0.0/8").unwrap();
        // The client wrote "1.1.1.1" itself; the proxy appended what it saw.
        let chain = "1.1.1.1, 203.0.113.9, 10.0.0.5";
        assert_eq!(trusted.client(ip("10.0.0.6"), None, Some(chain)), ip("203.0.113.9"));
        // Every hop trusted: the leftmost stands.
        assert_eq!(trusted.client(ip("10.0.0.6"), None, Some("10.0.0.9, 10.0.0.5")), ip("10.0.0.9"));
        // Garbage in the chain names no one: the last believed address stands.
        assert_eq!(trusted.client(ip("10.0.0.6"), None, Some("1.1.1.1, garbage, 10.0.0.5")), ip("10.0.0.5"));
    }

    #[test]
    fn forwarded_is_read_before_x_forwarded_for_with_ports_and_brackets() {
        let trusted = TrustedProxies::parse("10.0.0.0/8").unwrap();
        let forwarded = r#"for=192.0.2.43, for="[2001:db8:cafe::17]:4711";proto=https"#;
        assert_eq!(
            trusted.client(ip("10.0.0.6"), Some(forwarded), Some("203.0.113.9")),
            ip("2001:db8:cafe::17")
        );
        assert_eq!(trusted.client(ip("10.0.0.6"), None, Some("203.0.113.9:5555")), ip("203.0.113.9"));
        assert_eq!(trusted.client(ip("::ffff:10.0.0.6"), None, Some("203.0.113.9")), ip("203.0.113.9"));
    }

    #[test]
    fn bad_lists_say_what_is_wrong() {
        assert!(TrustedProxies::parse("").unwrap().is_empty());
        assert!(TrustedProxies::parse("10.0.0.0/8,nope").unwrap_err().contains("\"nope\""));
    }
}
