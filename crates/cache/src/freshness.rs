//! Freshness lifetime and age of a stored response (RFC 9111 §4.2).
//!
//! This module owns the arithmetic of §4.2.1 (explicit freshness for a shared cache), §4.2.2
//! (heuristic freshness) and §4.2.3 (the corrected initial age), and the parsing of the HTTP-date
//! fields they rely on (`Date`, `Expires`, `Last-Modified`) and of `Age`.
//!
//! Invariants:
//! - Nothing here panics or overflows, whatever the headers or clocks say: time differences
//!   saturate at zero (a `Date` in the future, a response received "before" its request) and
//!   additions saturate at `Duration::MAX`.
//! - Freshness information that is present but cannot be trusted errs towards staleness: an
//!   invalid `Expires` (e.g. `0`), several `Expires` lines disagreeing, or an invalid or
//!   conflicting `max-age` / `s-maxage` yield `Lifetime::Explicit(Duration::ZERO)`.
//! - A date field given on several lines counts as valid only when every line parses to the same
//!   instant; otherwise it is invalid (an invalid `Date` falls back to the response time).

use rampart_head::Fields;
use std::time::{Duration, SystemTime};

use http::header::{HeaderName, HeaderValue, AGE, DATE, EXPIRES, LAST_MODIFIED};
use http::StatusCode;

use crate::cache_control::{parse_delta_seconds, trim_ows, ResponseDirectives};

/// Where a stored response's freshness lifetime came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifetime {
    /// From s-maxage, max-age or Expires.
    Explicit(Duration),
    /// Heuristic (§4.2.2): 10% of Date − Last-Modified (the caller bounds it: rampart uses the
    /// rule's `max_age_seconds`).
    Heuristic(Duration),
    /// Nothing to go by.
    Unknown,
}

/// Status codes that are heuristically cacheable by default (RFC 9110 §15.1).
pub(crate) const HEURISTICALLY_CACHEABLE: [u16; 12] =
    [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501];

/// §4.2.1 for a shared cache: s-maxage, then max-age, then Expires − Date (Expires − response_time
/// when Date is missing or invalid; an invalid Expires (e.g. "0") means already expired =
/// Explicit(0)). invalid_freshness → Explicit(0).
///
/// Heuristic only when no explicit lifetime and (status is heuristically cacheable by default —
/// 200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501 — or `public` is present), and
/// Last-Modified is present and earlier than Date (or response_time). The heuristic lifetime is
/// 10% of that interval, rounded down to whole seconds.
///
/// Directives from `CDN-Cache-Control` (`dirs.targeted`) replace `Expires` too (RFC 9213 §2.2):
/// then only their `s-maxage` / `max-age` are explicit.
pub fn lifetime(
    status: StatusCode,
    headers: &Fields,
    dirs: &ResponseDirectives,
    response_time: SystemTime,
) -> Lifetime {
    if dirs.invalid_freshness {
        return Lifetime::Explicit(Duration::ZERO);
    }
    if let Some(secs) = dirs.s_maxage.or(dirs.max_age) {
        return Lifetime::Explicit(Duration::from_secs(secs));
    }
    let date = match date_field(headers, &DATE) {
        DateField::Valid(t) => t,
        DateField::Absent | DateField::Invalid => response_time,
    };
    match date_field(headers, &EXPIRES) {
        _ if dirs.targeted => {}
        DateField::Absent => {}
        DateField::Invalid => return Lifetime::Explicit(Duration::ZERO),
        DateField::Valid(expires) => return Lifetime::Explicit(since(expires, date)),
    }
    if !(HEURISTICALLY_CACHEABLE.contains(&status.as_u16()) || dirs.public) {
        return Lifetime::Unknown;
    }
    let DateField::Valid(last_modified) = date_field(headers, &LAST_MODIFIED) else {
        return Lifetime::Unknown;
    };
    let interval = since(date, last_modified).as_secs();
    if interval == 0 {
        // Not earlier than Date (sub-second differences cannot occur with HTTP-dates).
        return Lifetime::Unknown;
    }
    Lifetime::Heuristic(Duration::from_secs(interval / 10))
}

