//! Which addresses are the public internet, and why the others are not.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why `ip` is not a public address, or `None` when it is one. An IPv6
/// address that carries an IPv4 one (mapped, compatible, NAT64, 6to4) is
/// judged by the address it carries.
pub fn non_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => non_public_v6(v6),
    }
}

fn non_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => "an unspecified (\"this network\") address",
        (127, _, _) => "a loopback address",
        (10, _, _) | (192, 168, _) => "a private address",
        (172, b, _) if (16..32).contains(&b) => "a private address",
        (100, b, _) if (64..128).contains(&b) => "a shared (carrier-grade NAT) address",
        (169, 254, _) => "a link-local address (where cloud metadata services answer)",
        (192, 0, 0) => "an IETF protocol assignment",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "a documentation address",
        (198, 18..=19, _) => "a benchmarking address",
        (224..=239, _, _) => "a multicast address",
        (240..=255, _, _) => "a reserved or broadcast address",
        _ => return None,
    })
}

fn non_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let segments = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return non_public_v4(v4);
    }
    // ::a.b.c.d (deprecated IPv4-compatible) and 64:ff9b::a.b.c.d (NAT64).
    if segments[..6] == [0; 6] && !ip.is_unspecified() && !ip.is_loopback()
        || segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
    {
        let [.., a, b, c, d] = ip.octets();
        return non_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    // 2002:a.b.c.d::/48 (6to4).
    if segments[0] == 0x2002 {
        let [_, _, a, b, c, d, ..] = ip.octets();
        return non_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    Some(match segments[0] {
        _ if ip.is_unspecified() => "an unspecified address",
        _ if ip.is_loopback() => "a loopback address",
        s if s & 0xfe00 == 0xfc00 => "a private (unique local) address",
        s if s & 0xffc0 == 0xfe80 => "a link-local address",
        s if s & 0xffc0 == 0xfec0 => "a site-local address",
        s if s & 0xff00 == 0xff00 => "a multicast address",
        0x2001 if segments[1] == 0x0db8 => "a documentation address",
        0x0100 if segments[1..4] == [0, 0, 0] => "a discard-only address",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_non_public_ranges() {
        for refused in [
            "0.0.0.0",
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "169.254.169.254",
            "192.0.0.8",
            "198.18.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "2001:db8::1",
        ] {
            let ip: IpAddr = refused.parse().unwrap();
            assert!(non_public(ip).is_some(), "{refused} passed as public");
        }
        for allowed in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "169.255.0.1",
            "192.169.0.1",
            "2606:4700:4700::1111",
            "::ffff:1.1.1.1",
            "64:ff9b::101:101",
            "2002:101:101::",
        ] {
            let ip: IpAddr = allowed.parse().unwrap();
            assert_eq!(non_public(ip), None, "{allowed} refused");
        }
    }
}
