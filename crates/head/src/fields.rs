//! [`Fields`]: a message's field lines in arrival order.

use http::header::{HeaderName, HeaderValue};

/// The field lines of one message head, in the order they arrived or were added.
///
/// Lines of one name keep their order (RFC 9110 §5.3); lines of different names keep theirs
/// too, which `HeaderMap` does not promise. Look-ups compare names: a standard name is an enum
/// inside `HeaderName`, so comparing two is one integer compare.
#[derive(Clone, Default)]
pub struct Fields {
    lines: Vec<(HeaderName, HeaderValue)>,
}

/// A name to look fields up by: a `HeaderName`, or a string compared without regard to case.
pub trait FieldKey {
    fn is(&self, name: &HeaderName) -> bool;
}

impl FieldKey for HeaderName {
    #[inline]
    fn is(&self, name: &HeaderName) -> bool {
        self == name
    }
}

impl FieldKey for &HeaderName {
    #[inline]
    fn is(&self, name: &HeaderName) -> bool {
        *self == name
    }
}

impl FieldKey for &str {
    #[inline]
    fn is(&self, name: &HeaderName) -> bool {
        let n = name.as_str();
        n.len() == self.len() && n.as_bytes().eq_ignore_ascii_case(self.as_bytes())
    }
}

impl FieldKey for String {
    #[inline]
    fn is(&self, name: &HeaderName) -> bool {
        self.as_str().is(name)
    }
}

impl FieldKey for &String {
    #[inline]
    fn is(&self, name: &HeaderName) -> bool {
        self.as_str().is(name)
    }
}

/// A name to add fields under.
pub trait IntoFieldName {
    fn into_name(self) -> HeaderName;
}

impl IntoFieldName for HeaderName {
    #[inline]
    fn into_name(self) -> HeaderName {
        self
    }
}

impl IntoFieldName for &HeaderName {
    #[inline]
    fn into_name(self) -> HeaderName {
        self.clone()
    }
}

/// A name written in the code (`"x-arc2-cache"`); panics on an invalid one, as `http` does.
impl IntoFieldName for &'static str {
    #[inline]
    fn into_name(self) -> HeaderName {
        HeaderName::from_static(self)
    }
}

impl Fields {
    pub fn new() -> Self {
        Fields { lines: Vec::new() }
    }

    pub fn with_capacity(n: usize) -> Self {
        Fields {
            lines: Vec::with_capacity(n),
        }
    }

    /// Field lines (a name given twice counts twice).
    #[inline]
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    #[inline]
    fn position(&self, key: &impl FieldKey) -> Option<usize> {
        self.lines.iter().position(|(n, _)| key.is(n))
    }

    /// Lines the vector has room for (what the store charges an object for its fields).
    pub fn capacity(&self) -> usize {
        self.lines.capacity()
    }

    pub fn values(&self) -> impl Iterator<Item = &HeaderValue> {
        self.lines.iter().map(|(_, v)| v)
    }

    /// The first line's value.
    #[inline]
    pub fn get<K: FieldKey>(&self, key: K) -> Option<&HeaderValue> {
        self.lines.iter().find(|(n, _)| key.is(n)).map(|(_, v)| v)
    }

