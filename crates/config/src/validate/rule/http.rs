//! What a rule does to HTTP messages besides proxying them: field rules for requests and
//! responses (`request_headers`, `response_headers`, also in a path rule), redirects and
//! rewrites (`[[proxy_rules.redirects]]`, `[[proxy_rules.rewrites]]`) and error pages
//! (`[proxy_rules.error_pages]`).

use http::header::{HeaderName, HeaderValue};
use toml_edit::{Item, Value};

use crate::model::{
    ErrorPage, ErrorPages, HeaderRules, Pattern, Redirect, Rewrite, Template, TemplatePart,
    Variable,
};
use crate::reader::{At, Section, Sink};
use crate::validate::pages::{PagesDir, Written};
use crate::validate::{error, toml_string};

/// Fields rampart keeps to itself: the connection's and the body's framing. A rule that set
/// them would break the exchange, not change it.
const MANAGED: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "expect",
];

/// `request_headers` or `response_headers` of a rule or a path rule.
pub(super) fn header_rules(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    key: &'static str,
) -> HeaderRules {
    let mut rules = HeaderRules::default();
    let Some(mut t) = s.table(sink, key) else {
        return rules;
    };
    if let Some(list) = t.strings(sink, "remove") {
        for n in &list.value {
            if let Some(name) = field_name(sink, n.value.trim(), n) {
                rules.remove.push(name);
            }
        }
    }
    // NGINX's `add_header ... always`: a response table's `set`/`add` reach every answer.
    if key == "response_headers" {
        rules.always = t.bool(sink, "always").is_some_and(|b| b.value);
    }
    for (which, into) in [("set", &mut rules.set), ("add", &mut rules.add)] {
        let Some(mut fields) = t.table(sink, which) else {
            continue;
        };
        for (name_text, entry) in fields.entries() {
            let Some(name) = field_name(sink, name_text, &entry) else {
                continue;
            };
            let Some(text) = entry.value.as_str() else {
                error(
                    sink,
                    &entry,
                    "a field value must be a string",
                    format!("write it as `\"{name_text}\" = \"value\"`"),
                );
                continue;
            };
            if let Some(t) = template(sink, &entry, text, true) {
                into.push((name, t));
            }
        }
        fields.finish(sink);
    }
    t.finish(sink);
    rules
}

/// A field name a rule may change.
fn field_name<T>(sink: &mut Sink<'_>, text: &str, at: &At<T>) -> Option<HeaderName> {
    let Ok(name) = HeaderName::from_bytes(text.as_bytes()) else {
        error(
            sink,
            at,
            format!("{text:?} is not a valid header field name"),
            "use letters, digits and `-` (e.g. \"X-Frame-Options\")",
        );
        return None;
    };
    if MANAGED.contains(&name.as_str()) {
        error(
            sink,
            at,
            format!(
                "`{text}` describes the connection or the body's framing, which rampart manages"
            ),
            "remove this entry",
        );
        return None;
    }
    Some(name)
}

/// A value with `{variables}`. `header`: the text must be a valid field value.
fn template<T>(sink: &mut Sink<'_>, at: &At<T>, text: &str, header: bool) -> Option<Template> {
    let mut parts = Vec::new();
    let mut rest = text;
    let mut literal = String::new();
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(after.len());
        if name_len > 0 && after[name_len..].starts_with('}') {
            let name = &after[..name_len];
            let Some((_, var)) = Variable::ALL.iter().find(|(n, _)| *n == name) else {
                let known: Vec<String> = Variable::ALL
                    .iter()
                    .map(|(n, _)| format!("{{{n}}}"))
                    .collect();
                error(
                    sink,
                    at,
                    format!("unknown variable {{{name}}}"),
                    format!("use {}", known.join(", ")),
                );
                return None;
            };
            literal.push_str(&rest[..open]);
            if !literal.is_empty() {
                parts.push(TemplatePart::Text(std::mem::take(&mut literal)));
            }
            parts.push(TemplatePart::Var(*var));
            rest = &after[name_len + 1..];
        } else {
            literal.push_str(&rest[..=open]);
            rest = after;
        }
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        parts.push(TemplatePart::Text(literal));
    }
    if header {
        for p in &parts {
            if let TemplatePart::Text(t) = p {
                if HeaderValue::from_str(t).is_err() {
                    error(
                        sink,
                        at,
                        format!("{text:?} cannot be a header field value"),
                        "use visible ASCII characters and spaces (no line breaks)",
                    );
                    return None;
                }
            }
        }
    }
    Some(Template { parts })
}

