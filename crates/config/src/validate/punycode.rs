//! Punycode (RFC 3492), to tell the author of a Unicode domain the name clients send.

const BASE: u32 = 36;
const TMIN: u32 = 1;
const TMAX: u32 = 26;
const SKEW: u32 = 38;
const DAMP: u32 = 700;

fn digit(d: u32) -> char {
    let d = d as u8;
    if d < 26 {
        (b'a' + d) as char
    } else {
        (b'0' + d - 26) as char
    }
}

fn adapt(delta: u32, points: u32, first: bool) -> u32 {
    let mut delta = if first { delta / DAMP } else { delta / 2 };
    delta += delta / points;
    let mut k = 0;
    while delta > ((BASE - TMIN) * TMAX) / 2 {
        delta /= BASE - TMIN;
        k += BASE;
    }
    k + (BASE - TMIN + 1) * delta / (delta + SKEW)
}

/// One label's Punycode (without `xn--`); `None` on overflow.
fn encode(label: &str) -> Option<String> {
    let input: Vec<u32> = label.chars().map(u32::from).collect();
    let mut out: String = label.chars().filter(char::is_ascii).collect();
    let basic = out.len() as u32;
    let mut handled = basic;
    if basic > 0 {
        out.push('-');
    }
    let (mut n, mut delta, mut bias) = (128u32, 0u32, 72u32);
    while (handled as usize) < input.len() {
        let m = input.iter().copied().filter(|&c| c >= n).min()?;
        delta = delta.checked_add((m - n).checked_mul(handled + 1)?)?;
        n = m;
        for &c in &input {
            if c < n {
                delta = delta.checked_add(1)?;
            }
            if c == n {
                let mut q = delta;
                let mut k = BASE;
                loop {
                    let t = if k <= bias {
                        TMIN
                    } else if k >= bias + TMAX {
                        TMAX
                    } else {
                        k - bias
                    };
                    if q < t {
                        break;
                    }
                    out.push(digit(t + (q - t) % (BASE - t)));
                    q = (q - t) / (BASE - t);
                    k += BASE;
                }
                out.push(digit(q));
                bias = adapt(delta, handled + 1, handled == basic);
                delta = 0;
                handled += 1;
            }
        }
        delta = delta.checked_add(1)?;
        n = n.checked_add(1)?;
    }
    Some(out)
}

/// The ASCII form of a host name: each non-ASCII label lower-cased and written `xn--…`.
pub(crate) fn to_ascii(host: &str) -> Option<String> {
    let labels: Option<Vec<String>> = host
        .split('.')
        .map(|l| {
            if l.is_ascii() {
                Some(l.to_ascii_lowercase())
            } else {
                encode(&l.to_lowercase()).map(|p| format!("xn--{p}"))
            }
        })
        .collect();
    Some(labels?.join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_3492_and_common_names() {
        assert_eq!(
            to_ascii("bücher.example").as_deref(),
            Some("xn--bcher-kva.example")
        );
        assert_eq!(to_ascii("München.DE").as_deref(), Some("xn--mnchen-3ya.de"));
        assert_eq!(
            to_ascii("例え.テスト").as_deref(),
            Some("xn--r8jz45g.xn--zckzah")
        );
        // RFC 3492 §7.1 (L): 3<nen>B<gumi><kinpachi><sensei>
        assert_eq!(
            encode("3年b組金八先生").as_deref(),
            Some("3b-ww4c5e180e575a65lsy2b")
        );
    }
}
