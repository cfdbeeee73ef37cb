//! The SQL-injection detector and every extractor in front of it on arbitrary bytes; and the
//! shortcut that skips the engine for plain words must never skip a value the engine flags.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_screen::inspect::{self, BodyKind};
use rampart_screen::sqli::{Detector, Sqli};

fuzz_target!(|data: &[u8]| {
    let d = &Sqli;
    let _ = d.detect(data);
    if rampart_screen::sqli::plain_words(data) {
        assert!(
            !libinjectionrs::detect_sqli(data).is_injection(),
            "plain words skipped but flagged: {:?}",
            String::from_utf8_lossy(data)
        );
    }
    let _ = inspect::body(d, BodyKind::Json, b"", data);
    let _ = inspect::body(d, BodyKind::Form, b"", data);
    let _ = inspect::multipart(d, b"multipart/form-data; boundary=b", data);
    let _ = inspect::multipart(d, b"multipart/form-data", data);
    let _ = inspect::cookies(d, data);
    let _ = inspect::ambiguous_content_type(data);
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = inspect::query(d, s);
        let _ = inspect::path(d, s);
    }
    let _ = inspect::percent_decode(data, true);
});