/// §4.2.3: corrected_initial_age = max(apparent_age, age_value + response_delay), where
/// apparent_age = max(0, response_time − date_value), response_delay = response_time − request_time,
/// age_value = the Age header (delta-seconds; invalid or missing → 0; multiple → first valid one).
///
/// A missing or invalid `Date` gives an apparent age of 0 (as if the cache had added `Date` on
/// receipt, RFC 9110 §6.6.1). `response_time` before `request_time` gives a response delay of 0.
/// An `Age` line that holds a comma-separated list (lines combined by an intermediary) counts as
/// its elements in order; `age_value` is at most 2^31 seconds.
pub fn initial_age(
    headers: &Fields,
    request_time: SystemTime,
    response_time: SystemTime,
) -> Duration {
    let apparent_age = match date_field(headers, &DATE) {
        DateField::Valid(date) => since(response_time, date),
        DateField::Absent | DateField::Invalid => Duration::ZERO,
    };
    let response_delay = since(response_time, request_time);
    let age_value = headers
        .get_all(AGE)
        .iter()
        .flat_map(|line| line.as_bytes().split(|&b| b == b','))
        .find_map(|element| parse_delta_seconds(trim_ows(element).iter().copied()))
        .map_or(Duration::ZERO, Duration::from_secs);
    apparent_age.max(age_value.saturating_add(response_delay))
}

/// Parses an HTTP-date header value (IMF-fixdate, RFC 850, asctime); None if invalid.
///
/// Surrounding whitespace is ignored; anything else must match one of the three formats exactly
/// (case-sensitively, RFC 9110 §5.6.7), with a day of the week consistent with the date and a
/// year from 1970 to 9999. A two-digit RFC 850 year `00`–`69` is read as 20xx, `70`–`99` as 19xx.
pub fn http_date(v: &HeaderValue) -> Option<SystemTime> {
    let s = v.to_str().ok()?;
    httpdate::parse_http_date(s).ok()
}

/// The state of a date-valued header field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DateField {
    /// No line at all.
    Absent,
    /// Unparsable, or several lines that disagree.
    Invalid,
    /// Every line parses to this instant.
    Valid(SystemTime),
}

/// Reads a singleton date field that may (wrongly) appear on several lines.
fn date_field(headers: &Fields, name: &HeaderName) -> DateField {
    let mut result = DateField::Absent;
    for line in headers.get_all(name) {
        match (http_date(line), result) {
            (None, _) => return DateField::Invalid,
            (Some(t), DateField::Absent) => result = DateField::Valid(t),
            (Some(t), DateField::Valid(first)) if t == first => {}
            (Some(_), _) => return DateField::Invalid,
        }
    }
    result
}

