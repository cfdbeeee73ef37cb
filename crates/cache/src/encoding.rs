//! Content codings rampart produces and the `Accept-Encoding` negotiation (RFC 9110 §12.5.3);
//! whether a client takes WebP (`Accept`).

use http::header::{HeaderValue, ACCEPT};
use rampart_head::Fields;

/// A content coding rampart can produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Coding {
    Br,
    Zstd,
    Gzip,
}

impl Coding {
    /// Every coding, in rampart's order of preference when the client likes several equally
    /// (smallest output first).
    pub const ALL: [Coding; 3] = [Coding::Br, Coding::Zstd, Coding::Gzip];

    /// The token in `Content-Encoding` and `Accept-Encoding`.
    pub fn as_str(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
        }
    }

    pub fn header_value(self) -> HeaderValue {
        HeaderValue::from_static(self.as_str())
    }

    fn from_token(t: &str) -> Option<Coding> {
        if t.eq_ignore_ascii_case("br") {
            Some(Coding::Br)
        } else if t.eq_ignore_ascii_case("zstd") {
            Some(Coding::Zstd)
        } else if t.eq_ignore_ascii_case("gzip") || t.eq_ignore_ascii_case("x-gzip") {
            Some(Coding::Gzip)
        } else {
            None
        }
    }
}

/// The coding to send a client whose request carried `accept` (the `Accept-Encoding` values),
/// among `available` (in rampart's order of preference); `None` = identity.
///
/// The highest q-value wins; among equal q-values the earlier of `available` wins, and identity
/// loses to any coding the client rates as high. `q=0` refuses a coding; `*` rates every
/// coding not named. No `Accept-Encoding` at all means identity (RFC 9110 allows any coding
/// then, but old clients that send none often cannot decode one). Malformed members are
/// skipped.
pub fn negotiate<'a>(
    accept: impl Iterator<Item = &'a HeaderValue>,
    available: &[Coding],
) -> Option<Coding> {
    // q in thousandths; None = not named.
    let mut named: [Option<u16>; 3] = [None; 3];
    let mut star: Option<u16> = None;
    let mut identity: Option<u16> = None;
    let mut any = false;
    for value in accept {
        let Ok(s) = value.to_str() else { continue };
        for member in s.split(',') {
            let mut parts = member.split(';');
            let token = parts.next().unwrap_or("").trim();
            if token.is_empty() {
                continue;
            }
            any = true;
            let q = parts
                .find_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    k.trim()
                        .eq_ignore_ascii_case("q")
                        .then(|| parse_q(v.trim()))
                })
                .unwrap_or(Some(1000));
            let Some(q) = q else { continue };
            if token == "*" {
                star = Some(q);
            } else if token.eq_ignore_ascii_case("identity") {
                identity = Some(q);
            } else if let Some(c) = Coding::from_token(token) {
                let i = Coding::ALL.iter().position(|x| *x == c).unwrap_or(0);
                // The highest rating of a coding named twice counts.
                named[i] = Some(named[i].map_or(q, |old| old.max(q)));
            }
        }
    }
    if !any {
        return None;
    }
    let mut best: Option<(Coding, u16)> = None;
    for &c in available {
        let i = Coding::ALL.iter().position(|x| *x == c).unwrap_or(0);
        let q = named[i].or(star).unwrap_or(0);
        if q > 0 && best.is_none_or(|(_, b)| q > b) {
            best = Some((c, q));
        }
    }
    // A client that rates identity above every coding it accepts gets identity.
    best.filter(|(_, q)| identity.is_none_or(|i| i <= *q))
        .map(|(c, _)| c)
}

/// Whether the request's `Accept` names `image/webp` (with a q-value above 0). Only an explicit
/// mention counts: `*/*` and `image/*` come from clients that may not decode WebP.
pub fn accepts_webp(req: &Fields) -> bool {
    req.get_all(ACCEPT).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',').any(|range| {
                let mut parts = range.split(';');
                let media = parts.next().unwrap_or("").trim();
                media.eq_ignore_ascii_case("image/webp")
                    && !parts.any(|p| {
                        p.split_once('=').is_some_and(|(k, v)| {
                            k.trim().eq_ignore_ascii_case("q")
                                && v.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)
                        })
                    })
            })
        })
    })
}

/// A q-value (`0`, `0.5`, `1.000`) in thousandths; `None` when malformed.
fn parse_q(v: &str) -> Option<u16> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let int = match int {
        "0" => 0,
        "1" => 1000,
        _ => return None,
    };
    let mut f = 0u16;
    for (i, b) in frac.bytes().enumerate() {
        f += u16::from(b - b'0') * [100, 10, 1][i];
    }
    if int == 1000 && f > 0 {
        return None;
    }
    Some(int + f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(ae: &[&'static str], available: &[Coding]) -> Option<Coding> {
        let values: Vec<HeaderValue> = ae.iter().map(|s| HeaderValue::from_static(s)).collect();
        negotiate(values.iter(), available)
    }

    const ALL: &[Coding] = &Coding::ALL;

    #[test]
    fn browsers_get_brotli() {
        assert_eq!(pick(&["gzip, deflate, br, zstd"], ALL), Some(Coding::Br));
        assert_eq!(pick(&["gzip, deflate, br"], ALL), Some(Coding::Br));
        assert_eq!(pick(&["gzip"], ALL), Some(Coding::Gzip));
        assert_eq!(pick(&["gzip, br"], &[Coding::Gzip]), Some(Coding::Gzip));
    }

    #[test]
    fn q_values_are_honoured() {
        assert_eq!(pick(&["br;q=0.5, gzip;q=0.8"], ALL), Some(Coding::Gzip));
        assert_eq!(pick(&["br;q=0, gzip"], ALL), Some(Coding::Gzip));
        assert_eq!(pick(&["br;q=0, gzip;q=0"], ALL), None);
        assert_eq!(pick(&["zstd;q=1.0, br;q=0.999"], ALL), Some(Coding::Zstd));
        assert_eq!(pick(&["BR ; Q=0.9", "gzip;q=0.1"], ALL), Some(Coding::Br));
    }

    #[test]
    fn identity_star_and_oddities() {
        assert_eq!(pick(&[], ALL), None);
        assert_eq!(pick(&["identity"], ALL), None);
        assert_eq!(pick(&[""], ALL), None);
        assert_eq!(pick(&["*"], ALL), Some(Coding::Br));
        assert_eq!(pick(&["*;q=0.5, br;q=0"], ALL), Some(Coding::Zstd));
        assert_eq!(pick(&["deflate, compress"], ALL), None);
        // Malformed q: that member is ignored.
        assert_eq!(pick(&["br;q=2, gzip"], ALL), Some(Coding::Gzip));
        assert_eq!(pick(&["br;q=0.1234, gzip;q=0.5"], ALL), Some(Coding::Gzip));
        assert_eq!(pick(&["x-gzip"], ALL), Some(Coding::Gzip));
        assert_eq!(pick(&["gzip;q=0.1, identity"], ALL), None);
        assert_eq!(pick(&["gzip, identity;q=0.5"], ALL), Some(Coding::Gzip));
    }
}
