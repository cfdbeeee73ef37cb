//! HTTP/1.1 to origins in rampart's own code, on the same principles as the server side
//! (`transport/h1`): each head parsed once, over the buffer it arrived in, with the framing
//! checks of `rampart_screen::h1`. Today: response heads ([`head`]); the connections and their
//! pool are built on it.

pub mod head;