/// `later − earlier`, or zero when `later` is not after `earlier`.
fn since(later: SystemTime, earlier: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    /// Pseudo-random header lines biased towards this syntax's special bytes.
    fn arbitrary_lines(seed: u64, count: usize) -> Vec<HeaderValue> {
        crate::testutil::arbitrary_lines(seed, count, b"abcgzipmx-=,;\" \t\\0123456789*.\x80\xff")
    }

    /// Sun, 06 Nov 1994 08:49:37 GMT
    const T0: u64 = 784_111_777;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn date(secs: u64) -> HeaderValue {
        HeaderValue::from_str(&httpdate::fmt_http_date(at(secs))).unwrap()
    }

    fn headers(pairs: &[(HeaderName, HeaderValue)]) -> Fields {
        let mut h = Fields::new();
        for (n, v) in pairs {
            h.append(n.clone(), v.clone());
        }
        h
    }

    fn v(s: &str) -> HeaderValue {
        HeaderValue::from_str(s).unwrap()
    }

    fn life(status: u16, h: &Fields, response_time: SystemTime) -> Lifetime {
        let dirs = ResponseDirectives::parse(h);
        lifetime(
            StatusCode::from_u16(status).unwrap(),
            h,
            &dirs,
            response_time,
        )
    }

    const HOUR: u64 = 3600;
    const DAY: u64 = 24 * HOUR;

    // --- http_date -----------------------------------------------------------------------------

    #[test]
    fn http_date_formats() {
        let want = Some(at(T0));
        assert_eq!(http_date(&v("Sun, 06 Nov 1994 08:49:37 GMT")), want);
        assert_eq!(http_date(&v("Sunday, 06-Nov-94 08:49:37 GMT")), want);
        assert_eq!(http_date(&v("Sun Nov  6 08:49:37 1994")), want);
        assert_eq!(http_date(&v("  Sun, 06 Nov 1994 08:49:37 GMT\t")), want);
        assert_eq!(
            http_date(&v("Thu, 01 Jan 1970 00:00:00 GMT")),
            Some(UNIX_EPOCH)
        );
    }

    #[test]
    fn http_date_invalid() {
        for s in [
            "",
            " ",
            "0",
            "-1",
            "now",
            "784111777",
            "sun, 06 nov 1994 08:49:37 gmt",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Nov 1994 08:49:37 +0000",
            "Mon, 06 Nov 1994 08:49:37 GMT", // wrong weekday
            "Sun, 31 Feb 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:60:00 GMT",
            "Sun, 06 Nov 1994 08:49:60 GMT",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 94 08:49:37 GMT",
            "Wed, 31 Dec 1969 23:59:59 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT, Sun, 06 Nov 1994 08:49:37 GMT",
            "1994-11-06T08:49:37Z",
        ] {
            assert_eq!(http_date(&v(s)), None, "{s:?}");
        }
        let raw = HeaderValue::from_bytes(b"Sun, 06 Nov 1994 08:49:37 GMT\xff").unwrap();
        assert_eq!(http_date(&raw), None);
        let raw = HeaderValue::from_bytes(b"\xe2\x80\x83Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(http_date(&raw), None);
    }

    #[test]
    fn http_date_extremes() {
        assert!(http_date(&v("Fri, 31 Dec 9999 23:59:59 GMT")).is_some());
        assert_eq!(http_date(&v("Sat, 01 Jan 10000 00:00:00 GMT")), None);
    }

    // --- explicit lifetime ---------------------------------------------------------------------

    #[test]
    fn s_maxage_beats_max_age_beats_expires() {
        let h = headers(&[
            (http::header::CACHE_CONTROL, v("max-age=60, s-maxage=30")),
            (DATE, date(T0)),
            (EXPIRES, date(T0 + 1000)),
        ]);
        assert_eq!(
            life(200, &h, at(T0)),
            Lifetime::Explicit(Duration::from_secs(30))
        );

        let h = headers(&[
            (http::header::CACHE_CONTROL, v("max-age=60")),
            (DATE, date(T0)),
            (EXPIRES, date(T0 + 1000)),
        ]);
        assert_eq!(
            life(200, &h, at(T0)),
            Lifetime::Explicit(Duration::from_secs(60))
        );

        // max-age=0 is an explicit (zero) lifetime, not "no information".
        let h = headers(&[
            (http::header::CACHE_CONTROL, v("max-age=0")),
            (LAST_MODIFIED, date(T0 - DAY)),
        ]);
        assert_eq!(life(200, &h, at(T0)), Lifetime::Explicit(Duration::ZERO));
    }

    #[test]
    fn explicit_lifetime_applies_to_any_status() {
        let h = headers(&[(http::header::CACHE_CONTROL, v("max-age=60"))]);
        assert_eq!(
            life(302, &h, at(T0)),
            Lifetime::Explicit(Duration::from_secs(60))
        );
        assert_eq!(
            life(500, &h, at(T0)),
            Lifetime::Explicit(Duration::from_secs(60))
        );
    }

    #[test]
    fn invalid_freshness_is_stale() {
        for cc in [
            "max-age=abc",
            "max-age=1, max-age=2",
            "s-maxage=x, max-age=60",
        ] {
            let h = headers(&[
                (http::header::CACHE_CONTROL, v(cc)),
                (EXPIRES, date(T0 + 1000)),
                (DATE, date(T0)),
            ]);
            assert_eq!(
                life(200, &h, at(T0)),
                Lifetime::Explicit(Duration::ZERO),
                "{cc}"
            );
        }
    }

    #[test]
    fn max_age_clamped_to_2_pow_31() {
        let h = headers(&[(
            http::header::CACHE_CONTROL,
            v("max-age=999999999999999999999"),
        )]);
        assert_eq!(
            life(200, &h, at(T0)),
            Lifetime::Explicit(Duration::from_secs(2_147_483_648))
        );
    }

    #[test]
    fn expires_minus_date() {
        let h = headers(&[(DATE, date(T0)), (EXPIRES, date(T0 + HOUR))]);
        // The response time does not matter when Date is valid.
        assert_eq!(
            life(200, &h, at(T0 + 50)),
            Lifetime::Explicit(Duration::from_secs(HOUR))
        );
        // Applies to statuses that are not heuristically cacheable too.
        assert_eq!(
            life(302, &h, at(T0)),
            Lifetime::Explicit(Duration::from_secs(HOUR))
        );
    }

    #[test]
    fn expires_without_valid_date_uses_response_time() {
        let h = headers(&[(EXPIRES, date(T0 + HOUR))]);
        assert_eq!(
            life(200, &h, at(T0 + 600)),
            Lifetime::Explicit(Duration::from_secs(HOUR - 600))
        );
        let h = headers(&[(DATE, v("yesterday")), (EXPIRES, date(T0 + HOUR))]);
        assert_eq!(
            life(200, &h, at(T0)),
            Lifetime::Explicit(Duration::from_secs(HOUR))
        );
        // Two Date lines that disagree are as good as none.
        let h = headers(&[
            (DATE, date(T0 - 100)),
            (DATE, date(T0)),
            (EXPIRES, date(T0 + HOUR)),
        ]);
        assert_eq!(
            life(200, &h, at(T0 + 10)),
            Lifetime::Explicit(Duration::from_secs(HOUR - 10))
        );
    }

    #[test]
    fn expires_in_the_past_or_invalid_is_expired() {
        let h = headers(&[(DATE, date(T0)), (EXPIRES, date(T0 - 10))]);
        assert_eq!(life(200, &h, at(T0)), Lifetime::Explicit(Duration::ZERO));
        for e in ["0", "-1", "", "never", "Sun, 06 Nov 1994 08:49:37"] {
            let h = headers(&[
                (DATE, date(T0)),
                (EXPIRES, v(e)),
                (LAST_MODIFIED, date(T0 - DAY)),
            ]);
            assert_eq!(
                life(200, &h, at(T0)),
                Lifetime::Explicit(Duration::ZERO),
                "{e:?}"
            );
        }
        let h = headers(&[(EXPIRES, HeaderValue::from_bytes(b"\xff\xfe").unwrap())]);
        assert_eq!(life(200, &h, at(T0)), Lifetime::Explicit(Duration::ZERO));
    }

    #[test]
    fn duplicated_expires() {
        let h = headers(&[
            (DATE, date(T0)),
            (EXPIRES, date(T0 + 60)),
            (EXPIRES, v("Sunday, 06-Nov-94 08:50:37 GMT")), // the same instant, RFC 850 form
        ]);
        assert_eq!(
            life(200, &h, at(T0)),
            Lifetime::Explicit(Duration::from_secs(60))
        );
        let h = headers(&[
            (DATE, date(T0)),
            (EXPIRES, date(T0 + 60)),
            (EXPIRES, date(T0 + 120)),
        ]);
        assert_eq!(life(200, &h, at(T0)), Lifetime::Explicit(Duration::ZERO));
        let h = headers(&[
            (DATE, date(T0)),
            (EXPIRES, date(T0 + 60)),
            (EXPIRES, v("0")),
        ]);
        assert_eq!(life(200, &h, at(T0)), Lifetime::Explicit(Duration::ZERO));
    }

    // --- heuristic lifetime --------------------------------------------------------------------

    #[test]
    fn heuristic_ten_percent() {
        let h = headers(&[(DATE, date(T0)), (LAST_MODIFIED, date(T0 - 10 * HOUR))]);
        assert_eq!(
            life(200, &h, at(T0 + 5)),
            Lifetime::Heuristic(Duration::from_secs(HOUR))
        );
        // Rounded down to whole seconds.
        let h = headers(&[(DATE, date(T0)), (LAST_MODIFIED, date(T0 - 15))]);
        assert_eq!(
            life(200, &h, at(T0)),
            Lifetime::Heuristic(Duration::from_secs(1))
        );
        let h = headers(&[(DATE, date(T0)), (LAST_MODIFIED, date(T0 - 9))]);
        assert_eq!(life(200, &h, at(T0)), Lifetime::Heuristic(Duration::ZERO));
    }

    #[test]
    fn heuristic_is_not_capped_here() {
        let h = headers(&[(DATE, date(T0)), (LAST_MODIFIED, date(T0 - 365 * DAY))]);
        assert_eq!(
            life(200, &h, at(T0)),
            Lifetime::Heuristic(Duration::from_secs(365 * DAY / 10))
        );
        let h = headers(&[
            (DATE, date(T0)),
            (LAST_MODIFIED, v("Thu, 01 Jan 1970 00:00:00 GMT")),
        ]);
        assert_eq!(
            life(200, &h, at(T0)),
            Lifetime::Heuristic(Duration::from_secs(T0 / 10))
        );
    }

    #[test]
    fn targeted_directives_ignore_expires() {
        let h = headers(&[
            (DATE, date(T0)),
            (EXPIRES, date(T0 + HOUR)),
            (LAST_MODIFIED, date(T0 - 10 * HOUR)),
        ]);
        let dirs = ResponseDirectives {
            targeted: true,
            ..ResponseDirectives::default()
        };
        assert_eq!(
            lifetime(StatusCode::OK, &h, &dirs, at(T0)),
            Lifetime::Heuristic(Duration::from_secs(HOUR))
        );
        let dirs = ResponseDirectives {
            targeted: true,
            max_age: Some(60),
            ..ResponseDirectives::default()
        };
        assert_eq!(
            lifetime(StatusCode::OK, &h, &dirs, at(T0)),
            Lifetime::Explicit(Duration::from_secs(60))
        );
    }

    #[test]
    fn heuristic_without_date_uses_response_time() {
        let h = headers(&[(LAST_MODIFIED, date(T0 - 10 * HOUR))]);
        assert_eq!(
            life(200, &h, at(T0)),
            Lifetime::Heuristic(Duration::from_secs(HOUR))
        );
        let h = headers(&[(DATE, v("garbage")), (LAST_MODIFIED, date(T0 - 10 * HOUR))]);
        assert_eq!(
            life(200, &h, at(T0)),
            Lifetime::Heuristic(Duration::from_secs(HOUR))
        );
    }

    #[test]
    fn heuristic_status_codes() {
        let h = headers(&[(DATE, date(T0)), (LAST_MODIFIED, date(T0 - 10 * HOUR))]);
        for s in [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501] {
            assert_eq!(
                life(s, &h, at(T0)),
                Lifetime::Heuristic(Duration::from_secs(HOUR)),
                "{s}"
            );
        }
        for s in [201, 302, 303, 307, 400, 403, 500, 502, 503] {
            assert_eq!(life(s, &h, at(T0)), Lifetime::Unknown, "{s}");
        }
        // `public` makes any status heuristically cacheable.
        let h = headers(&[
            (DATE, date(T0)),
            (LAST_MODIFIED, date(T0 - 10 * HOUR)),
            (http::header::CACHE_CONTROL, v("Public")),
        ]);
        assert_eq!(
            life(302, &h, at(T0)),
            Lifetime::Heuristic(Duration::from_secs(HOUR))
        );
    }

    #[test]
    fn heuristic_needs_last_modified_before_date() {
        let h = headers(&[(DATE, date(T0))]);
        assert_eq!(life(200, &h, at(T0)), Lifetime::Unknown);
        let h = headers(&[(DATE, date(T0)), (LAST_MODIFIED, date(T0))]);
        assert_eq!(life(200, &h, at(T0)), Lifetime::Unknown);
        let h = headers(&[(DATE, date(T0)), (LAST_MODIFIED, date(T0 + 100))]);
        assert_eq!(life(200, &h, at(T0)), Lifetime::Unknown);
        let h = headers(&[(DATE, date(T0)), (LAST_MODIFIED, v("0"))]);
        assert_eq!(life(200, &h, at(T0)), Lifetime::Unknown);
        let h = headers(&[
            (DATE, date(T0)),
            (LAST_MODIFIED, date(T0 - 100)),
            (LAST_MODIFIED, date(T0 - 200)),
        ]);
        assert_eq!(life(200, &h, at(T0)), Lifetime::Unknown);
        assert_eq!(life(200, &Fields::new(), at(T0)), Lifetime::Unknown);
    }

    #[test]
    fn no_information_with_other_directives() {
        let h = headers(&[(http::header::CACHE_CONTROL, v("no-cache, must-revalidate"))]);
        assert_eq!(life(200, &h, at(T0)), Lifetime::Unknown);
        // Unrelated directives with bad values do not invalidate freshness.
        let h = headers(&[(http::header::CACHE_CONTROL, v("stale-if-error=x"))]);
        assert_eq!(life(200, &h, at(T0)), Lifetime::Unknown);
    }

    #[test]
    fn lifetime_at_epoch_and_far_future() {
        let h = headers(&[(EXPIRES, v("Fri, 31 Dec 9999 23:59:59 GMT"))]);
        assert!(matches!(life(200, &h, UNIX_EPOCH), Lifetime::Explicit(d) if d > Duration::ZERO));
        let h = headers(&[(LAST_MODIFIED, date(T0))]);
        assert_eq!(life(200, &h, UNIX_EPOCH), Lifetime::Unknown);
    }

    // --- initial age ---------------------------------------------------------------------------

    #[test]
    fn initial_age_uses_apparent_age() {
        let h = headers(&[(DATE, date(T0))]);
        assert_eq!(
            initial_age(&h, at(T0 + 10), at(T0 + 12)),
            Duration::from_secs(12)
        );
    }

    #[test]
    fn initial_age_uses_age_plus_delay() {
        let h = headers(&[(DATE, date(T0)), (AGE, v("100"))]);
        assert_eq!(
            initial_age(&h, at(T0 + 1), at(T0 + 3)),
            Duration::from_secs(102)
        );
        // Sub-second precision of the local clock is kept for the delay.
        let h = headers(&[(AGE, v("5"))]);
        let req = at(T0);
        let resp = req + Duration::from_millis(250);
        assert_eq!(initial_age(&h, req, resp), Duration::from_millis(5250));
    }

    #[test]
    fn initial_age_without_headers_is_the_delay() {
        let h = Fields::new();
        assert_eq!(initial_age(&h, at(T0), at(T0 + 2)), Duration::from_secs(2));
        assert_eq!(initial_age(&h, at(T0), at(T0)), Duration::ZERO);
    }

    #[test]
    fn initial_age_clock_anomalies() {
        // Date in the future: apparent age 0.
        let h = headers(&[(DATE, date(T0 + 3600))]);
        assert_eq!(initial_age(&h, at(T0), at(T0 + 1)), Duration::from_secs(1));
        // Response "before" the request: delay 0.
        let h = headers(&[(AGE, v("7"))]);
        assert_eq!(
            initial_age(&h, at(T0 + 100), at(T0)),
            Duration::from_secs(7)
        );
        // Both.
        let h = headers(&[(DATE, date(T0 + 3600))]);
        assert_eq!(initial_age(&h, at(T0 + 100), at(T0)), Duration::ZERO);
        // Extreme times do not panic.
        let far = UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX) * 64);
        let h = headers(&[(AGE, v("99999999999999999999")), (DATE, date(T0))]);
        let age = initial_age(&h, UNIX_EPOCH, far);
        assert!(age >= Duration::from_secs(2_147_483_648));
    }

    #[test]
    fn initial_age_invalid_age_is_zero() {
        for a in ["", "-5", "5.0", "abc", "1e3", " ", "0x10", "+3"] {
            let h = headers(&[(AGE, v(a))]);
            assert_eq!(
                initial_age(&h, at(T0), at(T0 + 1)),
                Duration::from_secs(1),
                "{a:?}"
            );
        }
        let h = headers(&[(AGE, HeaderValue::from_bytes(b"\xff1").unwrap())]);
        assert_eq!(initial_age(&h, at(T0), at(T0)), Duration::ZERO);
    }

    #[test]
    fn initial_age_whitespace_and_multiple_values() {
        let h = headers(&[(AGE, v("  42\t"))]);
        assert_eq!(initial_age(&h, at(T0), at(T0)), Duration::from_secs(42));
        let h = headers(&[(AGE, v("junk")), (AGE, v("30")), (AGE, v("90"))]);
        assert_eq!(initial_age(&h, at(T0), at(T0)), Duration::from_secs(30));
        let h = headers(&[(AGE, v("x, 12, 13"))]);
        assert_eq!(initial_age(&h, at(T0), at(T0)), Duration::from_secs(12));
        let h = headers(&[(AGE, v("007"))]);
        assert_eq!(initial_age(&h, at(T0), at(T0)), Duration::from_secs(7));
    }

    #[test]
    fn initial_age_overflow_is_2_pow_31() {
        let h = headers(&[(AGE, v("99999999999999999999999999"))]);
        assert_eq!(
            initial_age(&h, at(T0), at(T0)),
            Duration::from_secs(2_147_483_648)
        );
    }

    #[test]
    fn initial_age_invalid_or_conflicting_date() {
        let h = headers(&[(DATE, v("garbage")), (AGE, v("3"))]);
        assert_eq!(initial_age(&h, at(T0), at(T0 + 1)), Duration::from_secs(4));
        let h = headers(&[(DATE, date(T0 - 500)), (DATE, date(T0 - 100))]);
        assert_eq!(initial_age(&h, at(T0), at(T0)), Duration::ZERO);
        let h = headers(&[(DATE, date(T0 - 500)), (DATE, date(T0 - 500))]);
        assert_eq!(initial_age(&h, at(T0), at(T0)), Duration::from_secs(500));
    }

    #[test]
    fn arbitrary_bytes_do_not_panic() {
        let lines = arbitrary_lines(2, 8_000);
        for pair in lines.chunks(2) {
            let mut h = Fields::new();
            for (name, line) in [
                DATE,
                EXPIRES,
                LAST_MODIFIED,
                AGE,
                http::header::CACHE_CONTROL,
            ]
            .into_iter()
            .zip(pair.iter().cycle())
            {
                h.append(name, line.clone());
            }
            let _ = life(200, &h, at(T0));
            let _ = initial_age(&h, at(T0 + 5), at(T0));
        }
    }
}
