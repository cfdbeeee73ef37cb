//! Minification of HTML, CSS and JavaScript (docs/arc2.md, "Minification"), conservative by design:
//! only comments and whitespace go, never a name, a quote or a semicolon the grammar needs, so the
//! output means what the input meant. Strings, template literals, regular expressions, `url(...)`,
//! `<pre>` and `<textarea>` are copied as they are. Every function works on bytes: non-ASCII text
//! passes through untouched.
//!
//! - CSS: comments out (but `/*! … */`, kept for licences), runs of whitespace to one space, none
//!   next to `{`, `}`, `;` or `,`, and the `;` before a `}`. Spaces around `+`, `-`, `>` and `:`
//!   stay (`calc(1px + 2px)` and `a :hover` need them).
//! - JavaScript: comments out (a comment with a line break leaves a line break, for automatic
//!   semicolon insertion; `/*! … */` is kept), indentation and runs of blank lines out, runs of
//!   spaces to one where two tokens would otherwise merge (`a + +b`, `return x`). Line breaks
//!   stay.
//! - HTML: comments out (but conditional comments `<!--[if …]>`), runs of whitespace in text to
//!   one space or one line break (never removed: between inline elements a space is content),
//!   whitespace inside tags outside attribute values collapsed; `<style>` and `<script>` (of a
//!   JavaScript type) minified with the above when those are enabled.

/// `/*! … */` comments are kept (licences).
fn keep_comment(comment: &[u8]) -> bool {
    comment.starts_with(b"/*!")
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')
}

/// Copies a quoted string starting at `i` (the quote) into `out`; returns the index after it.
fn copy_string(src: &[u8], mut i: usize, out: &mut Vec<u8>) -> usize {
    let quote = src[i];
    out.push(quote);
    i += 1;
    while i < src.len() {
        let b = src[i];
        out.push(b);
        i += 1;
        if b == b'\\' {
            if let Some(&n) = src.get(i) {
                out.push(n);
                i += 1;
            }
        } else if b == quote {
            break;
        }
    }
    i
}

/// The index of the `*/` ending a comment that starts at `i` (`/*`), past it; the end of input
/// when unterminated.
fn comment_end(src: &[u8], i: usize) -> usize {
    src[i + 2..]
        .windows(2)
        .position(|w| w == b"*/")
        .map_or(src.len(), |p| i + 2 + p + 2)
}

// ------------------------------------------------------------------------------------------ CSS

