//! Just enough DER to read a certificate's validity period (for renewal timing), so no X.509
//! parser is needed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A certificate's `notBefore` and `notAfter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl Validity {
    /// When to renew: two thirds into the lifetime.
    pub fn renew_at(&self) -> SystemTime {
        let life = self
            .not_after
            .duration_since(self.not_before)
            .unwrap_or_default();
        self.not_before + life * 2 / 3
    }
}

/// One TLV: (tag, contents, rest).
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The validity of an X.509 certificate in DER, or `None` if it cannot be read.
pub fn validity(cert: &[u8]) -> Option<Validity> {
    const SEQUENCE: u8 = 0x30;
    let (tag, certificate, _) = tlv(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, tbs, _) = tlv(certificate)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut rest = tbs;
    // [0] EXPLICIT version, optional.
    if rest.first() == Some(&0xa0) {
        rest = tlv(rest)?.2;
    }
    // serialNumber, signature, issuer.
    for _ in 0..3 {
        rest = tlv(rest)?.2;
    }
    let (tag, validity, _) = tlv(rest)?;
    if tag != SEQUENCE {
        return None;
    }
    let (t1, nb, rest) = tlv(validity)?;
    let (t2, na, _) = tlv(rest)?;
    Some(Validity {
        not_before: time(t1, nb)?,
        not_after: time(t2, na)?,
    })
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn time(tag: u8, text: &[u8]) -> Option<SystemTime> {
    let digits = |s: &[u8]| -> Option<i64> {
        s.iter().try_fold(0i64, |acc, &b| {
            b.is_ascii_digit().then(|| acc * 10 + (b - b'0') as i64)
        })
    };
    let (year, rest) = match tag {
        0x17 if text.len() == 13 => {
            let yy = digits(&text[..2])?;
            // RFC 5280 §4.1.2.5.1: 50..99 → 19xx, 00..49 → 20xx.
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &text[2..])
        }
        0x18 if text.len() == 15 => (digits(&text[..4])?, &text[4..]),
        _ => return None,
    };
    if rest[10] != b'Z' {
        return None;
    }
    let (mo, d) = (digits(&rest[0..2])?, digits(&rest[2..4])?);
    let (h, mi, s) = (
        digits(&rest[4..6])?,
        digits(&rest[6..8])?,
        digits(&rest[8..10])?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let secs = days_from_civil(year, mo, d) * 86_400 + h * 3600 + mi * 60 + s;
    if secs >= 0 {
        Some(UNIX_EPOCH + Duration::from_secs(secs as u64))
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs()))
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn civil_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2026, 11, 22), 20_779);
    }

    #[test]
    fn reads_rcgen_validity() {
        let mut params = rcgen::CertificateParams::new(vec!["a.test".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2030, 2, 28);
        params.not_after = rcgen::date_time_ymd(2051, 6, 1);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let v = validity(cert.der()).unwrap();
        let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
        // 2030 is written as UTCTime, 2051 as GeneralizedTime (RFC 5280).
        assert_eq!(secs(v.not_before), days_from_civil(2030, 2, 28) * 86_400);
        assert_eq!(secs(v.not_after), days_from_civil(2051, 6, 1) * 86_400);
        let third = (secs(v.not_after) - secs(v.not_before)) / 3;
        assert!((secs(v.renew_at()) - (secs(v.not_after) - third)).abs() <= 1);
    }

    #[test]
    fn garbage_is_none() {
        assert_eq!(validity(b""), None);
        assert_eq!(validity(&[0x30, 0x82, 0xff]), None);
        assert_eq!(validity(&[0x30, 0x03, 0x02, 0x01, 0x00]), None);
    }
}
