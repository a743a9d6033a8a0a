//! Requests tokenclock answers itself instead of forwarding.

use http::{header, Method, Request, Version};

use super::ProxyError;
use crate::proxy::wire::only_chunked;

/// Refuses what a reverse proxy must not forward:
///
/// - `CONNECT` (`405`): tokenclock is not a tunnel. Forwarded, it was sent
///   to the upstream as a tunnel to the upstream itself, and the client got
///   no response at all.
/// - HTTP/1.1 without exactly one `Host`, or HTTP/1.0 with several (`400`,
///   RFC 9112 §3.2). HTTP/1.0 may omit it; HTTP/2 carries `:authority`.
/// - A body in a transfer coding besides `chunked` (`gzip, chunked`: `501`,
///   RFC 9112 §6.1, as nginx answers). Both servers take it, framed by its
///   last coding, and `Transfer-Encoding` is hop-by-hop: forwarded, its
///   bytes went upstream as plain chunked, still compressed, unlabelled.
///   (A last coding that is not `chunked` cannot be framed: the servers
///   refuse its head with `400`.)
pub(super) fn admit<B>(request: &Request<B>) -> Result<(), ProxyError> {
    if request.method() == Method::CONNECT {
        return Err(ProxyError::MethodNotAllowed);
    }
    if !only_chunked(request.headers().get_all(header::TRANSFER_ENCODING)) {
        return Err(ProxyError::TransferCoding);
    }
    let hosts = request.headers().get_all(header::HOST).iter().count();
    match request.version() {
        Version::HTTP_11 if hosts != 1 => Err(ProxyError::BadRequest(
            "an HTTP/1.1 request needs exactly one Host header",
        )),
        Version::HTTP_10 | Version::HTTP_09 if hosts > 1 => Err(ProxyError::BadRequest(
            "a request may carry one Host header at most",
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(version: Version, hosts: &[&'static str]) -> Request<()> {
        let mut request = Request::get("/").version(version);
        for host in hosts {
            request = request.header(header::HOST, *host);
        }
        request.body(()).unwrap_or_default()
    }

    #[test]
    fn only_a_lone_chunked_coding_is_admitted() {
        let with = |lines: &[&'static str]| {
            let mut request = Request::post("/").header(header::HOST, "a");
            for line in lines {
                request = request.header(header::TRANSFER_ENCODING, *line);
            }
            admit(&request.body(()).unwrap_or_default())
        };
        for ok in [&[][..], &["chunked"], &["Chunked"], &[" chunked ,"]] {
            assert!(with(ok).is_ok(), "{ok:?}");
        }
        for refused in [
            &["gzip, chunked"][..],
            &["deflate,chunked"],
            &["gzip", "chunked"],
            &["chunked, chunked"],
            &["chunked;q=1"],
        ] {
            let e = with(refused).err();
            assert!(matches!(e, Some(ProxyError::TransferCoding)), "{refused:?}");
        }
    }

    #[test]
    fn host_rules_follow_the_version() {
        assert!(admit(&request(Version::HTTP_11, &["a"])).is_ok());
        assert!(admit(&request(Version::HTTP_11, &[])).is_err());
        assert!(admit(&request(Version::HTTP_11, &["a", "b"])).is_err());
        assert!(admit(&request(Version::HTTP_10, &[])).is_ok());
        assert!(admit(&request(Version::HTTP_10, &["a", "a"])).is_err());
        assert!(admit(&request(Version::HTTP_2, &[])).is_ok());
    }
}
