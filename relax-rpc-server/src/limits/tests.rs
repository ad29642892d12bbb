use super::*;

fn limits() -> Limits {
    Limits {
        max_message_bytes: mib_to_bytes(2),
        max_repeat: 5,
        idle_timeout: Duration::from_secs(7),
        max_session: Duration::from_secs(100),
    }
}

#[test]
fn a_client_timeout_shortens_the_session_but_never_lengthens_it() {
    assert_eq!(
        limits().with_client_timeout(Some(10)).max_session,
        Duration::from_secs(10)
    );
    assert_eq!(
        limits().with_client_timeout(Some(1000)).max_session,
        Duration::from_secs(100)
    );
    assert_eq!(limits().with_client_timeout(Some(0)), limits());
    assert_eq!(limits().with_client_timeout(None), limits());
}

#[test]
fn messages_name_the_limit_and_the_flag_that_raises_it() {
    let message = limits().message_too_large(3 << 20);
    assert!(
        message.contains("3145728 bytes") && message.contains("2097152 bytes (2 MiB)"),
        "{message}"
    );
    assert!(message.contains("--max-message-mib"), "{message}");
    assert!(limits().idle_message().contains("7 s"));
    assert!(limits().idle_message().contains("--idle-timeout"));
    assert!(limits().too_long_message().contains("--max-session"));
}

#[test]
fn the_child_s_flags_carry_every_limit() {
    assert_eq!(
        limits().to_args().join(" "),
        "--max-message-bytes 2097152 --max-repeat 5 --idle-timeout 7 --max-session 100"
    );
}
