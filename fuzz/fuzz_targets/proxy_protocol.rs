//! PROXY protocol headers (v1 text, v2 binary with TLVs) as a balancer or an attacker might
//! send them, into `rampart_proxy::net::proxy_protocol::parse`. Must never panic; a complete header
//! must say no more than the bytes hold, every shorter prefix of it must ask for more bytes
//! (the connection reader relies on that), and its addresses must survive a round trip
//! through `encode`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_proxy::net::proxy_protocol::{encode, parse, Version};

fuzz_target!(|data: &[u8]| {
    let Ok(Some((header, len))) = parse(data) else {
        return;
    };
    assert!(len <= data.len());
    for cut in 0..len {
        assert_eq!(parse(&data[..cut]), Ok(None), "prefix of {cut} bytes");
    }
    for v in [Version::V1, Version::V2] {
        let bytes = encode(v, header.addresses);
        let (again, n) = parse(&bytes).expect("own header parses").expect("complete");
        assert_eq!(n, bytes.len());
        // Mixed families are sent as IPv6: compare the addresses after mapping.
        let canon = |a: Option<(std::net::SocketAddr, std::net::SocketAddr)>| {
            a.map(|(s, d)| {
                let m = |x: std::net::SocketAddr| match x {
                    std::net::SocketAddr::V4(v4) if s.is_ipv4() != d.is_ipv4() => {
                        std::net::SocketAddr::new(v4.ip().to_ipv6_mapped().into(), v4.port())
                    }
                    other => other,
                };
                (m(s), m(d))
            })
        };
        assert_eq!(again.addresses, canon(header.addresses));
    }
});
