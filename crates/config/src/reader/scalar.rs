//! Value conversions the readers share: the boolean a mistyped value means, durations written
//! as text, and strings written back as TOML.

use toml_edit::{Item, Value};

/// The boolean a value of another type means: `"false"` in quotes, `"no"`, `0` → `false`.
pub(crate) fn bool_meant(item: &Item) -> &'static str {
    let word = match item.as_value() {
        Some(Value::String(w)) => w.value().trim().to_ascii_lowercase(),
        Some(Value::Integer(i)) => i.value().to_string(),
        _ => String::new(),
    };
    match word.as_str() {
        "false" | "no" | "off" | "0" | "n" => "false",
        _ => "true",
    }
}

/// The longest lifetime `expires` gives clients: ten years (NGINX's `expires max` is about as
/// far).
pub(crate) const MAX_LIFETIME: u64 = 10 * 365 * 86_400;

/// A duration written as text (`"1h"`, `"10m"`, `"1h30m"`, `"2d"`) in the unit of `key`: seconds
/// for a key in seconds, milliseconds for one in `_ms`; `None` for other keys or other text.
pub(super) fn duration_in(key: &str, text: &str) -> Option<i64> {
    let per_second = if key.ends_with("_ms") {
        1000
    } else if ["second", "_sec", "timeout", "interval", "_age"]
        .iter()
        .any(|w| key.contains(w))
    {
        1
    } else {
        return None;
    };
    let total = duration_millis(text)?;
    if per_second == 1000 {
        Some(total)
    } else {
        (total % 1000 == 0).then_some(total / 1000)
    }
}

/// A duration written as text (`"1h"`, `"10m"`, `"1h30m"`, `"2d"`, `"500ms"`) in milliseconds.
pub(crate) fn duration_millis(text: &str) -> Option<i64> {
    let mut total: i64 = 0;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_end = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let (unit, after) = rest.split_at(unit_end);
        let ms: i64 = match unit {
            "ms" => 1,
            "s" | "sec" => 1000,
            "m" | "min" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(ms)?)?;
        rest = after.trim_start();
    }
    Some(total)
}

/// `text` as a TOML basic string, quotes included (for a fix the reader can paste).
pub(crate) fn toml_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
