use super::*;

fn arguments(words: &[&str]) -> Vec<OsString> {
    words.iter().map(OsString::from).collect()
}

fn command_line(words: &[&str]) -> Vec<u8> {
    words
        .iter()
        .flat_map(|word| word.bytes().chain([0]))
        .collect()
}

#[test]
fn a_native_server_runs_itself() {
    let server = PathBuf::from("/opt/board/relax-rpc-server");
    let launcher = launcher(
        server.clone(),
        Some(server.clone()),
        Some(command_line(&["./relax-rpc-server", "--port", "9090"])),
        &arguments(&["./relax-rpc-server", "--port", "9090"]),
    );
    assert_eq!(
        launcher,
        Launcher {
            program: server,
            prefix: Vec::new()
        }
    );
}

#[test]
fn a_server_under_qemu_user_runs_itself_through_the_same_emulator_and_options() {
    let server = PathBuf::from("/dist/relax-rpc-server");
    let launcher = launcher(
        server.clone(),
        Some(PathBuf::from("/usr/bin/qemu-aarch64")),
        Some(command_line(&[
            "qemu-aarch64",
            "-L",
            "/usr/aarch64-linux-gnu",
            "/dist/relax-rpc-server",
            "--port",
            "9091",
        ])),
        &arguments(&["/dist/relax-rpc-server", "--port", "9091"]),
    );
    assert_eq!(
        launcher,
        Launcher {
            program: server,
            prefix: arguments(&["/usr/bin/qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]),
        }
    );
    let command = launcher.command();
    assert_eq!(command.get_program(), "/usr/bin/qemu-aarch64");
    let args: Vec<_> = command.get_args().collect();
    assert_eq!(
        args,
        ["-L", "/usr/aarch64-linux-gnu", "/dist/relax-rpc-server"]
    );
}

#[test]
fn an_unrecognised_host_command_line_falls_back_to_running_directly() {
    let server = PathBuf::from("/dist/relax-rpc-server");
    let launcher = launcher(
        server.clone(),
        Some(PathBuf::from("/usr/bin/other")),
        Some(command_line(&["other", "--different"])),
        &arguments(&["/dist/relax-rpc-server", "--port", "9091"]),
    );
    assert!(launcher.prefix.is_empty());
    let launcher = launcher_without_proc(server);
    assert!(launcher.prefix.is_empty());
}

fn launcher_without_proc(server: PathBuf) -> Launcher {
    launcher(server, None, None, &arguments(&["relax-rpc-server"]))
}

#[test]
fn exits_are_explained_with_the_signal_named() {
    assert!(explain(ExitStatus::from_raw(0)).is_ok());
    let limit = explain(ExitStatus::from_raw(i32::from(session::BROKE_A_LIMIT) << 8)).unwrap_err();
    assert!(limit.contains("limit"), "{limit}");
    let aborted = explain(ExitStatus::from_raw(libc::SIGABRT)).unwrap_err();
    assert!(aborted.contains("signal 6 (SIGABRT)"), "{aborted}");
}
