//! rampart's HTTP/1.1 request parsing on arbitrary byte streams (heads with their framing
//! checks, then bodies by Content-Length or strict chunked decoding, request after request):
//! never panics, and what it reads does not depend on how the stream was split into reads (the
//! first byte of the input picks the split).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use rampart_proxy::http1::body::Decoder;
use rampart_proxy::http1::server::head;
use rampart_screen::h1::Framing;

#[derive(Debug, PartialEq)]
enum Event {
    Head(String, String, Framing),
    Body(Vec<u8>),
    Refused,
}

fn read(data: &[u8], step: usize) -> Vec<Event> {
    let mut carry = BytesMut::new();
    let mut events = Vec::new();
    let mut decoder: Option<Decoder> = None;
    for chunk in data.chunks(step.max(1)) {
        carry.extend_from_slice(chunk);
        loop {
            if let Some(d) = &mut decoder {
                match d.decode(&mut carry) {
                    Ok(Some(bytes)) => {
                        // Consecutive pieces are one body, however they were read.
                        match events.last_mut() {
                            Some(Event::Body(b)) => b.extend_from_slice(&bytes),
                            _ => events.push(Event::Body(bytes.to_vec())),
                        }
                        continue;
                    }
                    Ok(None) if d.is_done() => decoder = None,
                    Ok(None) => break,
                    Err(_) => {
                        events.push(Event::Refused);
                        return events;
                    }
                }
            }
            match head::parse(&mut carry, 8192, 32) {
                Ok(Some(h)) => {
                    events.push(Event::Head(
                        h.method.to_string(),
                        h.uri.to_string(),
                        h.framing,
                    ));
                    decoder = match h.framing {
                        Framing::None => None,
                        Framing::Length(n) => Some(Decoder::Length(n)),
                        Framing::Chunked => Some(Decoder::chunked()),
                    };
                }
                Ok(None) => break,
                Err(_) => {
                    // Which refusal (malformed or too large) can depend on how much of an
                    // over-long, malformed head had arrived; that it is refused cannot.
                    events.push(Event::Refused);
                    return events;
                }
            }
        }
    }
    events
}

fuzz_target!(|input: &[u8]| {
    let Some((&step, data)) = input.split_first() else {
        return;
    };
    let whole = read(data, data.len());
    let split = read(data, step as usize % 17 + 1);
    assert_eq!(whole, split, "split reads changed what was read");
});
