//! What a rule does to a request's path and fields on their way, and to its answers:
//! redirects and rewrites (`[[proxy_rules.redirects]]`, `[[proxy_rules.rewrites]]`), field rules
//! (`request_headers`, `response_headers`, a path rule's too) and error pages
//! (`[proxy_rules.error_pages]`). A rule without any of them costs a request one emptiness
//! check each.

use rampart_head::{Fields, Response};
use std::net::IpAddr;

use bytes::Bytes;
use http::header::{
    HeaderName, HeaderValue, ACCEPT_RANGES, CONTENT_DISPOSITION, CONTENT_ENCODING,
    CONTENT_LANGUAGE, CONTENT_LENGTH, CONTENT_LOCATION, CONTENT_RANGE, CONTENT_TYPE, ETAG,
    LAST_MODIFIED, TRANSFER_ENCODING,
};
use http::StatusCode;
use rampart_config::{
    ErrorPage, HeaderRules, Redirect, Rewrite, RuleConfig, Template, TemplatePart, Variable,
};

use crate::body::ProxyBody;
use crate::origin::fields::OriginFields;

/// What a template's variables stand for in one request.
#[derive(Debug, Clone, Copy)]
pub struct Vars<'a> {
    pub client_ip: Option<IpAddr>,
    pub scheme: &'static str,
    /// The routed host as the cache key and the origin's `Host` have it: lower case, without
    /// its port or a trailing dot ([`crate::headers::origin_host`]).
    pub host: &'a str,
    pub request_id: Option<&'a HeaderValue>,
    pub path: &'a str,
    pub query: &'a str,
}

fn value_of(v: Variable, vars: &Vars<'_>, out: &mut String) {
    match v {
        Variable::ClientIp => {
            if let Some(ip) = vars.client_ip {
                use std::fmt::Write as _;
                let _ = write!(out, "{ip}");
            }
        }
        Variable::Scheme => out.push_str(vars.scheme),
        Variable::Host => out.push_str(vars.host),
        Variable::RequestId => {
            if let Some(id) = vars.request_id.and_then(|v| v.to_str().ok()) {
                out.push_str(id);
            }
        }
        Variable::Path => out.push_str(vars.path),
        Variable::Query => out.push_str(vars.query),
    }
}

/// A field value from its template; `None` (logged) when what the variables put in it cannot
/// be in a field (they are all visible ASCII, so this does not happen in practice).
fn render(t: &Template, vars: &Vars<'_>) -> Option<HeaderValue> {
    if let [TemplatePart::Text(text)] = t.parts.as_slice() {
        return HeaderValue::from_str(text).ok();
    }
    let mut out = String::new();
    for p in &t.parts {
        match p {
            TemplatePart::Text(text) => out.push_str(text),
            TemplatePart::Var(v) => value_of(*v, vars, &mut out),
        }
    }
    let v = HeaderValue::from_str(&out);
    if v.is_err() {
        tracing::debug!(
            value = out,
            "a header rule's value is not a field value; left out"
        );
    }
    v.ok()
}

/// The field rules that apply to a request: the rule's, then its matched path rule's.
pub fn rules<'r>(
    rule: &'r RuleConfig,
    path_rule: Option<usize>,
    response: bool,
) -> impl Iterator<Item = &'r HeaderRules> {
    let pick = move |r: &'r HeaderRules, p: &'r HeaderRules| if response { p } else { r };
    let own = pick(&rule.request_headers, &rule.response_headers);
    let path = path_rule
        .and_then(|i| rule.path_rules.get(i))
        .map(|p| pick(&p.request_headers, &p.response_headers));
    std::iter::once(own).chain(path).filter(|r| !r.is_empty())
}

