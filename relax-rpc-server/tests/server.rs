//! relax-rpc-server's defences, against the real binary over real sockets on
//! 127.0.0.1: where it listens, clients that stall, messages and counts over the
//! limits, a module that crashes its session, the token, and a full house.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use common::{hello, session_folders, Answer, Argument, Server, RPC_MAGIC, RPC_MISMATCH};

#[test]
fn the_server_listens_on_loopback_by_default() {
    let server = Server::start(&[], &[]);
    assert!(
        server.address.starts_with("127.0.0.1:"),
        "{}",
        server.output()
    );
    assert!(!server.output().contains("warning"), "{}", server.output());
    let mut client = server.session("client:");
    let threads = client.call_global("runtime.NumThreads", &[]).unwrap();
    assert!(
        matches!(threads, Answer::Return(1, count) if count >= 1),
        "{threads:?}"
    );
}

#[test]
fn a_silent_and_a_trickling_client_do_not_keep_a_second_client_waiting() {
    let mut server = Server::start(&["--handshake-timeout", "3"], &[]);
    let _silent = server.connect(30);
    let mut trickling = server.connect(30);
    let trickler = std::thread::spawn(move || {
        // The handshake, a byte a second: each read is quick, the whole is not.
        for byte in common::RPC_MAGIC.to_le_bytes().into_iter().cycle().take(12) {
            if trickling.write_all(&[byte]).is_err() {
                return true;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        false
    });
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let mut client = server.session("client:");
    let answer = client.call_global("runtime.NumThreads", &[]).unwrap();
    assert!(matches!(answer, Answer::Return(..)), "{answer:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the second client waited {:?}",
        started.elapsed()
    );
    // Both stalled handshakes are cut at the overall deadline, trickle or not.
    server.wait_for("handshake with", 10);
    let cut = Instant::now();
    while server.output().matches("did not finish in time").count() < 2 {
        assert!(
            cut.elapsed() < Duration::from_secs(10),
            "{}",
            server.output()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        trickler.join().unwrap(),
        "the trickling client was still connected after 12 s"
    );
}

#[test]
fn an_oversized_upload_is_refused_naming_the_limit() {
    let mut server = Server::start(&["--max-message-mib", "1"], &[]);
    let mut client = server.session("client:");
    let upload = client.function("tvm.rpc.server.upload");
    let two_mib = vec![7u8; 2 << 20];
    let answer = client
        .call(
            upload,
            &[Argument::Text("big.bin"), Argument::Bytes(&two_mib)],
        )
        .unwrap();
    let Answer::Exception(message) = answer else {
        panic!("a 2 MiB upload was accepted: {answer:?}");
    };
    assert!(
        message.contains("1048576 bytes (1 MiB)") && message.contains("--max-message-mib"),
        "{message}"
    );
    server.wait_for("failed: it broke a limit", 10);
    // A small upload in the next session is served.
    let mut client = server.session("client:");
    let upload = client.function("tvm.rpc.server.upload");
    let answer = client
        .call(
            upload,
            &[Argument::Text("small.bin"), Argument::Bytes(b"12345")],
        )
        .unwrap();
    assert!(matches!(answer, Answer::Return(..)), "{answer:?}");
}

#[test]
fn a_message_declaring_a_huge_length_is_refused_without_being_read() {
    let server = Server::start(&[], &[]);
    let mut client = server.session("client:");
    client
        .stream
        .write_all(&(1u64 << 40).to_le_bytes())
        .unwrap();
    let Answer::Exception(message) = client.answer().unwrap() else {
        panic!("no refusal");
    };
    assert!(
        message.contains("1099511627776 bytes") && message.contains("--max-message-mib"),
        "{message}"
    );
}

#[test]
fn an_oversized_repeat_is_refused_naming_the_limit() {
    let server = Server::start(&["--max-repeat", "50"], &[]);
    let mut client = server.session("client:");
    let request = r#"{"library": "m.so", "signature": "m.json", "weights": null, "warmup": 1, "repeat": 18446744073709551615}"#;
    let answer = client
        .call_global("relax_rpc.time_model", &[Argument::Text(request)])
        .unwrap();
    let Answer::Exception(message) = answer else {
        panic!("accepted: {answer:?}");
    };
    assert!(
        message.contains("repeat 18446744073709551615 is over this server's limit of 50 runs")
            && message.contains("--max-repeat"),
        "{message}"
    );
    // The session goes on.
    let answer = client.call_global("runtime.NumThreads", &[]).unwrap();
    assert!(matches!(answer, Answer::Return(..)), "{answer:?}");
}

/// A shared library whose constructor aborts, built with the system's C compiler.
fn aborting_library(folder: &std::path::Path) -> Vec<u8> {
    let source = folder.join("abort.c");
    std::fs::write(
        &source,
        "#include <stdlib.h>\n__attribute__((constructor)) static void crash(void) { abort(); }\n",
    )
    .unwrap();
    let library = folder.join("abort.so");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .expect("running cc");
    assert!(status.success(), "cc failed");
    std::fs::read(library).unwrap()
}

#[test]
fn a_module_that_aborts_ends_only_its_session() {
    let scratch = tempfile::tempdir().unwrap();
    let library = aborting_library(scratch.path());
    let work = tempfile::tempdir().unwrap();
    // A folder a killed server left behind: swept at start.
    std::fs::create_dir(work.path().join("relax-rpc-session-stale")).unwrap();
    std::fs::write(work.path().join("relax-rpc-session-stale.lock"), b"").unwrap();
    let work_dir = work.path().to_str().unwrap();
    let mut server = Server::start(&["--work-dir", work_dir], &[]);
    assert!(
        session_folders(work.path()).is_empty(),
        "{}",
        server.output()
    );

    let mut client = server.session("client:");
    let upload = client.function("tvm.rpc.server.upload");
    let answer = client
        .call(
            upload,
            &[Argument::Text("abort.so"), Argument::Bytes(&library)],
        )
        .unwrap();
    assert!(matches!(answer, Answer::Return(..)), "{answer:?}");
    assert_eq!(
        session_folders(work.path()).len(),
        2,
        "a folder and its lock"
    );
    let load = client.function("tvm.rpc.server.load_module");
    assert!(
        client.call(load, &[Argument::Text("abort.so")]).is_err(),
        "the connection ends with the session's process"
    );
    server.wait_for("killed by signal 6 (SIGABRT)", 30);

    // The server goes on, and the crashed session's folder is gone.
    let mut next = server.session("client:");
    let answer = next.call_global("runtime.NumThreads", &[]).unwrap();
    assert!(matches!(answer, Answer::Return(..)), "{answer:?}");
    drop(next);
    server.wait_for("ended after", 10);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !session_folders(work.path()).is_empty() {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            session_folders(work.path())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_wrong_token_is_refused_and_the_right_one_accepted() {
    let token = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token.path(), "s3cret-token\n").unwrap();
    let mut server = Server::start(
        &["--token-file", token.path().to_str().unwrap()],
        // The file wins over the server's environment.
        &[("RELAX_RPC_TOKEN", "other")],
    );
    for key in ["client: -token=wrong", "client:", "client: -token=other"] {
        let mut stream = server.connect(10);
        assert_eq!(hello(&mut stream, key), RPC_MISMATCH, "{key}");
    }
    server.wait_for("a wrong or missing token", 10);
    assert!(!server.output().contains("s3cret"), "{}", server.output());
    let mut client = server.session("client: -timeout=60 -token=s3cret-token");
    let answer = client.call_global("runtime.NumThreads", &[]).unwrap();
    assert!(matches!(answer, Answer::Return(..)), "{answer:?}");

    // From the environment, without --token-file.
    let server = Server::start(&[], &[("RELAX_RPC_TOKEN", "from-env")]);
    let mut stream = server.connect(10);
    assert_eq!(hello(&mut stream, "client:"), RPC_MISMATCH);
    let mut stream = server.connect(10);
    assert_eq!(hello(&mut stream, "client: -token=from-env"), RPC_MAGIC);
}

#[test]
fn a_client_beyond_max_sessions_is_told_the_server_is_busy() {
    let server = Server::start(&["--max-sessions", "1"], &[]);
    let mut first = server.session("client:");
    let mut second = server.connect(10);
    assert_eq!(hello(&mut second, "client:"), RPC_MAGIC);
    let mut second = common::Client { stream: second };
    let Answer::Exception(message) = second.init().unwrap() else {
        panic!("a second session was served");
    };
    assert!(
        message.contains("busy") && message.contains("--max-sessions"),
        "{message}"
    );
    let answer = first.call_global("runtime.NumThreads", &[]).unwrap();
    assert!(matches!(answer, Answer::Return(..)), "{answer:?}");
}

/// A stand-in for TVM's tracker: it accepts the server's registration, answers its
/// messages as TVM's tracker does, and records each offer's matchkey (every offer stays
/// pending until it is replaced).
fn stand_in_tracker() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let offers = Arc::new(Mutex::new(Vec::new()));
    let recorded = Arc::clone(&offers);
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let mut word = [0u8; 4];
        stream.read_exact(&mut word).unwrap();
        stream.write_all(&word).unwrap();
        while stream.read_exact(&mut word).is_ok() {
            let mut message = vec![0u8; i32::from_le_bytes(word) as usize];
            stream.read_exact(&mut message).unwrap();
            let message: serde_json::Value = serde_json::from_slice(&message).unwrap();
            let answer = match message[0].as_i64() {
                // PUT [key, [port, matchkey], host]
                Some(3) => {
                    let matchkey = message[2][1].as_str().unwrap().to_string();
                    recorded.lock().unwrap().push(matchkey);
                    serde_json::json!(0)
                }
                // GET_PENDING_MATCHKEYS
                Some(7) => serde_json::json!(recorded.lock().unwrap().last()),
                _ => serde_json::json!(0),
            };
            let answer = answer.to_string();
            stream
                .write_all(&(answer.len() as i32).to_le_bytes())
                .unwrap();
            stream.write_all(answer.as_bytes()).unwrap();
        }
    });
    (address, offers)
}

/// Waits until the stand-in tracker has `count` offers and returns the last.
fn offer(offers: &Mutex<Vec<String>>, count: usize) -> String {
    let started = Instant::now();
    loop {
        if let Some(matchkey) = offers.lock().unwrap().get(count - 1) {
            return matchkey.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no offer {count}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn with_a_tracker_each_offer_serves_one_client_and_is_renewed_after_its_session() {
    let (tracker, offers) = stand_in_tracker();
    let server = Server::start(&["--tracker", &tracker, "--key", "board"], &[]);
    assert!(
        server.output().contains(&format!(
            "registered with the tracker at {tracker} as `board`"
        )),
        "{}",
        server.output()
    );
    let first = offer(&offers, 1);
    assert!(first.starts_with("board:"), "{first}");
    let mut client = server.session(&format!("client:{first}"));
    // The offer is taken: a second client with its matchkey is refused.
    let mut late = server.connect(10);
    assert_eq!(hello(&mut late, &format!("client:{first}")), RPC_MISMATCH);
    let answer = client.call_global("runtime.NumThreads", &[]).unwrap();
    assert!(matches!(answer, Answer::Return(..)), "{answer:?}");
    drop(client);
    // Offered again once the session ended, under a new matchkey.
    let second = offer(&offers, 2);
    assert_ne!(second, first);
    let mut next = server.session(&format!("client:{second}"));
    let answer = next.call_global("runtime.NumThreads", &[]).unwrap();
    assert!(matches!(answer, Answer::Return(..)), "{answer:?}");
}
