//! A request body on an HTTP/1.1 connection, fed to the pipeline from what the connection
//! already read (`carry`) and from the socket, a piece each time the pipeline asks for one
//! (see `http1/body.rs` for the hand-over): `100 Continue` the first time when the client waits for
//! it, the rest of the body while the response is written when the origin answered early, and
//! what is left skipped (up to a limit) to keep the connection.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::http1::body::{Decoder, Feeder, Piece};
use crate::net::read::read_some;

/// Feeds one request body from `carry` and the socket to the pipeline.
pub(super) struct Feed {
    pub(super) feeder: Feeder,
    pub(super) decoder: Decoder,
    pub(super) continue_owed: bool,
    /// The end (or the break) was handed over.
    pub(super) finished: bool,
    pub(super) broken: bool,
}

impl Feed {
    pub(super) fn new(feeder: Feeder, decoder: Decoder, continue_owed: bool) -> Self {
        Feed {
            feeder,
            decoder,
            continue_owed,
            finished: false,
            broken: false,
        }
    }

    pub(super) fn active(&self) -> bool {
        !self.finished && !self.feeder.reader_gone()
    }

    fn end(&mut self, piece: Piece) {
        self.broken = matches!(piece, Piece::Broken);
        self.feeder.give(piece);
        self.finished = true;
    }

    /// Waits until the pipeline wants more, sends `100 Continue` the first time if the client
    /// waits for it, then gives the pipeline the next piece.
    pub(super) async fn step<I: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        io: &mut I,
        carry: &mut BytesMut,
    ) {
        if !self.feeder.wanted().await {
            return;
        }
        if self.continue_owed {
            self.continue_owed = false;
            // Flushed: over TLS the record would otherwise wait for the final response.
            let sent = async {
                io.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
                io.flush().await
            };
            if sent.await.is_err() {
                self.end(Piece::Broken);
                return;
            }
        }
        self.give_next(io, carry).await;
    }

    /// [`Feed::step`] without the interim answer (while the final one is being written).
    pub(super) async fn pump<R: AsyncRead + Unpin>(&mut self, io: &mut R, carry: &mut BytesMut) {
        if self.feeder.wanted().await {
            self.give_next(io, carry).await;
        }
    }

    /// Feeds the rest of the body while the reader takes it, each piece within `idle`; a
    /// reader that stops asking for that long is treated as gone.
    pub(super) async fn pump_to_end<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        carry: &mut BytesMut,
        idle: Duration,
    ) {
        while self.active() {
            if tokio::time::timeout(idle, self.pump(io, carry))
                .await
                .is_err()
            {
                self.broken = true;
                return;
            }
        }
    }

    /// Gives the next piece, from `carry` or else from the socket.
    async fn give_next<R: AsyncRead + Unpin>(&mut self, io: &mut R, carry: &mut BytesMut) {
        loop {
            if self.decoder.is_done() {
                self.end(Piece::End);
                return;
            }
            match self.decoder.decode(carry) {
                Ok(Some(data)) => {
                    self.feeder.give(Piece::Data(data));
                    return;
                }
                Ok(None) if self.decoder.is_done() => continue,
                Ok(None) => {}
                Err(reason) => {
                    tracing::info!(
                        reason,
                        "request body framing refused; closing the connection"
                    );
                    self.end(Piece::Broken);
                    return;
                }
            }
            match read_some(io).await {
                Ok(b) if !b.is_empty() => carry.extend_from_slice(&b),
                _ => {
                    self.end(Piece::Broken);
                    return;
                }
            }
        }
    }

    /// Drops the rest of the body if `carry` already holds all of it.
    pub(super) fn skip_buffered(&mut self, carry: &mut BytesMut) -> bool {
        loop {
            match self.decoder.decode(carry) {
                Ok(Some(_)) => {}
                Ok(None) => return self.decoder.is_done(),
                Err(_) => {
                    self.broken = true;
                    return false;
                }
            }
        }
    }

    /// Reads and drops up to `max` bytes of the rest of the body; whether it all arrived (the
    /// connection can go on).
    pub(super) async fn skip<I: AsyncRead + Unpin>(
        &mut self,
        io: &mut I,
        carry: &mut BytesMut,
        max: u64,
        within: Duration,
    ) -> bool {
        if self.continue_owed {
            // The client waits for 100 Continue before it sends the body: it never will.
            return false;
        }
        let mut seen = 0u64;
        let work = async {
            loop {
                match self.decoder.decode(carry) {
                    Ok(Some(d)) => {
                        seen += d.len() as u64;
                        if seen > max {
                            return false;
                        }
                    }
                    Ok(None) if self.decoder.is_done() => return true,
                    Ok(None) => match read_some(io).await {
                        Ok(b) if !b.is_empty() => carry.extend_from_slice(&b),
                        _ => return false,
                    },
                    Err(_) => return false,
                }
            }
        };
        tokio::time::timeout(within, work).await.unwrap_or(false)
    }
}
