//! Why a request could not be forwarded, and the one place such failures
//! become HTTP responses.

use std::{io, time::Duration};

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;

use super::client_body::ClientBodyError;
use crate::measure::timeline::Outcome;

/// The methods a `405` names in `Allow`: every method tokenclock forwards.
const ALLOW: &str = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";

/// A failure before the upstream's response head reached the proxy, or a
/// request the proxy refuses to forward.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyError {
    /// The upstream refused or could not be reached.
    #[error("cannot connect to the upstream: {0}")]
    Unavailable(String),
    /// An HTTP/2 upstream said it did not process the request, as often
    /// as it could be sent (or it could not be sent again).
    #[error("the upstream did not process the request: {0}")]
    Unprocessed(String),
    /// The TCP or TLS connect did not finish within `connect_timeout`.
    #[error("connecting to the upstream timed out after {0:?}")]
    ConnectTimeout(Duration),
    /// No response head within `response_header_timeout`.
    #[error("the upstream sent no response head within {0:?}")]
    HeaderTimeout(Duration),
    /// The connection failed after the request was sent, before a response head.
    #[error("the upstream failed before responding: {0}")]
    Upstream(String),
    /// The upstream answered `101 Switching Protocols`, which no forwarded
    /// request asks for: tokenclock never forwards `Upgrade`.
    #[error("the upstream switched protocols (101) for a request that did not ask to upgrade")]
    UnsolicitedUpgrade,
    /// The request is malformed (HTTP/1.1 without exactly one `Host`) or
    /// cannot be expressed to the upstream.
    #[error("the request cannot be forwarded: {0}")]
    BadRequest(&'static str),
    /// `CONNECT`: tokenclock is a reverse proxy, not a tunnel.
    #[error("CONNECT is not supported by this reverse proxy")]
    MethodNotAllowed,
    /// A request body in a transfer coding besides `chunked`, which
    /// tokenclock does not decode (`admit`).
    #[error("a transfer coding other than chunked is not supported")]
    TransferCoding,
    /// The client's request body failed: malformed, cut, or stalled.
    #[error(transparent)]
    ClientBody(#[from] ClientBodyError),
    /// The client went away mid-body while its request was never sent
    /// (its connect failed, or the upstream did not process it): the
    /// client's leaving, not the upstream's failure, ended it.
    #[error("{0} (the request was never sent upstream)")]
    LeftUnsent(ClientBodyError),
    /// `max_connections` requests were in flight (`capacity`).
    #[error("tokenclock has {0} requests in flight (max_connections); retry shortly")]
    AtCapacity(usize),
}

// === impl ProxyError ===

impl ProxyError {
    /// A connect that failed: timed out, refused, or TLS.
    pub(crate) fn from_connect(err: &(dyn std::error::Error + 'static), connect: Duration) -> Self {
        if source_chain(err).any(|e| {
            e.downcast_ref::<io::Error>()
                .is_some_and(|e| e.kind() == io::ErrorKind::TimedOut)
        }) {
            return Self::ConnectTimeout(connect);
        }
        Self::Unavailable(innermost(err))
    }

    /// A connection that failed after the request went out, before a head.
    pub(crate) fn from_upstream(err: &(dyn std::error::Error + 'static)) -> Self {
        Self::Upstream(innermost(err))
    }

    /// Whether this is one of the timeouts.
    #[cfg(test)]
    fn is_timeout(&self) -> bool {
        matches!(self, Self::ConnectTimeout(_) | Self::HeaderTimeout(_))
    }

    /// Whether the request may have gone upstream: not when no connection
    /// could be made for it, nor when the upstream said it did not process
    /// it, nor when the proxy refused it.
    pub(crate) fn sent(&self) -> bool {
        !matches!(
            self,
            Self::Unavailable(_)
                | Self::Unprocessed(_)
                | Self::ConnectTimeout(_)
                | Self::BadRequest(_)
                | Self::MethodNotAllowed
                | Self::TransferCoding
                | Self::AtCapacity(_)
                | Self::LeftUnsent(_)
        )
    }

    /// How a request that failed this way ended: the upstream's faults are
    /// `upstream_error` or `timeout`, the client's never are.
    pub(crate) fn outcome(&self) -> Outcome {
        match self {
            Self::ConnectTimeout(_) | Self::HeaderTimeout(_) => Outcome::Timeout,
            Self::Unavailable(_)
            | Self::Unprocessed(_)
            | Self::Upstream(_)
            | Self::UnsolicitedUpgrade => Outcome::UpstreamError,
            Self::BadRequest(_)
            | Self::MethodNotAllowed
            | Self::TransferCoding
            | Self::AtCapacity(_)
            | Self::ClientBody(ClientBodyError::Malformed(_)) => Outcome::HttpError,
            Self::ClientBody(ClientBodyError::Gone(_)) | Self::LeftUnsent(_) => {
                Outcome::ClientCancelled
            }
            Self::ClientBody(ClientBodyError::Stalled(_)) => Outcome::ClientTimeout,
        }
    }

    /// The status the client receives.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::Unavailable(_)
            | Self::Unprocessed(_)
            | Self::Upstream(_)
            | Self::UnsolicitedUpgrade => StatusCode::BAD_GATEWAY,
            Self::ConnectTimeout(_) | Self::HeaderTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::TransferCoding => StatusCode::NOT_IMPLEMENTED,
            Self::AtCapacity(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::ClientBody(ClientBodyError::Stalled(_)) => StatusCode::REQUEST_TIMEOUT,
            Self::BadRequest(_) | Self::ClientBody(_) | Self::LeftUnsent(_) => {
                StatusCode::BAD_REQUEST
            }
        }
    }

    /// The `error.type` of the JSON body, stable for clients to match on.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Unavailable(_) | Self::Unprocessed(_) => "upstream_unavailable",
            Self::ConnectTimeout(_) | Self::HeaderTimeout(_) => "upstream_timeout",
            Self::Upstream(_) | Self::UnsolicitedUpgrade => "upstream_error",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::TransferCoding => "not_implemented",
            Self::AtCapacity(_) => "overloaded",
            Self::ClientBody(ClientBodyError::Stalled(_)) => "request_timeout",
            Self::BadRequest(_) | Self::ClientBody(_) | Self::LeftUnsent(_) => "bad_request",
        }
    }

    /// The response the client sees: `{"error":{"type":…,"message":…}}`.
    pub(crate) fn to_response(&self) -> Response<Full<Bytes>> {
        let body = serde_json::json!({
            "error": { "type": self.kind(), "message": self.to_string() }
        });
        let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        match self {
            Self::MethodNotAllowed => {
                headers.insert(header::ALLOW, HeaderValue::from_static(ALLOW));
            }
            // A slot frees as soon as any response ends.
            Self::AtCapacity(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            // Its body is not read (nor could it be decoded): the
            // connection closes after the answer, which says so (RFC 9112
            // §9.6), as nginx closes after its 501.
            Self::TransferCoding => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        response
    }
}

pub(super) fn source_chain<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err), |e| (*e).source())
}

