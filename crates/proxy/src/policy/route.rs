//! The routing table: a request's rule by host, and what its path may do.
//!
//! Host matching (ARC2 leaves it open; our reading, documented in docs/configuration.md):
//! case-insensitive, port stripped, trailing dot ignored; an exact domain wins over a wildcard;
//! among wildcards the longest suffix wins; a `*` rule catches everything else.
//!
//! Path policy (rampart's reading, docs/arc2.md, "Path policy"):
//! `path_rules` first in file order, first match wins; otherwise the rule-level `paths` (prefix
//! match). Whitelist + match → cache-eligible; Whitelist + no match → proxied, not cached
//! (`Dynamic`); Blacklist + match → proxied, not cached (`Bypass`); Blacklist + no match →
//! cache-eligible. With `strict_path_rules` the "not cached" outcomes are blocked (403) instead.

use std::collections::HashMap;
use std::sync::Arc;

use rampart_config::{Config, DomainPattern, RuleConfig, RuleType};
use rampart_screen::ratelimit::Limiter;

use rampart_transform::minify::Languages;

use crate::caching::coding::Compress;
use crate::caching::transform::Transforms;
use crate::origin::balance::OriginSet;

/// A validated rule plus its runtime state.
#[derive(Debug)]
pub struct Rule {
    pub config: RuleConfig,
    pub origins: OriginSet,
    /// This rule's own per-client limiter (`rate_limit_per_second` in the rule); kept across
    /// reloads that leave the rule's rate alone.
    pub limiter: Option<Arc<Limiter>>,
    /// `Strict-Transport-Security` for HTTPS responses, pre-rendered.
    pub hsts: Option<http::HeaderValue>,
    /// Response compression (`enable_compression`); `None` = off.
    pub compress: Option<Arc<Compress>>,
    /// Minification of stored HTML, CSS and JS (`enable_minification`); `None` = off.
    pub minify: Option<Languages>,
    /// WebP copies of pictures stored for longer than this; `None` = off.
    pub webp: Option<std::time::Duration>,
    /// This rule's request counts (kept by domain across reloads).
    pub stats: Arc<crate::telemetry::metrics::RuleStats>,
    /// What the rule (or one of its path rules) does besides proxying, decided once so that
    /// a rule without any of it pays a flag test each.
    pub extras: Extras,
}

/// Which of a rule's message rules exist (see `policy::rewrite`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Extras {
    /// Redirects or rewrites.
    pub paths: bool,
    /// Request field rules, in the rule or a path rule.
    pub request_rules: bool,
    /// Response field rules, in the rule or a path rule.
    pub answer_rules: bool,
    /// A field rule names `{request_id}`.
    pub request_id: bool,
    /// `expires`, in the rule or a path rule.
    pub expires: bool,
}

impl Extras {
    fn of(rc: &RuleConfig) -> Extras {
        let all = std::iter::once((&rc.request_headers, &rc.response_headers)).chain(
            rc.path_rules
                .iter()
                .map(|p| (&p.request_headers, &p.response_headers)),
        );
        let mut e = Extras {
            paths: !rc.redirects.is_empty() || !rc.rewrites.is_empty(),
            expires: rc.expires.is_some() || rc.path_rules.iter().any(|p| p.expires.is_some()),
            ..Extras::default()
        };
        for (req, res) in all {
            e.request_rules |= !req.is_empty();
            e.answer_rules |= !res.is_empty();
            e.request_id |= req.uses(rampart_config::Variable::RequestId)
                || res.uses(rampart_config::Variable::RequestId);
        }
        e
    }
}

/// Host → rule lookup, built once at startup and shared by all workers.
#[derive(Debug)]
pub struct Router {
    rules: Vec<Arc<Rule>>,
    exact: HashMap<Box<str>, usize>,
    /// (`.suffix`, rule index), longest suffix first.
    wildcard: Vec<(Box<str>, usize)>,
    any: Option<usize>,
    /// `rate_limit_max_clients` the limiters were made with.
    max_clients: usize,
}

/// What the path policy allows for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathDecision {
    /// Proxied; the response may be stored for `max_age_seconds` (0 = not stored).
    Cacheable { max_age_seconds: u64 },
    /// Proxied, never cached: outside a Whitelist (`X-Arc2-Cache: Dynamic`).
    Dynamic,
    /// Proxied, never cached: inside a Blacklist (`X-Arc2-Cache: Bypass`).
    Bypass,
    /// Refused with 403 (`strict_path_rules`).
    Block,
}

impl Router {
    pub fn new(config: &Config) -> Self {
        Router::build(config, None)
    }

