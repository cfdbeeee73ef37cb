//! What a rule does to a request's path and fields on their way, and to its answers:
//! redirects and rewrites (`[[proxy_rules.redirects]]`, `[[proxy_rules.rewrites]]`), field rules
//! (`request_headers`, `response_headers`, a path rule's too) and error pages
//! (`[proxy_rules.error_pages]`). A rule without any of them costs a request one emptiness
//! check each.

use std::net::IpAddr;

use bytes::Bytes;
use http::header::{
    HeaderMap, HeaderValue, ACCEPT_RANGES, CONTENT_ENCODING, CONTENT_LANGUAGE, CONTENT_LENGTH,
    CONTENT_LOCATION, CONTENT_RANGE, CONTENT_TYPE, ETAG, LAST_MODIFIED, TRANSFER_ENCODING,
};
use http::{Response, StatusCode};
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
    /// Without its port.
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
/// touched: a hit's fields are a copy).
pub fn to_client<'r>(
    rules: impl Iterator<Item = &'r HeaderRules>,
    headers: &mut HeaderMap,
    vars: &Vars<'_>,
) {
    for r in rules {
        for name in &r.remove {
            headers.remove(name);
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

/// The first redirect of `redirects` whose `from` matches `path`: its status and target.
pub fn redirect(redirects: &[Redirect], vars: &Vars<'_>) -> Option<(StatusCode, String)> {
    let (r, caps) = redirects
        .iter()
        .find_map(|r| r.from.regex.captures(vars.path).map(|c| (r, c)))?;
    let mut to = String::new();
    for p in &r.to.parts {
        match p {
            // `$1`, `${name}`: what `from` captured (never read again for variables).
            TemplatePart::Text(text) => caps.expand(text, &mut to),
            TemplatePart::Var(v) => value_of(*v, vars, &mut to),
        }
    }
    if r.keep_query && !vars.query.is_empty() {
        to.push(if to.contains('?') { '&' } else { '?' });
        to.push_str(vars.query);
    }
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::MOVED_PERMANENTLY);
    Some((status, to))
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

/// `res` with the page's body and type in place of its own (status and other fields kept;
/// those that described the old body go).
pub fn with_page(mut res: Response<ProxyBody>, page: &ErrorPage) -> Response<ProxyBody> {
    let h = res.headers_mut();
    for name in [
        CONTENT_ENCODING,
        CONTENT_LANGUAGE,
        CONTENT_LOCATION,
        CONTENT_RANGE,
        TRANSFER_ENCODING,
        ETAG,
        LAST_MODIFIED,
        ACCEPT_RANGES,
    ] {
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
