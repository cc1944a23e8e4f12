//! [`FaultProxy`]: a fault-injecting TCP proxy for tests (feature `conformance`).
//!
//! Sits between clients and a store on loopback. It can add latency, black-hole traffic (a
//! partition: connections stay open, no byte crosses until healed), kill (reset every
//! connection and refuse new ones until healed) and heal.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with traffic right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward, delaying each chunk by the given one-way latency.
    Pass(Duration),
    /// Forward nothing; connections stay open (a network partition).
    Blackhole,
    /// Reset every connection and refuse new ones (a dead link or host).
    Down,
}

struct Inner {
    upstream: SocketAddr,
    mode: watch::Sender<ProxyMode>,
    /// Bumped on every kill: pumps of older generations stop and reset their sockets.
    generation: watch::Sender<u64>,
    open: AtomicUsize,
    /// Chunks (reads) forwarded from clients upstream.
    chunks_up: AtomicU64,
    /// Extra delay (µs) for chunks from clients to the store only.
    up_delay_us: AtomicU64,
    /// While true, what the store sends is held (requests still pass): replies are lost.
    replies_held: watch::Sender<bool>,
}

/// A TCP proxy on `127.0.0.1:<ephemeral>` forwarding to one upstream address.
pub struct FaultProxy {
    inner: Arc<Inner>,
    addr: SocketAddr,
    accept: JoinHandle<()>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.inner.upstream)
            .field("mode", &*self.inner.mode.borrow())
            .finish()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.kill();
        self.accept.abort();
    }
}

impl FaultProxy {
    /// Starts a proxy to `upstream` on a fresh loopback port.
    ///
    /// # Errors
    /// When the listening socket cannot be bound.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            upstream,
            mode: watch::channel(ProxyMode::Pass(Duration::ZERO)).0,
            generation: watch::channel(0).0,
            open: AtomicUsize::new(0),
            chunks_up: AtomicU64::new(0),
            up_delay_us: AtomicU64::new(0),
            replies_held: watch::channel(false).0,
        });
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&inner)));
        Ok(FaultProxy {
            inner,
            addr,
            accept,
        })
    }

    /// The address clients should connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The upstream address.
    pub fn upstream(&self) -> SocketAddr {
        self.inner.upstream
    }

    /// Resets every connection and refuses new ones until [`heal`](Self::heal).
    pub fn kill(&self) {
        self.inner.mode.send_replace(ProxyMode::Down);
        self.inner.generation.send_modify(|g| *g += 1);
    }

    /// Resets every open connection (what they held in flight is dropped) and keeps accepting
    /// new ones, as a server that ended its sessions but stays up; the mode is unchanged.
    pub fn reset_connections(&self) {
        self.inner.generation.send_modify(|g| *g += 1);
    }

    /// Stops forwarding in both directions; connections stay open (a partition).
    pub fn blackhole(&self) {
        self.inner.mode.send_replace(ProxyMode::Blackhole);
    }

    /// Forwards again with `latency` added to every chunk in each direction.
    pub fn set_latency(&self, latency: Duration) {
        self.inner.mode.send_replace(ProxyMode::Pass(latency));
    }

    /// Delays what clients send to the store by `latency` (on top of the latency both ways),
    /// and nothing the store sends: requests arrive late, while answers and what the store
    /// sends unasked (pub/sub messages, watch events) arrive at once. Each connection forwards
    /// its chunks one after another, each held `latency` from when it is forwarded, so chunks
    /// sent close together on one connection queue behind each other; a chunk already held
    /// keeps its delay when this changes (or on [`heal`](Self::heal)).
    pub fn set_upward_latency(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.inner.up_delay_us.store(us, Ordering::SeqCst);
    }

    /// Holds everything the store sends until [`heal`](Self::heal), while requests still reach
    /// it: the store applies commands and their replies are lost (a one-way partition).
    pub fn hold_replies(&self) {
        self.inner.replies_held.send_replace(true);
    }

    /// Back to plain forwarding (held bytes flow again; new connections are accepted; no
    /// upward delay, no held replies).
    pub fn heal(&self) {
        self.inner.replies_held.send_replace(false);
        self.set_upward_latency(Duration::ZERO);
        self.set_latency(Duration::ZERO);
    }

    /// The current mode.
    pub fn mode(&self) -> ProxyMode {
        *self.inner.mode.borrow()
    }

    /// Connections currently open through the proxy.
    pub fn open_connections(&self) -> usize {
        self.inner.open.load(Ordering::SeqCst)
    }

    /// How many chunks clients have sent upstream through the proxy so far (each read from a
    /// client socket counts once): about one per request for a client that waits for each
    /// answer, so a test can tell how often a client talked to the store.
    pub fn chunks_sent(&self) -> u64 {
        self.inner.chunks_up.load(Ordering::SeqCst)
    }
}

