//! Requests from the management API to whoever owns the configuration file: reload it, or
//! change its `proxy_rules`. The binary answers them (it knows the file); the admin handler
//! forwards each request and waits for the answer.

use std::time::Duration;

use http::StatusCode;
use tokio::sync::{mpsc, oneshot};

/// What the management API asks for.
#[derive(Debug)]
pub enum Request {
    /// Read the configuration file again and apply it.
    Reload,
    /// List the `proxy_rules` entries of the file.
    ListRules,
    /// Add a `proxy_rules` entry (`body` is TOML, or JSON when `json`).
    AddRule { body: bytes::Bytes, json: bool },
    /// Replace the entry whose `domain` is `domain`.
    ReplaceRule {
        domain: String,
        body: bytes::Bytes,
        json: bool,
    },
    /// Remove the entry whose `domain` is `domain`.
    RemoveRule { domain: String },
}

/// The answer: a status and a JSON body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: String,
}

impl Answer {
    pub fn new(status: StatusCode, body: String) -> Answer {
        Answer { status, body }
    }
}

/// One request with the way back.
#[derive(Debug)]
pub struct Message {
    pub request: Request,
    pub reply: oneshot::Sender<Answer>,
}

/// The management API's end of the channel.
#[derive(Debug, Clone)]
pub struct Control {
    tx: mpsc::UnboundedSender<Message>,
}

/// The owner's end.
pub type Requests = mpsc::UnboundedReceiver<Message>;

/// How long the API waits for the owner (a reload with a new certificate source can take a
/// while; a stuck owner must not hold the request forever).
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

impl Control {
    pub fn channel() -> (Control, Requests) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Control { tx }, rx)
    }

    /// Sends `request` and waits for its answer.
    pub async fn ask(&self, request: Request) -> Answer {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Message { request, reply }).is_err() {
            return unavailable();
        }
        match tokio::time::timeout(ANSWER_WITHIN, answer).await {
            Ok(Ok(a)) => a,
            _ => unavailable(),
        }
    }
}

fn unavailable() -> Answer {
    Answer::new(
        StatusCode::SERVICE_UNAVAILABLE,
        r#"{"error":"this instance takes no configuration changes (no configuration file, or shutting down)"}"#
            .to_owned(),
    )
}
