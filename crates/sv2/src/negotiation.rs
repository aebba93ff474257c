//! Extensions negotiation (extension 0x0001), both ends, sans-IO: what a server answers to a
//! `RequestExtensions`, and what a client makes of the answer.
//!
//! The client asks right after `SetupConnection.Success`; the server answers once per request.
//! A connection uses only the extensions the server's `.Success` listed. A server that does not
//! know the extension ignores the request, so a client waits a bounded time
//! ([`ANSWER_TIMEOUT_MS`]) and goes on without extensions. See docs/architecture.md,
//! "Stratum V2 extensions".

use crate::messages::extensions::{
    RequestExtensions, RequestExtensionsError, RequestExtensionsSuccess,
};
use crate::messages::{Extensions, Message};

/// How long a client waits for an answer before it mines without extensions (the spec leaves
/// it to the client; a server that answers does so in one round trip).
pub const ANSWER_TIMEOUT_MS: u64 = 2_000;

/// The server's answer to `request`, given the extensions it supports and those it requires,
/// and the extensions the connection uses from then on (none after an error).
///
/// It is an error when none of the requested extensions is supported, or when a required one
/// was not requested (listed in `required_extensions`; the client may ask again, and a server
/// that requires extensions closes a connection that mines without them).
pub fn answer(
    request: &RequestExtensions,
    supported: &[u16],
    required: &[u16],
) -> (Message, Vec<u16>) {
    let mut using: Vec<u16> = Vec::new();
    let mut unsupported: Vec<u16> = Vec::new();
    for &e in &request.requested_extensions {
        let list = if supported.contains(&e) {
            &mut using
        } else {
            &mut unsupported
        };
        if !list.contains(&e) {
            list.push(e);
        }
    }
    let missing: Vec<u16> = required
        .iter()
        .copied()
        .filter(|e| !request.requested_extensions.contains(e))
        .collect();
    if using.is_empty() || !missing.is_empty() {
        let error = RequestExtensionsError {
            request_id: request.request_id,
            unsupported_extensions: unsupported,
            required_extensions: missing,
        };
        return (error.into(), Vec::new());
    }
    let ok = RequestExtensionsSuccess {
        request_id: request.request_id,
        supported_extensions: using.clone(),
    };
    (ok.into(), using)
}

/// What a client learned from the server's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The connection uses these extensions (of those asked for; possibly none).
    Using(Vec<u16>),
    /// The server requires extensions the client did not ask for: without them it will close
    /// the connection.
    Required(Vec<u16>),
}

/// The client's reading of `reply` to a request of `requested` with id `request_id`; `None`
/// when `reply` is not the answer to it. Extensions the server lists that were not asked for
/// are not used.
pub fn outcome(reply: &Extensions, request_id: u16, requested: &[u16]) -> Option<Outcome> {
    match reply {
        Extensions::RequestExtensionsSuccess(s) if s.request_id == request_id => {
            Some(Outcome::Using(
                s.supported_extensions
                    .iter()
                    .copied()
                    .filter(|e| requested.contains(e))
                    .collect(),
            ))
        }
        Extensions::RequestExtensionsError(e) if e.request_id == request_id => {
            Some(if e.required_extensions.is_empty() {
                Outcome::Using(Vec::new())
            } else {
                Outcome::Required(e.required_extensions.clone())
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(ids: &[u16]) -> RequestExtensions {
        RequestExtensions {
            request_id: 5,
            requested_extensions: ids.to_vec(),
        }
    }

    fn as_extensions(m: Message) -> Extensions {
        match m {
            Message::Extensions(e) => e,
            other => panic!("not an extensions message: {}", other.name()),
        }
    }

    #[test]
    fn the_server_uses_what_both_know_and_says_what_it_lacks() {
        let (m, using) = answer(&request(&[2, 0x4001, 2]), &[2], &[]);
        assert_eq!(using, vec![2]);
        assert_eq!(
            as_extensions(m),
            Extensions::RequestExtensionsSuccess(RequestExtensionsSuccess {
                request_id: 5,
                supported_extensions: vec![2],
            })
        );
        // None supported: an error listing them, and nothing is used.
        let (m, using) = answer(&request(&[0x4001]), &[2], &[]);
        assert!(using.is_empty());
        assert_eq!(
            as_extensions(m),
            Extensions::RequestExtensionsError(RequestExtensionsError {
                request_id: 5,
                unsupported_extensions: vec![0x4001],
                required_extensions: vec![],
            })
        );
    }

    #[test]
    fn a_required_extension_not_asked_for_is_an_error_even_beside_supported_ones() {
        let (m, using) = answer(&request(&[2]), &[2, 3], &[3]);
        assert!(using.is_empty());
        assert_eq!(
            as_extensions(m.clone()),
            Extensions::RequestExtensionsError(RequestExtensionsError {
                request_id: 5,
                unsupported_extensions: vec![],
                required_extensions: vec![3],
            })
        );
        assert_eq!(
            outcome(&as_extensions(m), 5, &[2]),
            Some(Outcome::Required(vec![3]))
        );
        let (_, using) = answer(&request(&[2, 3]), &[2, 3], &[3]);
        assert_eq!(using, vec![2, 3]);
    }

    #[test]
    fn the_client_keeps_only_what_it_asked_for_and_matches_the_id() {
        let ok = Extensions::RequestExtensionsSuccess(RequestExtensionsSuccess {
            request_id: 9,
            supported_extensions: vec![2, 7],
        });
        assert_eq!(outcome(&ok, 9, &[2]), Some(Outcome::Using(vec![2])));
        assert_eq!(outcome(&ok, 8, &[2]), None);
        let refused = Extensions::RequestExtensionsError(RequestExtensionsError {
            request_id: 9,
            unsupported_extensions: vec![2],
            required_extensions: vec![],
        });
        assert_eq!(outcome(&refused, 9, &[2]), Some(Outcome::Using(vec![])));
    }
}
