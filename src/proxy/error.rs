//! Why a request could not be forwarded, and the one place such failures
//! become HTTP responses.

use std::{io, time::Duration};

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;

use crate::timeline::Outcome;

/// A failure before the upstream's response head reached the proxy.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The upstream refused or could not be reached.
    #[error("cannot connect to the upstream: {0}")]
    Unavailable(String),
    /// The TCP or TLS connect did not finish within `connect_timeout`.
    #[error("connecting to the upstream timed out after {0:?}")]
    ConnectTimeout(Duration),
    /// No response head within `response_header_timeout`.
    #[error("the upstream sent no response head within {0:?}")]
    HeaderTimeout(Duration),
    /// The connection failed after the request was sent, before a response head.
    #[error("the upstream failed before responding: {0}")]
    Upstream(String),
    /// The request cannot be expressed to the upstream (e.g. a bad path).
    #[error("the request cannot be forwarded: {0}")]
    BadRequest(String),
    /// The client failed to send the request body the proxy had to read.
    #[error("the request body did not arrive: {0}")]
    ClientBody(String),
}

// === impl ProxyError ===

impl ProxyError {
    /// Classifies an error from the upstream client.
    pub fn from_client(err: &hyper_util::client::legacy::Error, connect: Duration) -> Self {
        if err.is_connect() {
            if source_chain(err).any(|e| {
                e.downcast_ref::<io::Error>()
                    .is_some_and(|e| e.kind() == io::ErrorKind::TimedOut)
            }) {
                return Self::ConnectTimeout(connect);
            }
            return Self::Unavailable(innermost(err));
        }
        Self::Upstream(innermost(err))
    }

    /// Whether this is one of the timeouts.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::ConnectTimeout(_) | Self::HeaderTimeout(_))
    }

    /// How a request that failed this way ended.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::ConnectTimeout(_) | Self::HeaderTimeout(_) => Outcome::Timeout,
            Self::ClientBody(_) => Outcome::ClientCancelled,
            Self::Unavailable(_) | Self::Upstream(_) | Self::BadRequest(_) => {
                Outcome::UpstreamError
            }
        }
    }

    /// The status the client receives.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Unavailable(_) | Self::Upstream(_) => StatusCode::BAD_GATEWAY,
            Self::ConnectTimeout(_) | Self::HeaderTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            Self::BadRequest(_) | Self::ClientBody(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// The `error.type` of the JSON body, stable for clients to match on.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Unavailable(_) => "upstream_unavailable",
            Self::ConnectTimeout(_) | Self::HeaderTimeout(_) => "upstream_timeout",
            Self::Upstream(_) => "upstream_error",
            Self::BadRequest(_) | Self::ClientBody(_) => "bad_request",
        }
    }

    /// The response the client sees: `{"error":{"type":…,"message":…}}`.
    pub fn to_response(&self) -> Response<Full<Bytes>> {
        let body = serde_json::json!({
            "error": { "type": self.kind(), "message": self.to_string() }
        });
        let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
        *response.status_mut() = self.status();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

fn source_chain<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err), |e| (*e).source())
}

/// The most specific message in the chain ("Connection refused (os error 111)").
fn innermost(err: &hyper_util::client::legacy::Error) -> String {
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
    fn timeouts_are_504() {
        let e = ProxyError::HeaderTimeout(Duration::from_secs(1));
        assert_eq!(e.status(), StatusCode::GATEWAY_TIMEOUT);
        assert!(e.is_timeout());
        assert!(!ProxyError::Upstream("reset".into()).is_timeout());
    }
}
