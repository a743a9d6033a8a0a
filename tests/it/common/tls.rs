//! An HTTPS echo upstream with a certificate for `localhost` and
//! `127.0.0.1`, signed by the test CA in `tests/fixtures/tls/` (test-only
//! keys, valid until 2126).

use std::{convert::Infallible, net::SocketAddr, path::PathBuf, sync::Arc};

use http::{Request, Response};
use hyper::{body::Incoming, service::service_fn};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use tokio::{net::TcpListener, sync::mpsc};
use tokio_rustls::{
    rustls::{
        self,
        pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    },
    TlsAcceptor,
};

/// The directory of the test certificates.
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls")
}

/// An HTTPS upstream that echoes request bodies; speaks h2 or HTTP/1.1 by ALPN.
pub struct TlsEcho {
    pub addr: SocketAddr,
    pub seen: mpsc::UnboundedReceiver<http::request::Parts>,
}

impl TlsEcho {
    pub async fn start() -> Self {
        let dir = fixtures();
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(dir.join("server.pem"))
                .expect("server.pem")
                .collect::<Result<_, _>>()
                .expect("certs");
        let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).expect("server.key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("server config");
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, seen) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = service_fn(move |request: Request<Incoming>| {
                        let (parts, body) = request.into_parts();
                        let _ = tx.send(parts);
                        async move { Ok::<_, Infallible>(Response::new(body)) }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Self { addr, seen }
    }
}
