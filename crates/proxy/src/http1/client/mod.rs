//! HTTP/1.1 to origins in rampart's own code, on the same principles as the server side
//! (`http1::server`): each head parsed once, over the buffer it arrived in, with the framing
//! checks of `rampart_screen::h1`; the request written and the answer read by the task that
//! serves the client ([`exchange`]), from the worker's pool of idle connections.

pub mod exchange;
pub mod head;
