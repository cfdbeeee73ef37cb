//! [`field_name`]: a parsed field name as `http`'s `HeaderName`, the common ones without
//! `HeaderName::from_bytes`.
//!
//! `from_bytes` lowers the name into a buffer and then matches it against all of `http`'s
//! standard names (~90 instructions a field in a profile of the pass). The names a request or a
//! response carries nearly every time are found here by their length and one or two compares
//! that ignore case; anything else goes to `from_bytes`, which also does the validation.

use http::header::{self, HeaderName, InvalidHeaderName};

/// The common names, by length.
static COMMON: &[&[(&[u8], HeaderName)]] = &[
    &[],
    &[],
    &[(b"te", header::TE)],
    &[(b"age", header::AGE), (b"via", header::VIA)],
    &[
        (b"host", header::HOST),
        (b"date", header::DATE),
        (b"etag", header::ETAG),
        (b"vary", header::VARY),
    ],
    &[(b"range", header::RANGE)],
    &[
        (b"accept", header::ACCEPT),
        (b"cookie", header::COOKIE),
        (b"server", header::SERVER),
        (b"origin", header::ORIGIN),
        (b"pragma", header::PRAGMA),
    ],
    &[
        (b"referer", header::REFERER),
        (b"expires", header::EXPIRES),
        (b"upgrade", header::UPGRADE),
    ],
    &[(b"location", header::LOCATION)],
    &[],
    &[
        (b"user-agent", header::USER_AGENT),
        (b"connection", header::CONNECTION),
        (b"set-cookie", header::SET_COOKIE),
    ],
    &[],
    &[(b"content-type", header::CONTENT_TYPE)],
    &[
        (b"cache-control", header::CACHE_CONTROL),
        (b"last-modified", header::LAST_MODIFIED),
        (b"if-none-match", header::IF_NONE_MATCH),
        (b"authorization", header::AUTHORIZATION),
        (b"accept-ranges", header::ACCEPT_RANGES),
    ],
    &[(b"content-length", header::CONTENT_LENGTH)],
    &[
        (b"accept-encoding", header::ACCEPT_ENCODING),
        (b"accept-language", header::ACCEPT_LANGUAGE),
    ],
    &[(b"content-encoding", header::CONTENT_ENCODING)],
    &[
        (b"transfer-encoding", header::TRANSFER_ENCODING),
        (b"if-modified-since", header::IF_MODIFIED_SINCE),
    ],
];

/// The name `raw` spells (any case), as `HeaderName::from_bytes` would make it.
#[inline]
pub fn field_name(raw: &[u8]) -> Result<HeaderName, InvalidHeaderName> {
    if let Some(list) = COMMON.get(raw.len()) {
        for (spelled, name) in *list {
            if raw.eq_ignore_ascii_case(spelled) {
                return Ok(name.clone());
            }
        }
    }
    HeaderName::from_bytes(raw)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_common_name_is_the_one_from_bytes_makes() {
        for list in COMMON {
            for (spelled, name) in *list {
                assert_eq!(spelled.len(), name.as_str().len());
                assert_eq!(&HeaderName::from_bytes(spelled).unwrap(), name);
                let upper = spelled.to_ascii_uppercase();
                assert_eq!(&field_name(&upper).unwrap(), name);
            }
        }
        for (i, list) in COMMON.iter().enumerate() {
            assert!(list.iter().all(|(s, _)| s.len() == i), "length {i}");
        }
    }

    #[test]
    fn other_names_and_invalid_ones_go_to_from_bytes() {
        assert_eq!(field_name(b"X-Custom").unwrap().as_str(), "x-custom");
        assert_eq!(field_name(b"hosT").unwrap(), header::HOST);
        assert!(field_name(b"ho st").is_err());
        assert!(field_name(b"").is_err());
        assert!(field_name(b"h\xc3\xa9").is_err());
        // Same length as a common name, not one of them.
        assert_eq!(field_name(b"hist").unwrap().as_str(), "hist");
    }
}
