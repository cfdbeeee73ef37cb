//! rampart's SQL-injection engine against the reference it implements: on arbitrary bytes,
//! `Sqli` must give exactly libinjectionrs's verdict (`libinjectionrs::detect_sqli`, the
//! pure-Rust port of libinjection) and, for an injection, the same fingerprint; and the
//! detector with its front (the plain-words shortcut and the memo) must agree with the engine.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_screen::sqli::{Detector, Sqli};

fuzz_target!(|data: &[u8]| {
    let theirs = libinjectionrs::detect_sqli(data);
    let theirs = theirs.is_injection().then(|| {
        theirs
            .fingerprint
            .map(|f| f.to_string())
            .unwrap_or_default()
    });
    let ours = Sqli::check(data).map(|f| f.to_string());
    assert_eq!(
        ours,
        theirs,
        "rampart and libinjectionrs differ on {:?}",
        String::from_utf8_lossy(data)
    );
    assert_eq!(Sqli.detect(data), ours, "the front changed the verdict");
});