async fn accept_loop(listener: TcpListener, inner: Arc<Inner>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if *inner.mode.borrow() == ProxyMode::Down {
            reset(client);
            continue;
        }
        tokio::spawn(serve(client, Arc::clone(&inner)));
    }
}

fn reset(stream: TcpStream) {
    // Zero linger turns the close into a RST, as a crashed peer's kernel would send.
    let _ = socket2_linger_zero(&stream);
    drop(stream);
}

fn socket2_linger_zero(stream: &TcpStream) -> std::io::Result<()> {
    #[allow(deprecated)]
    stream.set_linger(Some(Duration::ZERO))
}

async fn serve(client: TcpStream, inner: Arc<Inner>) {
    let generation = *inner.generation.borrow();
    let upstream = match tokio::time::timeout(
        Duration::from_secs(5),
        TcpStream::connect(inner.upstream),
    )
    .await
    {
        Ok(Ok(s)) => s,
        _ => return reset(client),
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let _ = socket2_linger_zero(&client);
    let _ = socket2_linger_zero(&upstream);
    inner.open.fetch_add(1, Ordering::SeqCst);
    let (cr, cw) = client.into_split();
    let (ur, uw) = upstream.into_split();
    let up = pump(cr, uw, Arc::clone(&inner), generation, true);
    let down = pump(ur, cw, Arc::clone(&inner), generation, false);
    // When either direction ends, both sockets are dropped (reset).
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
    inner.open.fetch_sub(1, Ordering::SeqCst);
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    inner: Arc<Inner>,
    generation: u64,
    upward: bool,
) {
    let mut gen_rx = inner.generation.subscribe();
    let mut mode_rx = inner.mode.subscribe();
    let killed = move |g: &u64| *g != generation;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = gen_rx.wait_for(killed) => return,
        };
        if upward {
            inner.chunks_up.fetch_add(1, Ordering::SeqCst);
        }
        // Hold the bytes while black-holed; give up on kill.
        let latency = loop {
            let mode = *mode_rx.borrow_and_update();
            match mode {
                ProxyMode::Pass(l) => break l,
                ProxyMode::Down => return,
                ProxyMode::Blackhole => {
                    tokio::select! {
                        r = mode_rx.changed() => if r.is_err() { return },
                        _ = gen_rx.wait_for(killed) => return,
                    }
                }
            }
        };
        let latency = if upward {
            latency + Duration::from_micros(inner.up_delay_us.load(Ordering::SeqCst))
        } else {
            let mut held = inner.replies_held.subscribe();
            tokio::select! {
                r = held.wait_for(|h| !h) => if r.is_err() { return },
                _ = gen_rx.wait_for(killed) => return,
            }
            latency
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        tokio::select! {
            r = to.write_all(&buf[..n]) => if r.is_err() { return },
            _ = gen_rx.wait_for(killed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 1024];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 || s.write_all(&b[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, within: Duration) -> Option<Duration> {
        let t = tokio::time::Instant::now();
        s.write_all(b"ping").await.ok()?;
        let mut b = [0u8; 4];
        match tokio::time::timeout(within, s.read_exact(&mut b)).await {
            Ok(Ok(_)) => Some(t.elapsed()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn latency_blackhole_heal_and_kill() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(roundtrip(&mut s, Duration::from_secs(1)).await.is_some());

        proxy.set_latency(Duration::from_millis(50));
        let rtt = roundtrip(&mut s, Duration::from_secs(1)).await.unwrap();
        assert!(rtt >= Duration::from_millis(100), "{rtt:?}");

        proxy.set_latency(Duration::ZERO);
        proxy.set_upward_latency(Duration::from_millis(300));
        let rtt = roundtrip(&mut s, Duration::from_secs(2)).await.unwrap();
        assert!(
            rtt >= Duration::from_millis(300) && rtt < Duration::from_millis(590),
            "one way delayed, not both: {rtt:?}"
        );
        proxy.set_upward_latency(Duration::ZERO);

        proxy.hold_replies();
        s.write_all(b"held").await.unwrap();
        assert!(roundtrip(&mut s, Duration::from_millis(300))
            .await
            .is_none());
        proxy.heal();
        let mut b = [0u8; 8];
        tokio::time::timeout(Duration::from_secs(1), s.read_exact(&mut b))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            &b, b"heldping",
            "the store did not get the requests, or replies were lost"
        );

        proxy.blackhole();
        assert!(roundtrip(&mut s, Duration::from_millis(300))
            .await
            .is_none());
        proxy.heal();
        let mut b = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(1), s.read_exact(&mut b))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&b, b"ping", "held bytes were not delivered after heal");

        proxy.kill();
        let mut b = [0u8; 4];
        let r = tokio::time::timeout(Duration::from_secs(1), s.read(&mut b)).await;
        assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "{r:?}");
        let mut s2 = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(roundtrip(&mut s2, Duration::from_millis(300))
            .await
            .is_none());
        proxy.heal();
        let mut s3 = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(roundtrip(&mut s3, Duration::from_secs(1)).await.is_some());
    }
}
