//! Pod IPs without network namespaces: each running Pod gets its own address
//! from the node's Pod CIDR (10.244.0.0/16 unless told), from .0.2 up, added to the host's `lo` (as root), so two replicas
//! can listen on the same port at their own `status.podIP` and Services'
//! Endpoints fill in with addresses the host can reach. (Loopback addresses
//! would be simpler, but the API server refuses 127/8 in Endpoints.)

use std::collections::HashMap;
use std::net::Ipv4Addr;

/// How many addresses there are (X.Y.0.2–X.Y.2.255 of the Pod CIDR X.Y.0.0/16,
/// which `cluster.sh down` clears from `lo`).
const COUNT: u32 = 3 * 256 - 2;

pub struct PodIps {
    first: u32,
    assigned: HashMap<String, Ipv4Addr>,
}

impl PodIps {
    /// Addresses from `network` (a /16's first address) .0.2 up.
    pub fn new(network: Ipv4Addr) -> Self {
        Self { first: u32::from(network) + 2, assigned: HashMap::new() }
    }

    /// The Pod's address: the one it has, else the lowest free one; `None`
    /// when every address is taken.
    pub fn assign(&mut self, uid: &str) -> Option<Ipv4Addr> {
        if let Some(ip) = self.assigned.get(uid) {
            return Some(*ip);
        }
        let taken: std::collections::HashSet<Ipv4Addr> = self.assigned.values().copied().collect();
        let ip = (self.first..self.first + COUNT).map(Ipv4Addr::from).find(|ip| !taken.contains(ip))?;
        self.assigned.insert(uid.to_string(), ip);
        Some(ip)
    }

    /// Frees the Pod's address; returns it.
    pub fn release(&mut self, uid: &str) -> Option<Ipv4Addr> {
        self.assigned.remove(uid)
    }
}

/// Makes `ip` reachable on this host: `ip addr add IP/32 dev lo`.
pub fn plumb(ip: Ipv4Addr) -> Result<(), String> {
    let output = std::process::Command::new("ip")
        .args(["-4", "addr", "replace", &format!("{ip}/32"), "dev", "lo"])
        .output()
        .map_err(|err| format!("running ip: {err}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_string())
    }
}

/// Removes an address `plumb` added; best effort.
pub fn unplumb(ip: Ipv4Addr) {
    let _ = std::process::Command::new("ip")
        .args(["-4", "addr", "del", &format!("{ip}/32"), "dev", "lo"])
        .output();
}

/// Kubernetes' `$(VAR)` expansion of `command` and `args`: a defined variable
/// is replaced, an undefined reference is kept as written, `$$` is one `$`.
pub fn expand(text: &str, env: &std::collections::BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(name_and_rest) = after.strip_prefix('(')
            && let Some(close) = name_and_rest.find(')')
            && let Some(value) = env.get(&name_and_rest[..close])
        {
            out.push_str(value);
            rest = &name_and_rest[close + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_get_distinct_stable_addresses_that_are_reused_after_release() {
        let mut ips = PodIps::new(Ipv4Addr::new(10, 244, 0, 0));
        let a = ips.assign("a").unwrap();
        let b = ips.assign("b").unwrap();
        assert_eq!(a, Ipv4Addr::new(10, 244, 0, 2));
        assert_eq!(b, Ipv4Addr::new(10, 244, 0, 3));
        assert_eq!(ips.assign("a"), Some(a), "stable for one Pod");
        ips.release("a");
        assert_eq!(ips.assign("c"), Some(a), "a freed address is reused");
        for n in 0..COUNT {
            ips.assign(&format!("p{n}"));
        }
        assert_eq!(ips.assign("one-too-many"), None);
    }

    #[test]
    fn variables_expand_as_the_kubelet_expands_them() {
        let env = [("POD_IP".to_string(), "10.244.0.2".to_string())].into();
        assert_eq!(expand("--listen=$(POD_IP):8080", &env), "--listen=10.244.0.2:8080");
        assert_eq!(expand("$(MISSING) and $$(POD_IP) and $", &env), "$(MISSING) and $(POD_IP) and $");
        assert_eq!(expand("$(POD_IP", &env), "$(POD_IP");
        assert_eq!(expand("plain", &env), "plain");
    }
}
