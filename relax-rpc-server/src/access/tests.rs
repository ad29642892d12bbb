use std::io::Write;

use super::*;

#[test]
fn the_token_comes_from_the_file_first_then_the_environment() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "s3cret").unwrap();
    let token = Token::load(Some(file.path()), Some("other".to_string()))
        .unwrap()
        .unwrap();
    assert!(token.accepts(Some("s3cret")));
    assert!(!token.accepts(Some("other")));
    let token = Token::load(None, Some("other".to_string()))
        .unwrap()
        .unwrap();
    assert!(token.accepts(Some("other")));
    assert!(Token::load(None, None).unwrap().is_none());
    assert!(Token::load(None, Some(String::new())).unwrap().is_none());
}

#[test]
fn an_unusable_token_file_is_an_error_naming_it() {
    let empty = tempfile::NamedTempFile::new().unwrap();
    let error = Token::load(Some(empty.path()), None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains(&empty.path().display().to_string()) && error.contains("no token"),
        "{error}"
    );
    let missing = Path::new("/nonexistent/token");
    let error = Token::load(Some(missing), None).err().unwrap().to_string();
    assert!(
        error.contains("/nonexistent/token") && error.contains("--token-file"),
        "{error}"
    );
    let spaced = Token::load(None, Some("two words".to_string()))
        .err()
        .unwrap()
        .to_string();
    assert!(spaced.contains(env::TOKEN), "{spaced}");
}

#[test]
fn a_token_accepts_only_itself() {
    let token = Token(b"abc".to_vec());
    assert!(token.accepts(Some("abc")));
    for wrong in [
        None,
        Some(""),
        Some("ab"),
        Some("abd"),
        Some("abcd"),
        Some("ABC"),
    ] {
        assert!(!token.accepts(wrong), "{wrong:?}");
    }
}

#[test]
fn the_allow_list_matches_addresses_and_networks() {
    let list = AllowList::parse(&[
        "10.1.0.0/16".to_string(),
        "192.168.1.20".to_string(),
        "fd00::/8".to_string(),
    ])
    .unwrap();
    for allowed in ["10.1.2.3", "192.168.1.20", "fd12::1", "::ffff:10.1.9.9"] {
        assert!(list.allows(allowed.parse().unwrap()), "{allowed}");
    }
    for refused in ["10.2.0.1", "192.168.1.21", "fe80::1", "127.0.0.1"] {
        assert!(!list.allows(refused.parse().unwrap()), "{refused}");
    }
    assert!(AllowList::default().allows("8.8.8.8".parse().unwrap()));
    let everyone = AllowList::parse(&["0.0.0.0/0".to_string()]).unwrap();
    assert!(everyone.allows("8.8.8.8".parse().unwrap()));
}

#[test]
fn a_malformed_allow_value_names_itself_and_the_form() {
    for value in ["board", "10.0.0.0/33", "10.0.0.0/x", "::1/129"] {
        let error = AllowList::parse(&[value.to_string()])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&format!("--allow `{value}`")) && error.contains("e.g."),
            "{error}"
        );
    }
}
