//! A tap whose process runs out of file descriptors refuses connections cleanly: it closes
//! them, counts them, and serves again once descriptors are free. Its own test binary, because
//! it lowers the process's descriptor limit for good.

use std::fs::File;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use tap::{LinkConfig, Tap, TapConfig};

fn limit_descriptors(n: u64) {
    let lim = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: a valid rlimit; lowering is always allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
}

/// A client socket made before the descriptors run out: connecting needs none.
fn client_socket() -> socket2::Socket {
    socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap()
}

fn connect(s: socket2::Socket, to: SocketAddr) -> std::net::TcpStream {
    s.connect(&to.into()).unwrap();
    let s: std::net::TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

#[test]
fn out_of_descriptors_connections_are_refused_counted_and_served_again() {
    limit_descriptors(256);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let upstream = rt.block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.into_split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    });
    let mut cfg = TapConfig::new("127.0.0.1:0".parse().unwrap(), upstream);
    cfg.link = LinkConfig::default();
    let tap = rt.block_on(Tap::bind(cfg)).unwrap();
    let addr = tap.local_addr();
    let stats = tap.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let done = rt.spawn(tap.run(async {
        let _ = stopped.await;
    }));
    // Let the tap take its reserve descriptor before the others are used up.
    std::thread::sleep(Duration::from_millis(100));

    let refused_client = client_socket();
    let served_client = client_socket();
    let mut hog = Vec::new();
    while let Ok(f) = File::open("/dev/null") {
        hog.push(f);
    }
    assert!(hog.len() > 100, "{}", hog.len());

    // Nothing left: the tap cannot accept, sheds the connection and counts it.
    let mut c = connect(refused_client, addr);
    let mut buf = [0u8; 8];
    let r = c.read(&mut buf);
    assert!(
        matches!(r, Ok(0) | Err(_)),
        "served without a descriptor: {r:?}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while stats.refused.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the refusal was not counted"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    // Descriptors free again (the tap's two legs and the upstream's accept need three): served.
    hog.truncate(hog.len() - 8);
    let mut c = connect(served_client, addr);
    c.write_all(b"still relaying").unwrap();
    let mut back = [0u8; 14];
    if let Err(e) = c.read_exact(&mut back) {
        use std::sync::atomic::Ordering::Relaxed;
        panic!(
            "not served: {e}; accepted {}, refused {}, upstream failures {}",
            stats.accepted.load(Relaxed),
            stats.refused.load(Relaxed),
            stats.upstream_failed.load(Relaxed)
        );
    }
    assert_eq!(&back, b"still relaying");
    drop(c);
    drop(hog);

    let _ = stop.send(());
    let summary = rt.block_on(done).unwrap();
    assert!(summary.refused >= 1, "{summary}");
    assert!(summary.accepted >= 1, "{summary}");
    assert_eq!(summary.bytes[0], 14);
}
