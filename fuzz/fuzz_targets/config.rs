//! The configuration reader and validator on arbitrary text: errors are diagnostics, never
//! panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let v = rampart_config::validate(text, 2);
        for d in &v.diagnostics {
            let _ = d.to_string();
        }
    }
});