    /// The routing table for a reloaded configuration. State worth keeping moves over from
    /// `previous` by rule domain: a rule whose rate is unchanged keeps its limiter (a reload
    /// must not hand every client a fresh burst), and each origin that is still listed keeps
    /// its health verdict and response-time average.
    pub fn reloaded(config: &Config, previous: &Router) -> Self {
        Router::build(config, Some(previous))
    }

    fn build(config: &Config, previous: Option<&Router>) -> Self {
        let mut exact = HashMap::new();
        let mut wildcard = Vec::new();
        let mut any = None;
        let mut rules = Vec::with_capacity(config.rules.len());
        for (i, rc) in config.rules.iter().enumerate() {
            // First rule for a domain wins (validation warns about later duplicates).
            match &rc.domain {
                DomainPattern::Exact(h) => {
                    exact.entry(h.clone().into_boxed_str()).or_insert(i);
                }
                DomainPattern::Wildcard(s) => {
                    if !wildcard.iter().any(|(w, _): &(Box<str>, usize)| **w == **s) {
                        wildcard.push((s.clone().into_boxed_str(), i));
                    }
                }
                DomainPattern::Any => {
                    any.get_or_insert(i);
                }
            }
            let max_clients = config.screen.rate_limit_max_clients;
            let before = previous.and_then(|p| {
                p.rules
                    .iter()
                    .find(|r| r.config.domain == rc.domain)
                    .map(|r| (&**r, p.max_clients))
            });
            let origins = OriginSet::new(rc);
            if let Some((old, _)) = before {
                origins.adopt(&old.origins);
            }
            let limiter = match before {
                Some((old, old_max))
                    if old.config.rate_limit == rc.rate_limit && old_max == max_clients =>
                {
                    old.limiter.clone()
                }
                _ => rc
                    .rate_limit
                    .map(|r| Arc::new(Limiter::new(r.per_second, r.burst, max_clients))),
            };
            rules.push(Arc::new(Rule {
                config: rc.clone(),
                origins,
                limiter,
                hsts: rc
                    .hsts
                    .as_deref()
                    .and_then(|v| http::HeaderValue::from_str(v).ok()),
                compress: rc.compression.as_ref().map(|c| Arc::new(Compress::new(c))),
                minify: rc.minify.map(|m| Languages {
                    html: m.html,
                    css: m.css,
                    js: m.js,
                    html_comments: m.html_comments,
                }),
                webp: rc.webp.map(|w| w.min_age),
                stats: crate::telemetry::metrics::get().rule(&rc.domain_text),
                extras: Extras::of(rc),
            }));
        }
        wildcard.sort_by_key(|w| std::cmp::Reverse(w.0.len()));
        Router {
            max_clients: config.screen.rate_limit_max_clients,
            rules,
            exact,
            wildcard,
            any,
        }
    }

    /// Every rule, in file order.
    pub fn rules(&self) -> &[Arc<Rule>] {
        &self.rules
    }

    /// Finds the rule for a host's name: a `Host` header value or `:authority` without its
    /// port ([`rampart_cache::key::host_name`] of it; recv has it from checking the host).
    pub fn find_name(&self, name: &str) -> Option<&Arc<Rule>> {
        let host = unbracket(name);
        let host = host.strip_suffix('.').unwrap_or(host);
        let idx = if host.bytes().any(|b| b.is_ascii_uppercase()) {
            self.find_normalised(&host.to_ascii_lowercase())
        } else {
            self.find_normalised(host)
        }?;
        self.rules.get(idx)
    }

    fn find_normalised(&self, host: &str) -> Option<usize> {
        if let Some(&i) = self.exact.get(host) {
            return Some(i);
        }
        for (suffix, i) in &self.wildcard {
            if host.len() > suffix.len() && host.ends_with(&**suffix) {
                return Some(*i);
            }
        }
        self.any
    }
}

/// `[::1]` → `::1`; any other name as it is (the name a rule's domain is matched against).
fn unbracket(name: &str) -> &str {
    name.strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name)
}

impl Rule {
    /// What this rule does to the responses it stores.
    pub fn transforms(&self) -> Transforms {
        Transforms {
            compress: self.compress.clone(),
            minify: self.minify,
            webp: self.webp,
            off_disk: !self.config.cache_disk,
        }
    }

    /// Applies `path_rules`, `paths` and `rule_type` to a request path (without query).
    pub fn decide(&self, path: &str) -> PathDecision {
        self.decide_with(path).0
    }

