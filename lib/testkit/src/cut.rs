//! A switchable network cut between a client and one emulator: a TCP proxy that forwards bytes
//! unchanged until [`Cut::cut`], then black-holes them until [`Cut::restore`].
//!
//! A partition rarely refuses connections: packets just stop arriving, so a call hangs until its
//! own timeout. While cut, the proxy keeps every connection open but moves no byte either way,
//! and accepts new connections without forwarding them; a client sees hung calls, not errors.
//! On restore the connections that were held are closed (their calls timed out long ago) and new
//! ones are forwarded again. The emulator behind it is the real one: only the path is cut.
//!
//! ```no_run
//! # async fn f(config: aws_config::SdkConfig) -> std::io::Result<()> {
//! use heatsink_testkit::cut::Cut;
//! let cut = Cut::start("http://127.0.0.1:5000").await?;
//! let conf = aws_sdk_dynamodb::config::Builder::from(&config)
//!     .endpoint_url(cut.endpoint())
//!     .build();
//! let ddb = aws_sdk_dynamodb::Client::from_conf(conf); // reaches the emulator through `cut`
//! cut.cut(); // ddb's calls now hang until their timeouts
//! cut.restore();
//! # Ok(()) }
//! ```

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running proxy; stops (closing every connection) when dropped.
pub struct Cut {
    addr: SocketAddr,
    switch: watch::Sender<bool>,
    accept: JoinHandle<()>,
}

impl Cut {
    /// Listens on an ephemeral loopback port and forwards to `upstream` (`http://host:port`,
    /// as in an `AWS_ENDPOINT_URL_*` variable).
    pub async fn start(upstream: &str) -> io::Result<Cut> {
        let target = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (switch, cut) = watch::channel(false);
        let accept = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                connections.spawn(relay(client, target.clone(), cut.clone()));
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(Cut {
            addr,
            switch,
            accept,
        })
    }

    /// The endpoint URL to give a client instead of the emulator's.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops moving bytes, on every connection open now or later, until [`Cut::restore`].
    pub fn cut(&self) {
        self.switch.send_replace(true);
    }

    /// Forwards again; the connections held during the cut are closed.
    pub fn restore(&self) {
        self.switch.send_replace(false);
    }

    /// Whether the path is cut now.
    pub fn is_cut(&self) -> bool {
        *self.switch.borrow()
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every relay.
        self.accept.abort();
    }
}

/// Forwards one connection until either side closes or the path is cut; a cut connection is
/// held open, silent, until the path is restored, then closed.
async fn relay(mut client: TcpStream, target: String, mut cut: watch::Receiver<bool>) {
    let _ = client.set_nodelay(true);
    if !*cut.borrow() {
        let Ok(mut upstream) = TcpStream::connect(&target).await else {
            return;
        };
        let _ = upstream.set_nodelay(true);
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => return,
            _ = cut.wait_for(|c| *c) => {}
        }
        // Cut: keep both sockets open and silent until restored.
        let _ = cut.wait_for(|c| !*c).await;
        return;
    }
    let _ = cut.wait_for(|c| !*c).await;
}
