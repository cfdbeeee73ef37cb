//! [`Response`]: a response head over [`Fields`] and a body.

use http::{Extensions, StatusCode, Version};

use crate::Fields;

/// A response's head: what `http::response::Parts` holds, over [`Fields`].
#[derive(Debug, Clone, Default)]
pub struct Parts {
    pub status: StatusCode,
    pub version: Version,
    pub headers: Fields,
    pub extensions: Extensions,
}

/// A response: its head and a body.
#[derive(Debug, Default)]
pub struct Response<T> {
    head: Parts,
    body: T,
}

impl<T> Response<T> {
    /// A `200` over HTTP/1.1 with no fields.
    pub fn new(body: T) -> Self {
        Response {
            head: Parts::default(),
            body,
        }
    }

    pub fn from_parts(head: Parts, body: T) -> Self {
        Response { head, body }
    }

    pub fn into_parts(self) -> (Parts, T) {
        (self.head, self.body)
    }

    #[inline]
    pub fn status(&self) -> StatusCode {
        self.head.status
    }

    pub fn status_mut(&mut self) -> &mut StatusCode {
        &mut self.head.status
    }

    #[inline]
    pub fn version(&self) -> Version {
        self.head.version
    }

    pub fn version_mut(&mut self) -> &mut Version {
        &mut self.head.version
    }

    #[inline]
    pub fn headers(&self) -> &Fields {
        &self.head.headers
    }

    #[inline]
    pub fn headers_mut(&mut self) -> &mut Fields {
        &mut self.head.headers
    }

    pub fn extensions(&self) -> &Extensions {
        &self.head.extensions
    }

    pub fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.head.extensions
    }

    pub fn body(&self) -> &T {
        &self.body
    }

    pub fn body_mut(&mut self) -> &mut T {
        &mut self.body
    }

    pub fn into_body(self) -> T {
        self.body
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Response<U> {
        Response {
            head: self.head,
            body: f(self.body),
        }
    }

    /// `http`'s response, for a library that takes one.
    pub fn into_http(self) -> http::Response<T> {
        let (p, body) = (self.head, self.body);
        let mut r = http::Response::new(body);
        *r.status_mut() = p.status;
        *r.version_mut() = p.version;
        *r.headers_mut() = p.headers.to_header_map();
        *r.extensions_mut() = p.extensions;
        r
    }

    /// A response a library made with `http`'s types.
    pub fn from_http(r: http::Response<T>) -> Self {
        let (p, body) = r.into_parts();
        Response {
            head: Parts {
                status: p.status,
                version: p.version,
                headers: Fields::from(p.headers),
                extensions: p.extensions,
            },
            body,
        }
    }
}

impl Response<()> {
    /// `http`'s builder, giving rampart's response.
    pub fn builder() -> Builder {
        Builder(http::Response::builder())
    }
}

/// [`Response::builder`]: `http`'s builder, whose response becomes rampart's.
#[derive(Debug)]
pub struct Builder(http::response::Builder);

impl Builder {
    pub fn status<S>(self, s: S) -> Self
    where
        StatusCode: TryFrom<S>,
        <StatusCode as TryFrom<S>>::Error: Into<http::Error>,
    {
        Builder(self.0.status(s))
    }

    pub fn version(self, v: Version) -> Self {
        Builder(self.0.version(v))
    }

    pub fn header<K, V>(self, k: K, v: V) -> Self
    where
        http::HeaderName: TryFrom<K>,
        <http::HeaderName as TryFrom<K>>::Error: Into<http::Error>,
        http::HeaderValue: TryFrom<V>,
        <http::HeaderValue as TryFrom<V>>::Error: Into<http::Error>,
    {
        Builder(self.0.header(k, v))
    }

    pub fn body<T>(self, body: T) -> Result<Response<T>, http::Error> {
        self.0.body(body).map(Response::from_http)
    }
}

impl<T> From<http::Response<T>> for Response<T> {
    fn from(r: http::Response<T>) -> Self {
        Response::from_http(r)
    }
}
