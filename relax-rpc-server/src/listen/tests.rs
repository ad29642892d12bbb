use std::net::TcpListener;

use super::*;

#[test]
fn only_an_address_beyond_loopback_is_warned_about_naming_the_remedies() {
    assert_eq!(
        exposure_warning("127.0.0.1:9090".parse().unwrap(), false),
        None
    );
    assert_eq!(exposure_warning("[::1]:9090".parse().unwrap(), false), None);
    let open = exposure_warning("0.0.0.0:9090".parse().unwrap(), false).unwrap();
    for part in [
        "0.0.0.0:9090",
        "run it here",
        "no token is required (--token-file, or RELAX_RPC_TOKEN)",
        "ssh -L 9090:127.0.0.1:9090",
        "--allow",
    ] {
        assert!(open.contains(part), "{part:?} in {open}");
    }
    let guarded = exposure_warning("192.168.1.5:9090".parse().unwrap(), true).unwrap();
    assert!(guarded.contains("if it presents the token"), "{guarded}");
}

#[test]
fn a_deadline_bounds_the_whole_exchange_not_each_read() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (accepted, _) = listener.accept().unwrap();
    let trickle = std::thread::spawn(move || {
        for _ in 0..20 {
            if client.write_all(&[0]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let started = Instant::now();
    let mut timed = Timed {
        stream: &accepted,
        deadline: started + Duration::from_millis(700),
    };
    let mut buffer = [0u8; 64];
    let error = timed.read_exact(&mut buffer).unwrap_err();
    assert!(
        matches!(
            error.kind(),
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
        ),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_millis(1500));
    assert_eq!(describe(&error), "it did not finish in time");
    drop(accepted);
    trickle.join().unwrap();
}
