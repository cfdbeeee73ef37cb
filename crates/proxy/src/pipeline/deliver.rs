//! deliver: the origin's response on its way to the client, as the store stage left it: its
//! body pumped for every coalesced reader when this request leads and the response is stored,
//! teed into the store when only stored, streamed otherwise; labelled with the outcome.

use http::Version;
use rampart_head::Response;

use crate::body::origin::OriginBody;
use crate::body::ProxyBody;
use crate::caching::coalesce::{Leader, SharedHead};
use crate::caching::writer::{self, StoreTicket};
use crate::headers::{append_via, strip_hop_by_hop};
use crate::outcome::CacheOutcome;
use crate::pipeline::ranges::{self, Widened};
use crate::pipeline::txn::Txn;
use crate::pipeline::worker_state::Worker;

/// What the store stage hands to deliver.
#[derive(Debug)]
pub struct Delivery {
    /// The response head, made ready for the client ([`downstream`]).
    pub parts: rampart_head::response::Parts,
    pub body: OriginBody,
    /// The store keeps the response.
    pub ticket: Option<Box<StoreTicket>>,
    /// This request leads the coalesced fetch and its waiters share the response.
    pub leader: Option<Leader>,
    /// The client's own range and preconditions, cut from the shared response.
    pub widened: Option<Box<Widened>>,
    /// The response's `Content-Length`.
    pub length: Option<u64>,
}

/// The deliver stage: the response with its body, pumped for every coalesced reader when this
/// request leads and the response is storable with a known length, teed into the store when
/// only storable, streamed otherwise. Labelled with the outcome.
pub fn deliver(w: &Worker, txn: &mut Txn, d: Delivery) -> Response<ProxyBody> {
    let Delivery {
        mut parts,
        body,
        ticket,
        leader,
        widened,
        length,
    } = d;
    // The shared buffer of a coalesced fetch is charged to the store too: without room for
    // it, the response is only teed to its own client (and waiters fetch on their own).
    let room = match (&ticket, &leader, length) {
        (Some(t), Some(_), Some(_)) => t.hold_buffer(),
        _ => None,
    };
    let body = match (ticket, leader, length, room) {
        // Storable with a known length: waiters stream the leader's fetch with it.
        (Some(t), Some(leader), Some(length), Some(room)) => {
            // Other clients get what the store keeps: no field a qualified `private` /
            // `no-cache` withholds (the leader's own client gets them all).
            let mut shared = parts.headers.clone();
            for name in t.withheld() {
                shared.remove(name);
            }
            let head = SharedHead {
                status: parts.status,
                headers: shared,
                vary: t.vary().clone(),
                variant: t.variant().cloned(),
                length,
            };
            let reader = writer::publish(leader, head, body, t, room, w.origin_client.timeout());
            let (status, body) = ranges::cut_range(
                widened.as_ref().map(|w| &w.headers),
                parts.status,
                &mut parts.headers,
                reader,
                length,
            );
            parts.status = status;
            body
        }
        // Otherwise the leader guard is dropped here, releasing any waiters at once. A widened
        // request's failed precondition is still answered 412 (then nothing is stored: the
        // body would have had to reach the store through this client's answer).
        (ticket, _, _, _) => {
            let client = widened.as_ref().map(|w| &w.headers);
            match ranges::precondition_failed(client, parts.status, &mut parts.headers) {
                Some((status, empty)) => {
                    parts.status = status;
                    txn.outcome = txn.outcome.map(CacheOutcome::not_stored);
                    empty
                }
                None => match ticket {
                    Some(t) => ProxyBody::tee(body, t),
                    None => ProxyBody::stream(body),
                },
            }
        }
    };
    if let Some(o) = txn.outcome {
        o.write(&mut parts.headers);
    }
    tracing::debug!(
        status = parts.status.as_u16(),
        cache = txn.outcome.map_or("", |o| o.label().as_str()),
        "deliver"
    );
    Response::from_parts(parts, body)
}

/// An origin response's head made ready for the client: hop-by-hop fields out, `Via` in
/// (`via`; not on a fleet's owner's answer, which has rampart's already: the fleet is one
/// cache), the client's HTTP version.
pub fn downstream(
    res: Response<OriginBody>,
    version: Version,
    via: bool,
) -> (rampart_head::response::Parts, OriginBody) {
    let (mut parts, body) = res.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    if via {
        append_via(&mut parts.headers, parts.version);
    }
    parts.version = version;
    (parts, body)
}
