//! Certificate material from arbitrary bytes: the DER validity reader (renewal timing) and the
//! PEM chain + key loader (certificate files, the ACME CA's answers). Neither may panic, and a
//! validity that is read must be self-consistent with itself when read again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_tls::{der, pem};

fuzz_target!(|data: &[u8]| {
    if let Some(v) = der::validity(data) {
        assert_eq!(der::validity(data), Some(v));
        let _ = v.renew_at();
    }
    // Split into a "certificate file" and a "key file" at the first NUL.
    let (cert, key) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    if let Ok(loaded) = pem::parse_pair(cert, key) {
        assert!(!loaded.key.cert.is_empty());
    }
});