    /// Every line's value, in order.
    #[inline]
    pub fn get_all<K: FieldKey>(&self, key: K) -> GetAll<'_> {
        match self.position(&key) {
            Some(at) => GetAll {
                rest: &self.lines[at..],
                name: Some(&self.lines[at].0),
            },
            None => GetAll {
                rest: &[],
                name: None,
            },
        }
    }

    #[inline]
    pub fn contains_key<K: FieldKey>(&self, key: K) -> bool {
        self.position(&key).is_some()
    }

    /// Sets the field to `value` alone: the first line of the name takes it (keeping its place)
    /// and the others are removed. Returns the first line's old value.
    pub fn insert<K: IntoFieldName>(&mut self, name: K, value: HeaderValue) -> Option<HeaderValue> {
        let name = name.into_name();
        match self.position(&&name) {
            Some(at) => {
                let old = std::mem::replace(&mut self.lines[at].1, value);
                if self.lines[at + 1..].iter().any(|(n, _)| *n == name) {
                    let mut i = 0;
                    self.lines.retain(|(n, _)| {
                        i += 1;
                        i <= at + 1 || *n != name
                    });
                }
                Some(old)
            }
            None => {
                self.lines.push((name, value));
                None
            }
        }
    }

    /// Adds a line at the end (after any others of the name).
    #[inline]
    pub fn append<K: IntoFieldName>(&mut self, name: K, value: HeaderValue) {
        self.lines.push((name.into_name(), value));
    }

    /// Adds a line at the end without asking whether the name is there (a parser's push).
    #[inline]
    pub fn push(&mut self, name: HeaderName, value: HeaderValue) {
        self.lines.push((name, value));
    }

    /// Removes every line of the name; returns the first one's value.
    pub fn remove<K: FieldKey>(&mut self, key: K) -> Option<HeaderValue> {
        let at = self.position(&key)?;
        let (_, first) = self.lines.remove(at);
        if self.lines[at..].iter().any(|(n, _)| key.is(n)) {
            self.lines.retain(|(n, _)| !key.is(n));
        }
        Some(first)
    }

    /// Every line, in order.
    #[inline]
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            lines: self.lines.iter(),
        }
    }

    /// Each distinct name once, in the order of its first line.
    pub fn keys(&self) -> impl Iterator<Item = &HeaderName> {
        self.lines
            .iter()
            .enumerate()
            .filter(|(i, (n, _))| !self.lines[..*i].iter().any(|(m, _)| m == n))
            .map(|(_, (n, _))| n)
    }

    /// The lines as `http`'s map, for a library that takes one.
    pub fn to_header_map(&self) -> http::HeaderMap {
        let mut m = http::HeaderMap::with_capacity(self.lines.len());
        for (n, v) in &self.lines {
            m.append(n.clone(), v.clone());
        }
        m
    }

    /// The lines of `http`'s map (each name's lines together, as the map keeps them).
    pub fn from_header_map(map: http::HeaderMap) -> Self {
        let mut lines = Vec::with_capacity(map.len());
        let mut last: Option<HeaderName> = None;
        for (name, value) in map {
            if let Some(n) = name {
                last = Some(n);
            }
            if let Some(n) = &last {
                lines.push((n.clone(), value));
            }
        }
        Fields { lines }
    }
}

/// Two heads are equal when every name has the same values in the same order (the order of
/// different names does not matter, as for `HeaderMap`).
impl PartialEq for Fields {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .keys()
                .all(|k| self.get_all(k).iter().eq(other.get_all(k).iter()))
    }
}

impl Eq for Fields {}

impl std::fmt::Debug for Fields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: FieldKey> std::ops::Index<K> for Fields {
    type Output = HeaderValue;

    /// The first line's value; panics when there is none, as `HeaderMap` does.
    fn index(&self, key: K) -> &HeaderValue {
        #[allow(clippy::expect_used)]
        self.get(key).expect("no field of that name")
    }
}

impl From<http::HeaderMap> for Fields {
    fn from(map: http::HeaderMap) -> Self {
        Fields::from_header_map(map)
    }
}

impl IntoIterator for Fields {
    type Item = (HeaderName, HeaderValue);
    type IntoIter = std::vec::IntoIter<(HeaderName, HeaderValue)>;

    fn into_iter(self) -> Self::IntoIter {
        self.lines.into_iter()
    }
}

impl<'a> IntoIterator for &'a Fields {
    type Item = (&'a HeaderName, &'a HeaderValue);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Every line, in order.
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    lines: std::slice::Iter<'a, (HeaderName, HeaderValue)>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a HeaderName, &'a HeaderValue);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.lines.next().map(|(n, v)| (n, v))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.lines.size_hint()
    }
}

impl ExactSizeIterator for Iter<'_> {}

/// The values of one name, in order ([`Fields::get_all`]).
#[derive(Clone, Debug)]
pub struct GetAll<'a> {
    /// The lines from the first of the name on.
    rest: &'a [(HeaderName, HeaderValue)],
    name: Option<&'a HeaderName>,
}