    /// [`Rule::decide`], and which path rule matched (its index), if one did.
    #[inline]
    pub fn decide_with(&self, path: &str) -> (PathDecision, Option<usize>) {
        let c = &self.config;
        let path_rule = c.path_rules.iter().position(|pr| pr.matches(path));
        let (rule_type, matched, max_age) = match path_rule.map(|i| &c.path_rules[i]) {
            Some(pr) if pr.deny => return (PathDecision::Block, path_rule),
            Some(pr) => (pr.rule_type, true, pr.max_age_seconds),
            None => (
                c.rule_type,
                c.paths.iter().any(|p| path.starts_with(p.as_str())),
                c.max_age_seconds,
            ),
        };
        let outcome = match (rule_type, matched) {
            (RuleType::Whitelist, true) | (RuleType::Blacklist, false) => PathDecision::Cacheable {
                max_age_seconds: max_age,
            },
            (RuleType::Whitelist, false) if c.strict_path_rules => PathDecision::Block,
            (RuleType::Blacklist, true) if c.strict_path_rules => PathDecision::Block,
            (RuleType::Whitelist, false) => PathDecision::Dynamic,
            (RuleType::Blacklist, true) => PathDecision::Bypass,
        };
        (outcome, path_rule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(src: &str) -> Router {
        let v = rampart_config::validate(src, 1);
        let c = v.config.unwrap_or_else(|| panic!("{:?}", v.diagnostics));
        Router::new(&c)
    }

    const RULES: &str = r#"
[[proxy_rules]]
domain = "example.com"
forward_ipv4 = "127.0.0.1"
forward_port_http = 1
[[proxy_rules]]
domain = "*.example.com"
forward_ipv4 = "127.0.0.1"
forward_port_http = 2
[[proxy_rules]]
domain = "*.deep.example.com"
forward_ipv4 = "127.0.0.1"
forward_port_http = 3
"#;

    fn port(r: &Router, host: &str) -> Option<u16> {
        r.find_name(rampart_cache::key::host_name(host))
            .map(|rule| rule.config.upstreams[0].authority.port_u16().unwrap_or(0))
    }

    #[test]
    fn host_matching() {
        let r = router(RULES);
        assert_eq!(port(&r, "example.com"), Some(1));
        assert_eq!(port(&r, "EXAMPLE.com:8080"), Some(1));
        assert_eq!(port(&r, "example.com."), Some(1));
        assert_eq!(port(&r, "www.example.com"), Some(2));
        assert_eq!(port(&r, "a.deep.example.com"), Some(3));
        assert_eq!(port(&r, "deep.example.com"), Some(2));
        assert_eq!(port(&r, "badexample.com"), None);
        assert_eq!(port(&r, "other.org"), None);
    }

    #[test]
    fn names_without_port_or_brackets() {
        let name = |host| unbracket(rampart_cache::key::host_name(host));
        assert_eq!(name("a.b:80"), "a.b");
        assert_eq!(name("[::1]:80"), "::1");
        assert_eq!(name("::1"), "::1");
        assert_eq!(name("a.b"), "a.b");
    }

    #[test]
    fn path_policy() {
        let r = router(
            r#"
[[proxy_rules]]
domain = "x"
forward_ipv4 = "127.0.0.1"
max_age_seconds = 60
paths = ["/pub"]
rule_type = "Whitelist"
[[proxy_rules.path_rules]]
path = "/pub/private"
match_type = "StartsWith"
rule_type = "Blacklist"
max_age_seconds = 0
[[proxy_rules.path_rules]]
path = ".css"
match_type = "EndsWith"
rule_type = "Whitelist"
max_age_seconds = 600
[[proxy_rules]]
domain = "y"
forward_ipv4 = "127.0.0.1"
max_age_seconds = 60
paths = ["/admin"]
rule_type = "Blacklist"
strict_path_rules = true
"#,
        );
        let x = r.find_name("x").expect("rule x");
        assert_eq!(
            x.decide("/pub/a"),
            PathDecision::Cacheable {
                max_age_seconds: 60
            }
        );
        assert_eq!(x.decide("/other"), PathDecision::Dynamic);
        assert_eq!(x.decide("/pub/private/1"), PathDecision::Bypass);
        assert_eq!(
            x.decide("/any/site.css"),
            PathDecision::Cacheable {
                max_age_seconds: 600
            }
        );
        let y = r.find_name("y").expect("rule y");
        assert_eq!(y.decide("/admin/users"), PathDecision::Block);
        assert_eq!(
            y.decide("/"),
            PathDecision::Cacheable {
                max_age_seconds: 60
            }
        );
    }
}