/// `[[proxy_rules.redirects]]`.
pub(super) fn redirects(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Vec<Redirect> {
    let mut out = Vec::new();
    for mut r in s.tables(sink, "redirects").unwrap_or_default() {
        let from = pattern(&mut r, sink, "from");
        let to = r.string(sink, "to");
        let status = r.int(sink, "status", 300, 399);
        let keep_query = r.bool(sink, "keep_query").is_none_or(|b| b.value);
        // Only requests that arrived over this scheme (a `return 301 https://…` kept to port 80).
        let (https, scheme_ok) = read_scheme(&mut r, sink);
        if to.is_none() && !r.has("to") {
            r.missing(
                sink,
                "to",
                crate::Severity::Error,
                "a redirect needs `to`",
                "add `to = \"https://example.com/$1\"` (a URL or a path; $1 is what `from` captured)",
            );
        }
        let status = redirect_status(sink, status);
        let to = to.and_then(|t| redirect_target(sink, &t));
        r.finish(sink);
        if let (Some(from), Some(to), Some(status), true) = (from, to, status, scheme_ok) {
            out.push(Redirect {
                from,
                to,
                status,
                keep_query,
                https,
            });
        }
    }
    out
}

/// A redirect's `scheme`: the requests it is kept to (`Some(true)`: HTTPS only), and whether
/// the value was valid.
fn read_scheme(r: &mut Section<'_>, sink: &mut Sink<'_>) -> (Option<bool>, bool) {
    let mut scheme_ok = true;
    let https = match r.string(sink, "scheme") {
        None => None,
        Some(v) if v.value == "http" => Some(false),
        Some(v) if v.value == "https" => Some(true),
        Some(v) => {
            error(
                sink,
                &v,
                format!("{:?} is not a scheme a redirect can be kept to", v.value),
                "write it as `scheme = \"http\"` (or \"https\")",
            );
            scheme_ok = false;
            None
        }
    };
    (https, scheme_ok)
}

/// A redirect's `status`: 301 when left out; `None` when it is not a redirect status.
fn redirect_status(sink: &mut Sink<'_>, status: Option<At<i64>>) -> Option<u16> {
    match status {
        None => Some(301),
        Some(v) if matches!(v.value, 301 | 302 | 303 | 307 | 308) => Some(v.value as u16),
        Some(v) => {
            error(
                sink,
                &v,
                format!("{} is not a redirect status", v.value),
                "use 301 or 308 (permanent), 302, 303 or 307 (temporary); 307 and 308 keep the method",
            );
            None
        }
    }
}

/// A redirect's `to`: a path or a URL, visible ASCII, with no variable a redirect cannot know.
fn redirect_target(sink: &mut Sink<'_>, t: &At<String>) -> Option<Template> {
    let v = t.value.trim();
    // A field value holds visible ASCII: with anything else the answer would go out
    // without its `Location`.
    if let Some(c) = v.chars().find(|c| c.is_control() || !c.is_ascii()) {
        let what = if c.is_control() {
            format!("a control character (U+{:04X})", c as u32)
        } else {
            format!("a character outside ASCII ({c:?})")
        };
        error(
            sink,
            t,
            format!("{what} cannot be in a `Location` field; the redirect would be answered without one"),
            format!("percent-encode it: `to = {}`", toml_string(&percent_encoded(v))),
        );
        return None;
    }
    let shaped =
        v.starts_with('/') || v.starts_with('$') || v.starts_with('{') || v.contains("://");
    if !shaped {
        error(
            sink,
            t,
            format!("{v:?} is neither a path nor a URL"),
            "write a path (\"/new/$1\") or a URL (\"https://example.com/$1\")",
        );
        return None;
    }
    let t2 = template(sink, t, v, false)?;
    let unknowable = [Variable::ClientIp, Variable::RequestId]
        .into_iter()
        .find(|x| t2.parts.contains(&TemplatePart::Var(*x)));
    if let Some(x) = unknowable {
        let name = Variable::ALL
            .iter()
            .find(|(_, v)| *v == x)
            .map_or("", |(n, _)| *n);
        error(
            sink,
            t,
            format!("{{{name}}} has no place in a redirect's target"),
            "use {scheme}, {host}, {path}, {query} and what `from` captured ($1, ${name})",
        );
        return None;
    }
    Some(t2)
}

/// `text` with its control and non-ASCII characters percent-encoded (as UTF-8 bytes).
fn percent_encoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || !c.is_ascii() {
            let mut buf = [0; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `[[proxy_rules.rewrites]]`.
pub(super) fn rewrites(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Vec<Rewrite> {
    let mut out = Vec::new();
    for mut r in s.tables(sink, "rewrites").unwrap_or_default() {
        let from = pattern(&mut r, sink, "from");
        let to = r.string(sink, "to");
        if to.is_none() && !r.has("to") {
            r.missing(
                sink,
                "to",
                crate::Severity::Error,
                "a rewrite needs `to`",
                "add `to = \"/new/$1\"` (a path; $1 is what `from` captured)",
            );
        }
        let to = to.and_then(|t| {
            let v = t.value.trim();
            if !(v.starts_with('/') || v.starts_with('$')) || v.contains(['?', '#', ' ']) {
                error(
                    sink,
                    &t,
                    format!("{v:?} is not a path"),
                    "a rewrite changes the path only: write it as \"/new/$1\" (the query string is kept as sent)",
                );
                return None;
            }
            Some(v.to_owned())
        });
        r.finish(sink);
        if let (Some(from), Some(to)) = (from, to) {
            out.push(Rewrite { from, to });
        }
    }
    out
}

/// A regular expression key (required).
fn pattern(s: &mut Section<'_>, sink: &mut Sink<'_>, key: &'static str) -> Option<Pattern> {
    let Some(v) = s.string(sink, key) else {
        if !s.has(key) {
            s.missing(
                sink,
                key,
                crate::Severity::Error,
                &format!("missing `{key}`"),
                &format!("add `{key} = \"^/old/(.*)$\"` (a regular expression on the path)"),
            );
        }
        return None;
    };
    match sink.pattern(&v.value, false) {
        Ok(p) => Some(p),
        Err(why) => {
            error(
                sink,
                &v,
                format!("{:?} is not a valid regular expression: {why}", v.value),
                "write a pattern in Rust's regex syntax, e.g. \"^/old/(.*)$\" (no look-around or back-references)",
            );
            None
        }
    }
}

/// `[proxy_rules.error_pages]`: `STATUS = "file"` or `STATUS = { file = "…" | body = "…",
/// content_type = "…" }`, and `origin_errors`.
pub(super) fn error_pages(s: &mut Section<'_>, sink: &mut Sink<'_>, dir: &PagesDir) -> ErrorPages {
    let mut pages = ErrorPages::default();
    let Some(mut t) = s.table(sink, "error_pages") else {
        return pages;
    };
    for (name, entry) in t.entries() {
        if name == "origin_errors" {
            match entry.value.as_bool() {
                Some(b) => pages.origin_errors = b,
                None => error(
                    sink,
                    &entry,
                    "expected a boolean (true or false)",
                    format!(
                        "write it as `origin_errors = {}`",
                        crate::reader::bool_meant(entry.value)
                    ),
                ),
            }
            continue;
        }
        let status = match name.parse::<u16>() {
            Ok(n) if (400..=599).contains(&n) => n,
            _ => {
                error(
                    sink,
                    &entry,
                    format!("`{name}` is not an error status"),
                    "name a status from 400 to 599 (e.g. `503 = \"/etc/rampart/errors/503.html\"`), or `origin_errors = true`",
                );
                continue;
            }
        };
        if let Some(page) = error_page(sink, &entry, name, dir) {
            pages.pages.push((status, page));
        }
    }
    t.finish(sink);
    pages
}

/// One page: a file (read now, from `dir`) or an inline body, and its content type.
fn error_page(
    sink: &mut Sink<'_>,
    entry: &At<&Item>,
    status: &str,
    dir: &PagesDir,
) -> Option<ErrorPage> {
    let bare = matches!(entry.value, Item::Value(Value::String(_)));
    let (file, body, content_type) = match entry.value {
        Item::Value(Value::String(f)) => (Some(f.value().clone()), None, None),
        item => match item.as_table_like() {
            Some(t) => {
                let get = |k: &str| t.get(k).and_then(|i| i.as_str()).map(str::to_owned);
                for (k, _) in t.iter() {
                    if !matches!(k, "file" | "body" | "content_type") {
                        error(
                            sink,
                            entry,
                            format!("`{k}` is not a key of an error page"),
                            "use `file`, `body` and `content_type`",
                        );
                        return None;
                    }
                }
                (get("file"), get("body"), get("content_type"))
            }
            None => {
                error(
                    sink,
                    entry,
                    "an error page is a file name or a table",
                    "write `503 = \"/etc/rampart/errors/503.html\"` or `503 = { body = \"<h1>Back soon</h1>\" }`",
                );
                return None;
            }
        },
    };
    let (body, guessed) = match (file, body) {
        (Some(_), Some(_)) | (None, None) => {
            error(
                sink,
                entry,
                "an error page needs either `file` or `body`",
                "give one of them",
            );
            return None;
        }
        (None, Some(b)) => {
            let html = b.trim_start().starts_with('<');
            let kind = if html {
                "text/html; charset=utf-8"
            } else {
                "text/plain; charset=utf-8"
            };
            (b.into_bytes(), Some(kind))
        }
        (Some(f), None) => {
            let written = if bare {
                Written::Bare(status)
            } else {
                Written::Table
            };
            let name = f.trim();
            let b = dir.read_page(sink, entry, name, written)?;
            (b, content_type_of(std::path::Path::new(name)))
        }
    };
    let content_type = match content_type.or(guessed.map(str::to_owned)) {
        Some(c) if HeaderValue::from_str(&c).is_ok() => c,
        Some(c) => {
            error(
                sink,
                entry,
                format!("{c:?} is not a content type"),
                "write e.g. \"text/html; charset=utf-8\"",
            );
            return None;
        }
        None => {
            error(
                sink,
                entry,
                "the content type of this file cannot be told from its name",
                "add `content_type = \"text/html; charset=utf-8\"` (or name the file .html, .json, .txt or .xml)",
            );
            return None;
        }
    };
    Some(ErrorPage { body, content_type })
}

/// The content type of an error page file, by its extension.
fn content_type_of(path: &std::path::Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "json" => "application/json",
        "txt" => "text/plain; charset=utf-8",
        "xml" => "application/xml",
        _ => return None,
    })
}