impl<'a> GetAll<'a> {
    pub fn iter(&self) -> ValueIter<'a> {
        ValueIter {
            rest: self.rest.iter(),
            name: self.name,
        }
    }
}

impl<'a> IntoIterator for GetAll<'a> {
    type Item = &'a HeaderValue;
    type IntoIter = ValueIter<'a>;

    fn into_iter(self) -> ValueIter<'a> {
        self.iter()
    }
}

impl<'a> IntoIterator for &GetAll<'a> {
    type Item = &'a HeaderValue;
    type IntoIter = ValueIter<'a>;

    fn into_iter(self) -> ValueIter<'a> {
        self.iter()
    }
}

/// The values of one name.
#[derive(Clone, Debug)]
pub struct ValueIter<'a> {
    rest: std::slice::Iter<'a, (HeaderName, HeaderValue)>,
    name: Option<&'a HeaderName>,
}

impl<'a> Iterator for ValueIter<'a> {
    type Item = &'a HeaderValue;

    #[inline]
    fn next(&mut self) -> Option<&'a HeaderValue> {
        let name = self.name?;
        self.rest.find(|(n, _)| n == name).map(|(_, v)| v)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::header::{CACHE_CONTROL, ETAG, VARY};

    fn v(s: &'static str) -> HeaderValue {
        HeaderValue::from_static(s)
    }

    fn sample() -> Fields {
        let mut f = Fields::new();
        f.append(VARY, v("a"));
        f.append(ETAG, v("\"1\""));
        f.append("x-two", v("1"));
        f.append(VARY, v("b"));
        f.append("x-two", v("2"));
        f
    }

    #[test]
    fn look_ups_by_name_in_any_case() {
        let f = sample();
        assert_eq!(f.get(VARY).unwrap(), "a");
        assert_eq!(f.get("Vary").unwrap(), "a");
        assert_eq!(f["etag"], "\"1\"");
        assert!(f.get(CACHE_CONTROL).is_none() && !f.contains_key("cache-control"));
        let all: Vec<_> = f.get_all("VARY").iter().collect();
        assert_eq!(all, [&v("a"), &v("b")]);
        assert_eq!(f.get_all("nothing").iter().count(), 0);
        assert_eq!((f.len(), f.keys().count()), (5, 3));
        let keys: Vec<_> = f.keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, ["vary", "etag", "x-two"]);
    }

    #[test]
    fn insert_replaces_every_line_in_the_first_ones_place() {
        let mut f = sample();
        assert_eq!(f.insert(VARY, v("c")).unwrap(), "a");
        let lines: Vec<_> = f.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
        assert_eq!(
            lines,
            [
                ("vary", v("c")),
                ("etag", v("\"1\"")),
                ("x-two", v("1")),
                ("x-two", v("2"))
            ]
        );
        assert!(f.insert(CACHE_CONTROL, v("no-store")).is_none());
        assert_eq!(f.iter().last().unwrap().0, CACHE_CONTROL);
    }

    #[test]
    fn remove_takes_every_line_and_returns_the_first() {
        let mut f = sample();
        assert_eq!(f.remove("x-two").unwrap(), "1");
        assert_eq!(f.remove("x-two"), None);
        assert_eq!(f.len(), 3);
        assert_eq!(f.remove(VARY).unwrap(), "a");
        assert_eq!(f.len(), 1);
    }

    #[test]
    fn equality_ignores_the_order_of_different_names_only() {
        let mut a = Fields::new();
        a.append(ETAG, v("1"));
        a.append(VARY, v("x"));
        a.append(VARY, v("y"));
        let mut b = Fields::new();
        b.append(VARY, v("x"));
        b.append(ETAG, v("1"));
        b.append(VARY, v("y"));
        assert_eq!(a, b);
        let mut c = Fields::new();
        c.append(VARY, v("y"));
        c.append(VARY, v("x"));
        c.append(ETAG, v("1"));
        assert_ne!(a, c);
    }

    #[test]
    fn to_and_from_http() {
        let f = sample();
        let m = f.to_header_map();
        assert_eq!(m.get_all("x-two").iter().count(), 2);
        assert_eq!(Fields::from(m), f);
    }
}