/// The request's field rules, made to what goes to the origin.
pub fn to_origin<'r>(
    rules: impl Iterator<Item = &'r HeaderRules>,
    fields: &mut OriginFields,
    vars: &Vars<'_>,
) {
    for r in rules {
        for name in &r.remove {
            fields.remove(name);
        }
        for (name, t) in &r.set {
            if let Some(v) = render(t, vars) {
                fields.replace(name.clone(), v);
            }
        }
        for (name, t) in &r.add {
            if let Some(v) = render(t, vars) {
                fields.add(name.clone(), v);
            }
        }
    }
}

/// The response's field rules, made to what goes to the client (the stored object is not
/// touched: a hit's fields are a copy). `kept`: the answer comes from the origin or the cache
/// with a status [`keeps_fields`] lists; otherwise only `remove` and the `always` tables apply.
pub fn to_client<'r>(
    rules: impl Iterator<Item = &'r HeaderRules>,
    headers: &mut Fields,
    vars: &Vars<'_>,
    kept: bool,
) {
    for r in rules {
        for name in &r.remove {
            headers.remove(name);
        }
        if !(kept || r.always) {
            continue;
        }
        for (name, t) in &r.set {
            if let Some(v) = render(t, vars) {
                headers.insert(name.clone(), v);
            }
        }
        for (name, t) in &r.add {
            if let Some(v) = render(t, vars) {
                headers.append(name.clone(), v);
            }
        }
    }
}

/// The statuses NGINX's `add_header` and `expires` apply to: success and redirection answers a
/// client may keep (200, 201, 204, 206, 301, 302, 303, 304, 307, 308), never errors.
pub fn keeps_fields(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        200 | 201 | 204 | 206 | 301 | 302 | 303 | 304 | 307 | 308
    )
}

/// NGINX's `expires N`: `Expires` at now + `secs` and `Cache-Control: max-age=secs`, replacing
/// what the origin sent (the stored object keeps the origin's fields).
pub fn expires(headers: &mut Fields, secs: u64) {
    // The configuration keeps `secs` within ten years (NGINX's `expires max`).
    let now = std::time::SystemTime::now();
    if let Some(at) = now.checked_add(std::time::Duration::from_secs(secs)) {
        if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(at)) {
            headers.insert(http::header::EXPIRES, v);
        }
    }
    if let Ok(v) = HeaderValue::from_str(&format!("max-age={secs}")) {
        headers.insert(http::header::CACHE_CONTROL, v);
    }
}

/// The first redirect of `redirects` whose `from` matches `path`: its status and target.
pub fn redirect(redirects: &[Redirect], vars: &Vars<'_>) -> Option<(StatusCode, String)> {
    let https = vars.scheme == "https";
    let (r, caps) = redirects
        .iter()
        .filter(|r| r.https.is_none_or(|h| h == https))
        .find_map(|r| r.from.regex.captures(vars.path).map(|c| (r, c)))?;
    let mut to = String::new();
    for p in &r.to.parts {
        match p {
            // `$1`, `${name}`: what `from` captured (never read again for variables).
            TemplatePart::Text(text) => caps.expand(text, &mut to),
            TemplatePart::Var(v) => value_of(*v, vars, &mut to),
        }
    }
    if !names_its_host(&r.to) {
        to = same_host(to);
    }
    if r.keep_query && !vars.query.is_empty() {
        to.push(if to.contains('?') { '&' } else { '?' });
        to.push_str(vars.query);
    }
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::MOVED_PERMANENTLY);
    Some((status, to))
}

/// Whether a redirect's target, as written, names its scheme and host (`https://new.example/$1`,
/// `{scheme}://{host}$1`, `//cdn.example/$1`): what `from` captured then comes after a host the
/// file chose.
fn names_its_host(to: &Template) -> bool {
    match to.parts.as_slice() {
        [TemplatePart::Var(Variable::Scheme), TemplatePart::Text(t), ..] => t.starts_with("://"),
        [TemplatePart::Text(t), ..] => {
            t.starts_with("//") || scheme_len(t).is_some_and(|n| t[n..].starts_with("//"))
        }
        _ => false,
    }
}

