use super::*;

#[test]
fn a_device_is_a_tracker_with_a_key_or_a_server_without() {
    assert_eq!(
        Device::parse("127.0.0.1:9190:board").unwrap(),
        Device {
            host: "127.0.0.1".to_string(),
            port: 9190,
            key: Some("board".to_string())
        }
    );
    assert_eq!(Device::parse("pi.local:9090").unwrap().key, None);
    for bad in [
        "",
        "host",
        "host:",
        ":9190:k",
        "host:port:k",
        "host:70000:k",
        "host:9190:",
        "host:9190:a:b",
    ] {
        let error = Device::parse(bad).unwrap_err();
        assert!(
            error.contains(&format!("--rpc `{bad}`")) && error.contains("HOST:PORT:KEY"),
            "{error}"
        );
    }
}

#[test]
fn dims_are_name_equals_size() {
    let dims = parse_dims(&["batch=1".to_string(), " width = 128".to_string()]).unwrap();
    assert_eq!(
        dims,
        BTreeMap::from([("batch".to_string(), 1), ("width".to_string(), 128)])
    );
    for bad in ["batch", "batch=", "batch=-1", "batch=x"] {
        assert!(parse_dims(&[bad.to_string()])
            .unwrap_err()
            .contains(&format!("--dim `{bad}`")));
    }
}

#[test]
fn the_table_has_a_row_per_function_with_median_and_spread() {
    let answer = json!({
        "model": "crnn",
        "device": "`board` via 127.0.0.1:9190",
        "functions": [{"name": "main", "inputs": [[1, 1, 32, 128]], "runs_us": [30.0, 10.0, 20.0]}],
    });
    let lines = table(&[answer], "aarch64-unknown-linux-gnu");
    assert_eq!(
        lines[0],
        "model `crnn` on device `board` via 127.0.0.1:9190 (target aarch64-unknown-linux-gnu)"
    );
    let row: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(row, ["main", "[1,1,32,128]", "3", "20.0", "10.0", "30.0"]);
}

#[test]
fn only_loopback_hosts_keep_the_tracker_to_this_machine() {
    for host in ["127.0.0.1", "localhost", "::1", "127.0.0.2"] {
        assert!(is_loopback(host), "{host}");
    }
    for host in ["0.0.0.0", "192.168.1.10", "::", "build-machine"] {
        assert!(!is_loopback(host), "{host}");
    }
}