/// Whether `err` says nothing listens at the upstream or it cannot be
/// reached (refused, host or network unreachable): a new request would
/// fail the same way. Not a timeout (the upstream may only be busy), not
/// a TLS or protocol failure, not the proxy's own (out of descriptors or
/// ports), and not a request given up while it waited for another's
/// connect.
pub(crate) fn is_unreachable(err: &(dyn std::error::Error + 'static)) -> bool {
    source_chain(err).any(|e| {
        e.downcast_ref::<io::Error>().is_some_and(|e| {
            matches!(
                e.kind(),
                io::ErrorKind::ConnectionRefused
                    | io::ErrorKind::HostUnreachable
                    | io::ErrorKind::NetworkUnreachable
            )
        })
    })
}

/// The most specific message in the chain ("Connection refused (os error 111)").
fn innermost(err: &(dyn std::error::Error + 'static)) -> String {
    source_chain(err)
        .last()
        .map_or_else(|| err.to_string(), |e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn error_body_is_small_json() {
        let response = ProxyError::Unavailable("Connection refused".into()).to_response();
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
        let bytes = response.into_body().collect().await.map(|c| c.to_bytes());
        let json: serde_json::Value =
            serde_json::from_slice(&bytes.unwrap_or_default()).unwrap_or_default();
        assert_eq!(json["error"]["type"], "upstream_unavailable");
        assert!(json["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Connection refused")));
    }

    #[test]
    fn client_faults_are_never_upstream_failures() {
        let stalled = ProxyError::from(ClientBodyError::Stalled(Duration::from_secs(30)));
        assert_eq!(stalled.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(stalled.outcome(), Outcome::ClientTimeout);
        let gone = ProxyError::from(ClientBodyError::Gone("reset".into()));
        assert_eq!(gone.outcome(), Outcome::ClientCancelled);
        assert!(gone.sent(), "its body was on its way upstream");
        // Gone while its request waited for a connect that then failed:
        // never sent, so no connect phase is kept for it.
        let unsent = ProxyError::LeftUnsent(ClientBodyError::Gone("eof".into()));
        assert_eq!(unsent.outcome(), Outcome::ClientCancelled);
        assert!(!unsent.sent());
        let malformed = ProxyError::from(ClientBodyError::Malformed("chunk".into()));
        assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
        assert_eq!(malformed.outcome(), Outcome::HttpError);
        let connect = ProxyError::MethodNotAllowed.to_response();
        assert_eq!(connect.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert!(connect.headers().get(header::ALLOW).is_some());
    }

    #[test]
    fn a_refusal_at_capacity_is_a_retryable_503_of_tokenclocks_own() {
        let e = ProxyError::AtCapacity(4096);
        assert_eq!(e.outcome(), Outcome::HttpError);
        assert_eq!(e.kind(), "overloaded");
        let response = e.to_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response.headers().get(header::RETRY_AFTER),
            Some(&HeaderValue::from_static("1"))
        );
    }

    /// Only a connect that found nothing listening, or no way there, says
    /// the upstream cannot be reached (and turns `/readyz` red).
    #[test]
    fn unreachable_is_refused_or_no_route_never_a_timeout_or_a_cancel() {
        #[derive(Debug, thiserror::Error)]
        #[error("connect error")]
        struct Wrapped(#[source] io::Error);
        for kind in [
            io::ErrorKind::ConnectionRefused,
            io::ErrorKind::HostUnreachable,
            io::ErrorKind::NetworkUnreachable,
        ] {
            assert!(is_unreachable(&Wrapped(io::Error::from(kind))), "{kind:?}");
        }
        for kind in [
            io::ErrorKind::TimedOut,
            io::ErrorKind::AddrNotAvailable,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::Other,
        ] {
            assert!(!is_unreachable(&Wrapped(io::Error::from(kind))), "{kind:?}");
        }
        // A request given up while it waited for another's connect
        // (hyper-util's `CheckoutNoLongerWanted`) carries no I/O error.
        let canceled = io::Error::other("request was canceled");
        assert!(!is_unreachable(&canceled));
    }

    #[test]
    fn timeouts_are_504() {
        let e = ProxyError::HeaderTimeout(Duration::from_secs(1));
        assert_eq!(e.status(), StatusCode::GATEWAY_TIMEOUT);
        assert!(e.is_timeout());
        assert!(!ProxyError::Upstream("reset".into()).is_timeout());
    }
}
