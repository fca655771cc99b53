//! The loopback HTTP server the simulator's endpoints share: bind, then serve every connection
//! with one handler until stopped.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::SimError;

/// Binds `listen` and returns the listener with the address it got (port 0: a free port).
pub(crate) async fn bind(listen: SocketAddr) -> Result<(TcpListener, SocketAddr), SimError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| SimError::Bind {
            addr: listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| SimError::Bind {
        addr: listen,
        source,
    })?;
    Ok((listener, addr))
}

/// Serves HTTP/1.1 connections on `listener`, each request answered by `handle(shared, req)`,
/// until `stopped` changes.
pub(crate) fn serve<S, H, F>(
    listener: TcpListener,
    shared: Arc<S>,
    mut stopped: watch::Receiver<bool>,
    handle: H,
) where
    S: Send + Sync + 'static,
    H: Fn(Arc<S>, Request<Incoming>) -> F + Copy + Send + Sync + 'static,
    F: Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = stopped.changed() => return,
            };
            let Ok((conn, _)) = accepted else { continue };
            let shared = shared.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| handle(shared.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(conn), service)
                    .await;
            });
        }
    });
}
