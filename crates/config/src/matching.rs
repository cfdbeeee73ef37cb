//! What a configuration matches requests by: client networks ([`Cidr`]), host names
//! ([`DomainPattern`]) and ARC2's pattern comparisons ([`MatchType`]).

/// An IP network such as `10.0.0.0/8` (a bare address is a /32 or /128).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: std::net::IpAddr,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Option<Cidr> {
        let (a, p) = match text.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text.trim(), None),
        };
        let addr: std::net::IpAddr = a.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max)?,
            None => max,
        };
        Some(Cidr { addr, prefix })
    }

    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        let ip = match ip {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (std::net::IpAddr::V4(n), std::net::IpAddr::V4(a)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - self.prefix)
                };
                u32::from(n) & mask == u32::from(a) & mask
            }
            (std::net::IpAddr::V6(n), std::net::IpAddr::V6(a)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - self.prefix)
                };
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// ARC2 `match_type`: how a pattern is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchType {
    Equals,
    StartsWith,
    EndsWith,
    Contains,
    DoesNotEqual,
    DoesNotContain,
}

impl MatchType {
    /// Case-sensitive comparison of `subject` with `pattern`.
    pub fn matches(self, pattern: &str, subject: &str) -> bool {
        self.matches_bytes(pattern.as_bytes(), subject.as_bytes())
    }

    /// [`MatchType::matches`] ignoring ASCII case (`ignore_case = true` in a path rule).
    pub fn matches_ignore_case(self, pattern: &str, subject: &str) -> bool {
        let (p, s) = (pattern.as_bytes(), subject.as_bytes());
        let contains = || p.is_empty() || s.windows(p.len()).any(|w| w.eq_ignore_ascii_case(p));
        match self {
            MatchType::Equals => s.eq_ignore_ascii_case(p),
            MatchType::StartsWith => s.len() >= p.len() && s[..p.len()].eq_ignore_ascii_case(p),
            MatchType::EndsWith => {
                s.len() >= p.len() && s[s.len() - p.len()..].eq_ignore_ascii_case(p)
            }
            MatchType::Contains => contains(),
            MatchType::DoesNotEqual => !s.eq_ignore_ascii_case(p),
            MatchType::DoesNotContain => !contains(),
        }
    }

    /// [`MatchType::matches`] on bytes: a field value need not be UTF-8 (a header with one
    /// non-ASCII byte is still compared, not skipped).
    pub fn matches_bytes(self, pattern: &[u8], subject: &[u8]) -> bool {
        let contains =
            || pattern.is_empty() || subject.windows(pattern.len()).any(|w| w == pattern);
        match self {
            MatchType::Equals => subject == pattern,
            MatchType::StartsWith => subject.starts_with(pattern),
            MatchType::EndsWith => subject.ends_with(pattern),
            MatchType::Contains => contains(),
            MatchType::DoesNotEqual => subject != pattern,
            MatchType::DoesNotContain => !contains(),
        }
    }
}

/// Which host names a rule serves.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DomainPattern {
    /// Lower-cased exact host name, e.g. `example.com`.
    Exact(String),
    /// `*.example.com`: any host ending in `.example.com` (stored as `.example.com`), not the
    /// apex itself.
    Wildcard(String),
    /// `*`: every host (a catch-all rule).
    Any,
}

impl DomainPattern {
    /// Whether a certificate for this pattern is valid for `host` (lower-case): a wildcard
    /// certificate covers exactly one label, unlike [`DomainPattern::matches`] routing.
    pub fn certificate_covers(&self, host: &str) -> bool {
        match self {
            DomainPattern::Exact(d) => d == host,
            DomainPattern::Wildcard(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|label| !label.is_empty() && !label.contains('.')),
            DomainPattern::Any => true,
        }
    }

    /// Whether `host` (lower-case, without port or trailing dot) is served by this pattern.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            DomainPattern::Exact(d) => d == host,
            DomainPattern::Wildcard(suffix) => {
                host.len() > suffix.len() && host.ends_with(suffix.as_str())
            }
            DomainPattern::Any => true,
        }
    }
}

/// A regular expression as written and compiled once, when the configuration is read. Matching
/// is linear in the subject's length (finite automata: no backtracking, whatever the pattern).
/// Two patterns are equal when they were written the same.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub text: String,
    pub regex: regex::Regex,
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text && self.regex.as_str() == other.regex.as_str()
    }
}

impl Pattern {
    /// Compiles `text`; `ignore_case` makes letters match either case. The error says what is
    /// wrong with the pattern.
    pub fn new(text: &str, ignore_case: bool) -> Result<Pattern, String> {
        regex::RegexBuilder::new(text)
            .case_insensitive(ignore_case)
            // A pattern in a configuration file stays small; a huge one is a mistake.
            .size_limit(1 << 20)
            .build()
            .map(|regex| Pattern {
                text: text.to_owned(),
                regex,
            })
            .map_err(|e| match e {
                regex::Error::Syntax(s) => s.lines().last().unwrap_or("").trim().to_owned(),
                regex::Error::CompiledTooBig(_) => "the pattern compiles too big".to_owned(),
                other => other.to_string(),
            })
    }
}

/// How a path rule compares its `path` with a request's path.
#[derive(Debug, Clone, PartialEq)]
pub enum PathMatch {
    /// One of ARC2's comparisons, optionally ignoring ASCII case (`ignore_case`).
    Text { kind: MatchType, ignore_case: bool },
    /// `match_type = "Regex"`: the path is a regular expression (unanchored: `^` and `$` say
    /// where it must start and end).
    Regex(Pattern),
}

impl PathMatch {
    pub fn matches(&self, pattern: &str, path: &str) -> bool {
        match self {
            PathMatch::Text {
                kind,
                ignore_case: false,
            } => kind.matches(pattern, path),
            PathMatch::Text {
                kind,
                ignore_case: true,
            } => kind.matches_ignore_case(pattern, path),
            PathMatch::Regex(p) => p.regex.is_match(path),
        }
    }
}
