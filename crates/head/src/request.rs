//! [`Request`]: a request head over [`Fields`] and a body.

use http::{Extensions, Method, Uri, Version};

use crate::Fields;

/// A request's head: what `http::request::Parts` holds, over [`Fields`].
#[derive(Debug, Clone, Default)]
pub struct Parts {
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    pub headers: Fields,
    pub extensions: Extensions,
}

/// A request: its head and a body.
#[derive(Debug, Default)]
pub struct Request<T> {
    head: Parts,
    body: T,
}

impl<T> Request<T> {
    /// A `GET /` over HTTP/1.1 with no fields.
    pub fn new(body: T) -> Self {
        Request {
            head: Parts::default(),
            body,
        }
    }

    pub fn from_parts(head: Parts, body: T) -> Self {
        Request { head, body }
    }

    pub fn into_parts(self) -> (Parts, T) {
        (self.head, self.body)
    }

    #[inline]
    pub fn method(&self) -> &Method {
        &self.head.method
    }

    pub fn method_mut(&mut self) -> &mut Method {
        &mut self.head.method
    }

    #[inline]
    pub fn uri(&self) -> &Uri {
        &self.head.uri
    }

    pub fn uri_mut(&mut self) -> &mut Uri {
        &mut self.head.uri
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

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Request<U> {
        Request {
            head: self.head,
            body: f(self.body),
        }
    }

    /// `http`'s request, for a library that takes one.
    pub fn into_http(self) -> http::Request<T> {
        let (p, body) = (self.head, self.body);
        let mut r = http::Request::new(body);
        *r.method_mut() = p.method;
        *r.uri_mut() = p.uri;
        *r.version_mut() = p.version;
        *r.headers_mut() = p.headers.to_header_map();
        *r.extensions_mut() = p.extensions;
        r
    }

    /// A request a library made with `http`'s types.
    pub fn from_http(r: http::Request<T>) -> Self {
        let (p, body) = r.into_parts();
        Request {
            head: Parts {
                method: p.method,
                uri: p.uri,
                version: p.version,
                headers: Fields::from(p.headers),
                extensions: p.extensions,
            },
            body,
        }
    }
}

impl Request<()> {
    /// `http`'s builder, giving rampart's request: for tests and the few requests rampart
    /// makes itself, never on a client's path.
    pub fn builder() -> Builder {
        Builder(http::Request::builder())
    }

    pub fn get<U>(uri: U) -> Builder
    where
        Uri: TryFrom<U>,
        <Uri as TryFrom<U>>::Error: Into<http::Error>,
    {
        Builder(http::Request::get(uri))
    }

    pub fn post<U>(uri: U) -> Builder
    where
        Uri: TryFrom<U>,
        <Uri as TryFrom<U>>::Error: Into<http::Error>,
    {
        Builder(http::Request::post(uri))
    }
}

/// [`Request::builder`]: `http`'s builder, whose request becomes rampart's.
#[derive(Debug)]
pub struct Builder(http::request::Builder);

impl Builder {
    pub fn method<M>(self, m: M) -> Self
    where
        Method: TryFrom<M>,
        <Method as TryFrom<M>>::Error: Into<http::Error>,
    {
        Builder(self.0.method(m))
    }

    pub fn uri<U>(self, u: U) -> Self
    where
        Uri: TryFrom<U>,
        <Uri as TryFrom<U>>::Error: Into<http::Error>,
    {
        Builder(self.0.uri(u))
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

    pub fn extension<E: Clone + Send + Sync + 'static>(self, e: E) -> Self {
        Builder(self.0.extension(e))
    }

    pub fn body<T>(self, body: T) -> Result<Request<T>, http::Error> {
        self.0.body(body).map(Request::from_http)
    }
}

impl<T> From<http::Request<T>> for Request<T> {
    fn from(r: http::Request<T>) -> Self {
        Request::from_http(r)
    }
}
