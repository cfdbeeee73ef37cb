//! A rule's `domain`: its pattern (a name, `*.` and a suffix, an IP), the names it is told
//! apart from (a URL or a port written where a domain goes), and the first rule for a domain
//! winning.

use std::collections::HashSet;
use std::net::Ipv6Addr;

use crate::model::*;
use crate::reader::{At, Section, Sink};
use crate::validate::{error, toml_string, warn};
use crate::Severity;

/// `domain`: required, and the first rule for a domain wins (a later one is warned about, and
/// `true` returned with it).
pub(super) fn read_domain(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    domain_at: Option<&At<String>>,
    domains: &mut HashSet<DomainPattern>,
) -> (Option<DomainPattern>, bool) {
    let domain = match domain_at {
        Some(d) => parse_domain(sink, d),
        None => {
            s.missing(
                sink,
                "domain",
                Severity::Error,
                "every [[proxy_rules]] needs a `domain`",
                "add `domain = \"example.com\"`",
            );
            None
        }
    };
    let mut unused = false;
    if let (Some(d), Some(at)) = (&domain, domain_at) {
        if !domains.insert(d.clone()) {
            unused = true;
            warn(
                sink,
                at,
                format!(
                    "domain {:?} already has an earlier rule; this rule is never used",
                    at.value
                ),
                "merge the two rules or remove one",
            );
        }
    }
    (domain, unused)
}

fn parse_domain(sink: &mut Sink<'_>, d: &At<String>) -> Option<DomainPattern> {
    let text = d.value.trim().to_ascii_lowercase();
    let text = text.strip_suffix('.').unwrap_or(&text).to_owned();
    let bad = |sink: &mut Sink<'_>, why: &str| {
        error(
            sink,
            d,
            format!("{:?} is not a valid domain: {why}", d.value),
            "write a host name such as \"example.com\", a wildcard \"*.example.com\", or \"*\" for every host",
        );
        None
    };
    if text == "*" {
        return Some(DomainPattern::Any);
    }
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        let clean: String = d.value.trim().chars().filter(|c| !c.is_control()).collect();
        let hint = if clean.is_empty() {
            "write a host name such as \"example.com\", a wildcard \"*.example.com\", or \"*\" for every host".to_owned()
        } else {
            format!("write it without: `domain = {}`", toml_string(&clean))
        };
        error(
            sink,
            d,
            format!(
                "{:?} is not a valid domain: it contains a control character (U+{:04X})",
                d.value, c as u32
            ),
            hint,
        );
        return None;
    }
    if let Some((what, bare)) = url_parts(&text) {
        error(
            sink,
            d,
            format!(
                "{:?} is not a valid domain: it contains {what}; a rule matches the host name alone",
                d.value
            ),
            format!("write it as `domain = \"{bare}\"`"),
        );
        return None;
    }
    let (wild, host) = match text.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    if host.is_empty() {
        return bad(sink, "it is empty");
    }
    if host.contains('*') {
        return bad(
            sink,
            "`*` is allowed only as the whole first label (`*.example.com`)",
        );
    }
    if host.contains([' ', '?', '#', '@']) {
        return bad(sink, "it contains characters a host name cannot have");
    }
    if !host.is_ascii() {
        // Clients send the IDNA form (RFC 5891); a Unicode name would never match.
        let ascii = crate::validate::punycode::to_ascii(host).unwrap_or_default();
        let written = if wild { format!("*.{ascii}") } else { ascii };
        error(
            sink,
            d,
            format!(
                "{:?} is written in Unicode, but clients send host names in their IDNA form, so it would never match",
                d.value
            ),
            format!("write it as `domain = \"{written}\"`"),
        );
        return None;
    }
    Some(if wild {
        DomainPattern::Wildcard(format!(".{host}"))
    } else {
        DomainPattern::Exact(host.to_owned())
    })
}

/// What in a domain makes it a URL rather than a host name (a scheme, a path, a port), and
/// the host name in it.
fn url_parts(text: &str) -> Option<(String, String)> {
    let mut what = Vec::new();
    let mut rest = text;
    if let Some((scheme, after)) = text.split_once("://") {
        what.push(format!("a scheme (`{scheme}://`)"));
        rest = after;
    }
    if let Some(i) = rest.find(['/', '?', '#']) {
        what.push(format!("a path (`{}`)", &rest[i..]));
        rest = &rest[..i];
    }
    if let Some(i) = rest.rfind('@') {
        what.push("a user name".to_owned());
        rest = &rest[i + 1..];
    }
    let bracketed = rest.starts_with('[');
    let port_at = if bracketed {
        rest.find("]:").map(|i| i + 1)
    } else if rest.parse::<Ipv6Addr>().is_ok() {
        None
    } else {
        rest.rfind(':')
    };
    if let Some(i) = port_at {
        what.push(format!("a port (`{}`)", &rest[i..]));
        rest = &rest[..i];
    }
    let host = rest.trim_start_matches('[').trim_end_matches(']');
    if what.is_empty() || host.is_empty() {
        return None;
    }
    let what = match what.len() {
        1 => what.remove(0),
        _ => {
            let last = what.pop().unwrap_or_default();
            format!("{} and {last}", what.join(", "))
        }
    };
    Some((what, host.to_owned()))
}