/// Minified CSS.
pub fn css(src: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len());
    let mut space = false;
    let mut i = 0;
    let tight = |b: u8| matches!(b, b'{' | b'}' | b';' | b',');
    while i < src.len() {
        let b = src[i];
        if is_space(b) {
            space = true;
            i += 1;
            continue;
        }
        if b == b'/' && src.get(i + 1) == Some(&b'*') {
            let end = comment_end(src, i);
            if keep_comment(&src[i..end]) {
                out.extend_from_slice(&src[i..end]);
            } else {
                space = true;
            }
            i = end;
            continue;
        }
        if space {
            space = false;
            if out.last().is_some_and(|&p| !tight(p)) && !tight(b) {
                out.push(b' ');
            }
        }
        match b {
            b'"' | b'\'' => i = copy_string(src, i, &mut out),
            b'}' => {
                if out.last() == Some(&b';') {
                    out.pop();
                }
                out.push(b);
                i += 1;
            }
            b'(' if out.len() >= 3 && out[out.len() - 3..].eq_ignore_ascii_case(b"url") => {
                // An unquoted url(...) is copied as it is.
                let end = src[i..]
                    .iter()
                    .position(|&c| c == b')')
                    .map_or(src.len(), |p| i + p + 1);
                let inner = &src[i..end];
                if inner
                    .iter()
                    .skip(1)
                    .find(|c| !is_space(**c))
                    .is_some_and(|&c| c == b'"' || c == b'\'')
                {
                    out.push(b);
                    i += 1;
                } else {
                    out.extend_from_slice(inner);
                    i = end;
                }
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

// ------------------------------------------------------------------------------- JavaScript

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b == b'\\' || b >= 0x80
}

/// Keywords after which a `/` starts a regular expression.
const REGEX_AFTER_WORDS: &[&[u8]] = &[
    b"return",
    b"typeof",
    b"case",
    b"do",
    b"else",
    b"in",
    b"instanceof",
    b"new",
    b"delete",
    b"void",
    b"throw",
    b"yield",
    b"await",
    b"of",
];

/// Minified JavaScript.
pub fn js(src: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len());
    js_into(src, &mut out);
    out
}

fn js_into(src: &[u8], out: &mut Vec<u8>) {
    let mut space = false;
    let mut newline = false;
    // The last significant byte written and where the last word started in `out`.
    let mut word_start = 0usize;
    // Where the last regular-expression literal ended in `out`.
    let mut regex_end = usize::MAX;
    let mut i = 0;
    while i < src.len() {
        let b = src[i];
        match b {
            b'\n' | b'\r' => {
                newline = true;
                i += 1;
                continue;
            }
            b' ' | b'\t' | b'\x0b' | b'\x0c' => {
                space = true;
                i += 1;
                continue;
            }
            b'/' if src.get(i + 1) == Some(&b'/') => {
                i = src[i..]
                    .iter()
                    .position(|&c| c == b'\n' || c == b'\r')
                    .map_or(src.len(), |p| i + p);
                continue;
            }
            b'/' if src.get(i + 1) == Some(&b'*') => {
                let end = comment_end(src, i);
                let comment = &src[i..end];
                if keep_comment(comment) {
                    flush(out, &mut space, &mut newline, b'/', false);
                    out.extend_from_slice(comment);
                    newline = true;
                } else if comment.iter().any(|&c| c == b'\n' || c == b'\r') {
                    newline = true;
                } else {
                    space = true;
                }
                i = end;
                continue;
            }
            _ => {}
        }
        flush(out, &mut space, &mut newline, b, out.len() == regex_end);
        match b {
            b'"' | b'\'' => i = copy_string(src, i, out),
            b'`' => i = copy_template(src, i, out),
            b'/' if regex_allowed(out, word_start) => {
                i = copy_regex(src, i, out);
                regex_end = out.len();
            }
            _ => {
                if is_word(b) && !out.last().copied().is_some_and(is_word) {
                    word_start = out.len();
                }
                out.push(b);
                i += 1;
            }
        }
    }
}

/// Writes the whitespace that separated the last token from `next`: a line break if there was
/// one (automatic semicolon insertion may depend on it), else one space where the two tokens
/// would merge.
fn flush(out: &mut Vec<u8>, space: &mut bool, newline: &mut bool, next: u8, after_regex: bool) {
    if *newline {
        if !out.is_empty() && out.last() != Some(&b'\n') {
            out.push(b'\n');
        }
    } else if *space {
        if let Some(&prev) = out.last() {
            let merge = (is_word(prev) && is_word(next))
                || (prev == next
                    && matches!(prev, b'+' | b'-' | b'/' | b'<' | b'>' | b'&' | b'|' | b'='))
                || (prev == b'+' && next == b'+')
                || (prev.is_ascii_digit() && next == b'.')
                || (prev == b'/' && next == b'*')
                // After a regular expression a word would read as its flags (`/x/ in o`).
                || (after_regex && is_word(next))
                || (prev == b'<' && next == b'!')
                || (prev == b'-' && next == b'>');
            if merge {
                out.push(b' ');
            }
        }
    }
    *space = false;
    *newline = false;
}

/// Whether a `/` here starts a regular expression (not a division), from what precedes it.
fn regex_allowed(out: &[u8], word_start: usize) -> bool {
    let Some(&prev) = out.iter().rev().find(|&&c| c != b'\n' && c != b' ') else {
        return true;
    };
    let end = out
        .iter()
        .rposition(|&c| c != b'\n' && c != b' ')
        .map_or(0, |p| p + 1);
    if is_word(prev) {
        let word = &out[word_start.min(end)..end];
        return REGEX_AFTER_WORDS.contains(&word);
    }
    // `n++ / 2`, `n-- / 2`: a postfix operator ends an operand; a division follows.
    if matches!(prev, b'+' | b'-') && end >= 2 && out[end - 2] == prev {
        return false;
    }
    !matches!(prev, b')' | b']' | b'"' | b'\'' | b'`')
}

/// Copies a regular-expression literal starting at `i` (its `/`); returns the index after it.
fn copy_regex(src: &[u8], mut i: usize, out: &mut Vec<u8>) -> usize {
    out.push(b'/');
    i += 1;
    let mut class = false;
    while i < src.len() {
        let b = src[i];
        if b == b'\n' || b == b'\r' {
            // Not a regex after all (a regex cannot span lines): leave the rest to the caller.
            return i;
        }
        out.push(b);
        i += 1;
        match b {
            b'\\' => {
                if let Some(&n) = src.get(i) {
                    out.push(n);
                    i += 1;
                }
            }
            b'[' => class = true,
            b']' => class = false,
            b'/' if !class => break,
            _ => {}
        }
    }
    i
}

/// Copies a template literal starting at `i` (its backquote), substitutions included, as it is;
/// returns the index after it.
fn copy_template(src: &[u8], mut i: usize, out: &mut Vec<u8>) -> usize {
    out.push(b'`');
    i += 1;
    while i < src.len() {
        let b = src[i];
        match b {
            b'\\' => {
                out.push(b);
                if let Some(&n) = src.get(i + 1) {
                    out.push(n);
                }
                i += 2;
            }
            b'`' => {
                out.push(b);
                return i + 1;
            }
            b'$' if src.get(i + 1) == Some(&b'{') => {
                out.extend_from_slice(b"${");
                i = copy_substitution(src, i + 2, out);
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    i.min(src.len())
}

/// Copies a `${ … }` substitution's code up to and including its `}`.
fn copy_substitution(src: &[u8], mut i: usize, out: &mut Vec<u8>) -> usize {
    let mut depth = 0usize;
    while i < src.len() {
        let b = src[i];
        match b {
            b'"' | b'\'' => {
                i = copy_string(src, i, out);
                continue;
            }
            b'`' => {
                i = copy_template(src, i, out);
                continue;
            }
            b'/' if src.get(i + 1) == Some(&b'*') => {
                let end = comment_end(src, i);
                out.extend_from_slice(&src[i..end]);
                i = end;
                continue;
            }
            b'{' => depth += 1,
            b'}' if depth == 0 => {
                out.push(b);
                return i + 1;
            }
            b'}' => depth -= 1,
            _ => {}
        }
        out.push(b);
        i += 1;
    }
    i
}

// ------------------------------------------------------------------------------------- HTML

/// Which languages to minify (`minification_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Languages {
    pub html: bool,
    pub css: bool,
    pub js: bool,
    /// Remove HTML comments too. Off by default: frameworks that render on the server mark
    /// their nodes with comments the browser-side code looks for (React `<!-- -->`, Vue
    /// `<!--[-->`, Angular, Lit, Knockout), so removing them breaks hydration.
    pub html_comments: bool,
}

fn starts_with_ci(s: &[u8], prefix: &[u8]) -> bool {
    s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// Where `</name` starts (case-insensitive) at or after `i`; the end of input if nowhere.
fn find_end_tag(src: &[u8], i: usize, name: &[u8]) -> usize {
    let mut j = i;
    while j < src.len() {
        if src[j] == b'<' && src.get(j + 1) == Some(&b'/') && starts_with_ci(&src[j + 2..], name) {
            return j;
        }
        j += 1;
    }
    src.len()
}

/// Copies a tag starting at `i` (`<`), whitespace outside attribute values collapsed to one
/// space; returns the index after its `>`.
fn copy_tag(src: &[u8], mut i: usize, out: &mut Vec<u8>) -> usize {
    let mut space = false;
    while i < src.len() {
        let b = src[i];
        if is_space(b) {
            space = true;
            i += 1;
            continue;
        }
        if space {
            space = false;
            if b != b'>'
                && !(b == b'/' && src.get(i + 1) == Some(&b'>'))
                && out.last() != Some(&b'=')
                && b != b'='
            {
                out.push(b' ');
            }
        }
        match b {
            b'"' | b'\'' => {
                // Attribute values: copied exactly (no escapes in HTML).
                let end = src[i + 1..]
                    .iter()
                    .position(|&c| c == b)
                    .map_or(src.len(), |p| i + 1 + p + 1);
                out.extend_from_slice(&src[i..end]);
                i = end;
            }
            b'>' => {
                out.push(b);
                return i + 1;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    i
}

/// Whether a `<script>` tag's `type` is JavaScript (or absent).
fn script_is_js(tag: &[u8]) -> bool {
    let lower = tag.to_ascii_lowercase();
    let Some(p) = lower.windows(5).position(|w| w == b"type=") else {
        return true;
    };
    let v = &lower[p + 5..];
    let v = v
        .strip_prefix(b"\"")
        .or_else(|| v.strip_prefix(b"'"))
        .unwrap_or(v);
    v.starts_with(b"text/javascript")
        || v.starts_with(b"module")
        || v.starts_with(b"application/javascript")
        || v.starts_with(b"text/ecmascript")
}

/// Minified HTML (with its `<style>` and `<script>` contents minified as `langs` says).
pub fn html(src: &[u8], langs: Languages) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len());
    let mut i = 0;
    let mut space: Option<u8> = None;
    while i < src.len() {
        let b = src[i];
        if is_space(b) {
            if b == b'\n' || space.is_none() {
                space = Some(if b == b'\n' { b'\n' } else { b' ' });
            }
            i += 1;
            continue;
        }
        if let Some(s) = space.take() {
            out.push(s);
        }
        if b != b'<' {
            out.push(b);
            i += 1;
            continue;
        }
        let rest = &src[i..];
        if rest.starts_with(b"<!--") {
            // `<!-->` and `<!--->` are whole (empty) comments.
            let end = if rest.starts_with(b"<!-->") {
                i + 5
            } else if rest.starts_with(b"<!--->") {
                i + 6
            } else {
                rest[4..]
                    .windows(3)
                    .position(|w| w == b"-->")
                    .map_or(src.len(), |p| i + 4 + p + 3)
            };
            let keep =
                !langs.html_comments || rest.starts_with(b"<!--[if") || rest.starts_with(b"<!--!");
            if keep {
                out.extend_from_slice(&src[i..end]);
            }
            i = end;
            continue;
        }
        let raw = [&b"pre"[..], b"textarea", b"script", b"style"]
            .into_iter()
            .find(|n| {
                starts_with_ci(&rest[1..], n)
                    && rest
                        .get(1 + n.len())
                        .is_some_and(|&c| is_space(c) || c == b'>')
            });
        let tag_start = out.len();
        i = copy_tag(src, i, &mut out);
        let Some(name) = raw else { continue };
        let end = find_end_tag(src, i, name);
        let body = &src[i..end];
        match name {
            b"style" if langs.css => out.extend_from_slice(&css(body)),
            b"script" if langs.js && script_is_js(&out[tag_start..]) => js_into(body, &mut out),
            _ => out.extend_from_slice(body),
        }
        i = end;
    }
    if let Some(s) = space {
        out.push(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: Vec<u8>) -> String {
        String::from_utf8(v).unwrap_or_default()
    }

    #[test]
    fn css_keeps_what_the_grammar_needs() {
        let src = b"/* header */\n@media (min-width: 600px) and (max-width: 900px) {\n  .a  >  .b , .c:hover {\n    width: calc(100% - 2 * var(--gap));\n    content: \"a  ;  b\";\n    background: url( data:image/png;base64,AA== );\n  }\n}\n/*! licence */\na :first-child { margin : 0 }\n";
        assert_eq!(
            s(css(src)),
            "@media (min-width: 600px) and (max-width: 900px){.a > .b,.c:hover{width: calc(100% - 2 * var(--gap));content: \"a  ;  b\";background: url( data:image/png;base64,AA== )}}/*! licence */ a :first-child{margin : 0}"
        );
    }

    #[test]
    fn js_keeps_strings_templates_regexes_and_line_breaks() {
        let src = b"// a comment\nconst re = /\\/\\*[^/]*\\*\\//g; // not a comment start\nlet x = a / b / c;\nconst t = `line one\n  ${ x + `nested ${ y }` }  // kept`;\nfunction f(a, b) {\n    return /a b/.test(a) ? a + +b : a - -b;\n}\nlet s = 'it\\'s' + \"q // r\";\n/* block\n comment */ f(1, 2)\n";
        let out = s(js(src));
        assert!(out.contains("const re=/\\/\\*[^/]*\\*\\//g;"), "{out}");
        assert!(out.contains("let x=a/b/c;"), "{out}");
        assert!(
            out.contains("`line one\n  ${ x + `nested ${ y }` }  // kept`"),
            "{out}"
        );
        assert!(out.contains("return/a b/.test(a)?a+ +b:a- -b;"), "{out}");
        assert!(out.contains("\"q // r\""), "{out}");
        assert!(
            !out.contains("a comment") && !out.contains("block"),
            "{out}"
        );
        assert!(out.contains("}\nlet s"), "{out}");
    }

    #[test]
    fn js_postfix_division_and_regex_flags() {
        let out = s(js(b"const h = n++ / 2, l = \"a/b\";\nconst u = \"http://x\";\nlet r = /x/ instanceof RegExp;\n"));
        assert_eq!(
            out,
            "const h=n++/2,l=\"a/b\";\nconst u=\"http://x\";\nlet r=/x/ instanceof RegExp;"
        );
    }

    #[test]
    fn html_comments_are_kept_unless_asked_and_empty_comments_end_at_once() {
        let mut langs = Languages {
            html: true,
            css: false,
            js: false,
            html_comments: false,
        };
        let src = b"<ul><!--[--><li>a</li><!--]--></ul><p>x<!-- -->y</p>";
        assert_eq!(s(html(src, langs)), String::from_utf8_lossy(src));
        langs.html_comments = true;
        assert_eq!(
            s(html(b"<!--><p>x</p><!--->y<!-- z -->", langs)),
            "<p>x</p>y"
        );
    }

    #[test]
    fn html_collapses_text_and_keeps_raw_elements() {
        let langs = Languages {
            html: true,
            css: true,
            js: true,
            html_comments: true,
        };
        let src = b"<!doctype html>\n<html>\n  <head>\n    <style>\n      p  { color : red ; }\n    </style>\n    <!-- remove me -->\n    <!--[if IE]><p>old</p><![endif]-->\n  </head>\n  <body  class = \"a  b\" >\n    <p>one   <b>two</b>   three</p>\n    <pre>  keep\n    this  </pre>\n    <script>\n      // comment\n      let a  =  1 ;\n    </script>\n    <script type=\"text/template\">  <b>  raw  </b>  </script>\n  </body>\n</html>\n";
        let out = s(html(src, langs));
        assert!(out.contains("<style>p{color : red}</style>"), "{out}");
        assert!(!out.contains("remove me"), "{out}");
        assert!(out.contains("<!--[if IE]><p>old</p><![endif]-->"), "{out}");
        assert!(out.contains("<body class=\"a  b\">"), "{out}");
        assert!(out.contains("<p>one <b>two</b> three</p>"), "{out}");
        assert!(out.contains("<pre>  keep\n    this  </pre>"), "{out}");
        assert!(out.contains("<script>\nlet a=1;</script>"), "{out}");
        assert!(
            out.contains("<script type=\"text/template\">  <b>  raw  </b>  </script>"),
            "{out}"
        );
        assert!(out.len() < src.len());
    }
}