/// The length of `text`'s URL scheme with its `:` (RFC 3986 §3.1), when it starts with one.
fn scheme_len(text: &str) -> Option<usize> {
    let end = text.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))?;
    let first_is_letter = text.as_bytes().first().is_some_and(u8::is_ascii_alphabetic);
    (first_is_letter && text[end..].starts_with(':')).then_some(end + 1)
}

/// A redirect target meant for the request's own host, made so that no browser reads it as
/// another host's: what it starts with after substitution may come from the client.
///
/// Browsers drop tabs and line breaks anywhere in a URL and controls and spaces before it, and
/// read `\` as `/`: `/\evil.com`, `\\evil.com` and `/<TAB>/evil.com` are `//evil.com`, a
/// scheme-relative URL to another host. So the leading run of slashes and backslashes (also
/// percent-encoded, which an origin may decode; encoded tabs and line breaks in it count for
/// nothing) becomes one `/`. A target that starts with a scheme (`https:/evil.com`, from a
/// capture) gets `./` before it, which makes it the relative path it was meant to be
/// (RFC 3986 §4.2).
fn same_host(to: String) -> String {
    let to = if to.contains(['\t', '\n', '\r']) {
        to.replace(['\t', '\n', '\r'], "")
    } else {
        to
    };
    let start = to.trim_start_matches(|c: char| c <= ' ');
    let mut rest = start;
    let mut slashes = 0;
    loop {
        if let Some(r) = rest.strip_prefix(['/', '\\']) {
            slashes += 1;
            rest = r;
            continue;
        }
        let code = rest.strip_prefix('%').and_then(|r| r.get(..2));
        match code.map(str::to_ascii_uppercase).as_deref() {
            Some("2F" | "5C") => slashes += 1,
            Some("09" | "0A" | "0D") => {}
            _ => break,
        }
        rest = &rest[3..];
    }
    if slashes > 0 {
        if start.len() - rest.len() == 1 && start.starts_with('/') && start.len() == to.len() {
            return to;
        }
        return format!("/{rest}");
    }
    if scheme_len(start).is_some() {
        return format!("./{start}");
    }
    if start.len() == to.len() {
        to
    } else {
        start.to_owned()
    }
}

/// The path the first matching rewrite makes of `path`, when one matches.
pub fn rewrite(rewrites: &[Rewrite], path: &str) -> Option<String> {
    rewrites.iter().find_map(|r| {
        let caps = r.from.regex.captures(path)?;
        let mut to = String::new();
        caps.expand(&r.to, &mut to);
        Some(to)
    })
}

/// Fields that describe a body (its coding, language, digest, validators, name, range): an
/// error page that takes the place of the origin's body takes them away with it.
static BODY_FIELDS: [HeaderName; 13] = [
    CONTENT_ENCODING,
    CONTENT_LANGUAGE,
    CONTENT_LOCATION,
    CONTENT_RANGE,
    CONTENT_DISPOSITION,
    TRANSFER_ENCODING,
    ETAG,
    LAST_MODIFIED,
    ACCEPT_RANGES,
    // RFC 1864 (obsolete, still sent), RFC 3230 (obsoleted by RFC 9530), RFC 9530.
    HeaderName::from_static("content-md5"),
    HeaderName::from_static("digest"),
    HeaderName::from_static("repr-digest"),
    HeaderName::from_static("content-digest"),
];

/// `res` with the page's body and type in place of its own (status and other fields kept;
/// those that described the old body go).
pub fn with_page(mut res: Response<ProxyBody>, page: &ErrorPage) -> Response<ProxyBody> {
    let h = res.headers_mut();
    for name in &BODY_FIELDS {
        h.remove(name);
    }
    if let Ok(v) = HeaderValue::from_str(&page.content_type) {
        h.insert(CONTENT_TYPE, v);
    }
    h.insert(CONTENT_LENGTH, HeaderValue::from(page.body.len()));
    // The old body (an origin's, still streaming) is dropped with its connection.
    let (parts, _old) = res.into_parts();
    Response::from_parts(parts, ProxyBody::full(Bytes::from(page.body.clone())))
}
