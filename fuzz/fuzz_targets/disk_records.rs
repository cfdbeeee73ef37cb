//! The disk tier's bytes as they come back from a disk that may have been torn, truncated or
//! altered: record heads (and the stored object inside), segment summaries, purge logs, large
//! objects' trailers and chunk tables, and the keys records carry. None may panic; whatever is
//! accepted must be what the encoder would write again.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rampart_cache::disk::{large, record};

fuzz_target!(|data: &[u8]| {
    if let Some(h) = record::parse_head(data) {
        // A head believed whole: its parts add up, and the object in it decodes or not.
        assert_eq!(h.header.head_len(), data.len());
        let _ = record::parse_key(h.key);
        if let Some(obj) = rampart_cache::portable::decode_parts(h.meta, Bytes::new(), None) {
            let again = rampart_cache::portable::encode_head(&obj);
            assert!(rampart_cache::portable::decode_parts(&again, Bytes::new(), None).is_some());
        }
        let _ = record::body_ok(&h.header, data);
    }
    let _ = record::parse_header(data);
    for segment in [0, 1, u32::MAX] {
        if let Some((oldest, entries)) = record::decode_summary(data, segment) {
            assert_eq!(record::encode_summary(segment, oldest, &entries), data);
        }
    }
    let purges = record::decode_purges(data);
    let mut again = Vec::new();
    for (time, soft, scope) in &purges {
        again.extend(record::encode_purge(*time, *soft, scope));
        let _ = rampart_cache::store::PurgeScope::decode(scope);
    }
    assert!(data.starts_with(&again));
    if let Some(t) = data.get(..large::TRAILER) {
        let mut trailer = [0; large::TRAILER];
        trailer.copy_from_slice(t);
        for len in [data.len() as u64, u64::MAX, 0] {
            let _ = large::decode_trailer(&trailer, len);
        }
    }
    let _ = large::decode_table(data);
    let _ = rampart_cache::portable::decode(data);
});
