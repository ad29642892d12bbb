//! The board workflow on this machine: TVM's tracker (`cargo relax tracker`),
//! relax-rpc-server built for aarch64, bundled by `cargo relax bundle` and run under
//! qemu-user (which shares the host's loopback), and `cargo relax bench --rpc` timing a
//! fixture's model on it; the same server built for the host; and the errors of each.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use relax_cargo_tests::{
    assert_success, cargo, cargo_relax, fixture, fixture_target_dir, line_after, run_under_qemu,
    stderr, stdout, workspace_root, IsolatedApp, CROSS_LINKER,
};

const AARCH64: &str = "aarch64-unknown-linux-gnu";

/// A background process (and the processes it started), killed when dropped; its
/// output goes to a file.
struct Running {
    child: Child,
    log: PathBuf,
}

impl Running {
    fn start(command: &mut Command, log: PathBuf) -> Running {
        let file = File::create(&log).expect("creating the log");
        let child = command
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|error| panic!("starting {command:?}: {error}"));
        Running { child, log }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the output contains `text` (panics with the output after `seconds`).
    fn wait_for(&mut self, text: &str, seconds: u64) {
        let started = Instant::now();
        while !self.output().contains(text) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "exited ({status}) before printing {text:?}:\n{}",
                    self.output()
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(seconds),
                "no {text:?} after {seconds} s:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // The whole group: `cargo run` and the tracker's own worker process too. (`--`
        // first: procps' kill reads `-KILL -PGID` otherwise as options, and kills all.)
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

/// The sessions a server's log shows started, and ended (normally or not).
fn sessions(log: &str) -> (usize, usize) {
    let lines: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("relax-rpc-server: session with"))
        .collect();
    let ended = lines
        .iter()
        .filter(|line| line.contains(" ended after ") || line.contains(" failed: "))
        .count();
    (lines.len() - ended, ended)
}

/// Waits until `device`'s sessions (started, ended) satisfy `done`; false if
/// `client_ended` (the client whose sessions they are) says so first.
fn wait_for_sessions(
    device: &mut Running,
    done: impl Fn((usize, usize)) -> bool,
    client_ended: impl Fn() -> bool,
) -> bool {
    let started = Instant::now();
    while !done(sessions(&device.output())) {
        if client_ended() {
            return done(sessions(&device.output()));
        }
        if let Ok(Some(status)) = device.child.try_wait() {
            panic!("the device exited ({status}):\n{}", device.output());
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "the device's sessions did not come after 900 s:\n{}",
            device.output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Kills `device` (a board losing power) and returns its output.
fn kill(device: Running) -> String {
    let log = device.log.clone();
    drop(device);
    std::fs::read_to_string(log).unwrap_or_default()
}

/// The output of a tuning run that ended before the device's sessions came.
fn ended_early(tuning: std::thread::ScopedJoinHandle<'_, std::process::Output>) -> ! {
    let output = tuning.join().unwrap();
    panic!(
        "the tuning run ended before the device's sessions came:\n{}{}",
        stdout(&output),
        stderr(&output)
    );
}

fn tracker(port: u16, logs: &Path) -> Running {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()));
    command
        .current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", fixture_target_dir())
        .args([
            "run",
            "--quiet",
            "-p",
            "cargo-relax",
            "--",
            "relax",
            "tracker",
            "--port",
            &port.to_string(),
        ]);
    let mut tracker = Running::start(&mut command, logs.join("tracker.log"));
    tracker.wait_for("tracker listening on 127.0.0.1", 300);
    tracker
}

fn bench(args: &[&str]) -> std::process::Output {
    let manifest = fixture("nn-mlp").join("Cargo.toml");
    let mut all = vec!["bench", "--manifest-path", manifest.to_str().unwrap()];
    all.extend_from_slice(args);
    cargo_relax(&all, &[])
}

/// The table rows of `output` for the fixture's two functions, checked: `runs` runs of
/// `[4,8]` inputs with positive times.
fn assert_table(output: &str, heading: &str, runs: &str) {
    assert!(output.contains(heading), "no {heading:?} in:\n{output}");
    for function in ["embed", "forward"] {
        let row: Vec<&str> = output
            .lines()
            .map(str::split_whitespace)
            .map(Iterator::collect::<Vec<_>>)
            .find(|row| row.first() == Some(&function))
            .unwrap_or_else(|| panic!("no row for `{function}` in:\n{output}"));
        assert_eq!(row[1..3], ["[4,8]", runs], "{output}");
        let times: Vec<f64> = row[3..].iter().map(|time| time.parse().unwrap()).collect();
        assert!(
            times[1] > 0.0 && times[1] <= times[0] && times[0] <= times[2],
            "{output}"
        );
    }
}

/// The bundled aarch64 server under qemu, registered with the tracker on 19190 as
/// `qemu-board`.
fn qemu_device(server: &Path, log: PathBuf) -> Running {
    let mut device = Running::start(
        Command::new("qemu-aarch64")
            .args(["-L", "/usr/aarch64-linux-gnu"])
            .arg(server)
            .args([
                "--host",
                "127.0.0.1",
                "--port",
                "19091",
                "--tracker",
                "127.0.0.1:19190",
                "--key",
                "qemu-board",
            ])
            .env_remove("RELAX_RUNTIME_DIR")
            .stdin(Stdio::null()),
        log,
    );
    device.wait_for(
        "registered with the tracker at 127.0.0.1:19190 as `qemu-board`",
        120,
    );
    device
}

#[test]
fn an_aarch64_device_server_under_qemu_times_a_model_through_the_tracker() {
    let logs = tempfile::tempdir().unwrap();
    let build = cargo(
        workspace_root(),
        &[
            "build",
            "--release",
            "--target",
            AARCH64,
            "-p",
            "relax-rpc-server",
        ],
        &[],
    );
    assert_success(&build, "the aarch64 build of relax-rpc-server");
    let dist = logs.path().join("dist");
    let bundled = cargo_relax(
        &[
            "bundle",
            "-p",
            "relax-rpc-server",
            "--target",
            AARCH64,
            "--release",
            "--out",
            dist.to_str().unwrap(),
        ],
        &[],
    );
    assert_success(&bundled, "cargo relax bundle -p relax-rpc-server");
    let server = dist.join(format!("relax-rpc-server-{AARCH64}/relax-rpc-server"));

    let mut tracker = tracker(19190, logs.path());
    let device = qemu_device(&server, logs.path().join("device.log"));
    tracker.wait_for("device `qemu-board` at 127.0.0.1:19091 registered", 30);

    let timed = bench(&[
        "--rpc",
        "127.0.0.1:19190:qemu-board",
        "--target",
        AARCH64,
        "--dim",
        "batch=4",
        "--repeat",
        "5",
    ]);
    assert_success(&timed, "cargo relax bench --rpc on the aarch64 device");
    assert_table(
        &stdout(&timed),
        &format!("model `tiny_mlp` on device `qemu-board` via 127.0.0.1:19190 (target {AARCH64})"),
        "5",
    );

    // A key no device registered: refused after --wait, naming the devices there are.
    let wrong_key = bench(&[
        "--rpc",
        "127.0.0.1:19190:no-such-board",
        "--target",
        AARCH64,
        "--wait",
        "2",
    ]);
    assert!(!wrong_key.status.success());
    let message = stderr(&wrong_key);
    for part in [
        "no device of key `no-such-board`",
        "within 2 s",
        "`qemu-board`",
        "--wait SECONDS",
    ] {
        assert!(message.contains(part), "{part:?} in:\n{message}");
    }

    // The host's build of the model, sent to the aarch64 device.
    let wrong_target = bench(&["--rpc", "127.0.0.1:19190:qemu-board", "--dim", "batch=4"]);
    assert!(!wrong_target.status.success());
    let message = stderr(&wrong_target);
    assert!(
        message.contains("is x86-64 code, but this process runs on AArch64"),
        "{message}"
    );
    // The device served every session and is still offered.
    tracker.wait_for("device `qemu-board` at 127.0.0.1:19091 registered", 30);
    assert!(
        device.output().matches("session with").count() >= 2,
        "{}",
        device.output()
    );

    tuning_on_the_device_gives_records_the_next_aarch64_build_applies(device, &server, logs.path());
}

/// A copy of the two-models fixture whose `double` may be tuned, with a third model,
/// `scale` (64x256 values, so that its task has several schedules to measure).
fn tunable_two_models(name: &str) -> IsolatedApp {
    let app = IsolatedApp::new("two-models", name);
    let manifest = app.manifest();
    let text = std::fs::read_to_string(&manifest).unwrap();
    let tuned = text.replace(
        "entry = \"Double\"",
        "entry = \"Double\"\ntune = { trials = 2 }",
    );
    let with_scale = format!(
        "{tuned}\n[package.metadata.relax.models.scale]\nsource = \"models/scale.py\"\n\
         entry = \"Scale\"\ntune = {{ trials = 4 }}\n"
    );
    std::fs::write(&manifest, with_scale).unwrap();
    std::fs::write(
        app.dir.join("models/scale.py"),
        r#"from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class Scale:
    @R.function
    def apply(x: R.Tensor((64, 256), "float32")) -> R.Tensor((64, 256), "float32"):
        return R.add(R.multiply(x, R.const(2.0, "float32")), R.const(1.0, "float32"))
"#,
    )
    .unwrap();
    app
}

/// `cargo relax tune --target aarch64 --rpc` on the device above. First `scale`, the
/// device killed in the middle of the first candidate's measurement and started again as
/// a supervisor would: the run reports the failed candidate and goes on. Then a few
/// trials of `double`: the records go to the aarch64 folder, change the aarch64 build's
/// key (the build applies them), and the tuned build under qemu prints what the native
/// build prints.
fn tuning_on_the_device_gives_records_the_next_aarch64_build_applies(
    device: Running,
    server: &Path,
    logs: &Path,
) {
    let app = tunable_two_models("rpc-tuning");
    let tune = |model: &str| {
        app.cargo_relax(&[
            "tune",
            "--model",
            model,
            "--target",
            AARCH64,
            "--rpc",
            "127.0.0.1:19190:qemu-board",
        ])
    };
    let before = sessions(&device.output());
    let (interrupted, device) = std::thread::scope(|scope| {
        let tuning = scope.spawn(|| tune("scale"));
        // Session 1 asks the device's core count; session 2 measures the first
        // candidate: the device is killed while it is in flight.
        let mut device = device;
        if !wait_for_sessions(
            &mut device,
            |(started, _)| started >= before.0 + 2,
            || tuning.is_finished(),
        ) {
            ended_early(tuning);
        }
        let output = kill(device);
        assert_eq!(
            sessions(&output),
            (before.0 + 2, before.1 + 1),
            "the measurement was in flight when the device was killed:\n{output}"
        );
        let restarted = qemu_device(server, logs.join("device-restarted.log"));
        (tuning.join().unwrap(), restarted)
    });
    assert_success(
        &interrupted,
        "cargo relax tune --model scale, the device killed once",
    );
    let log = format!("{}{}", stdout(&interrupted), stderr(&interrupted));
    for part in [
        "a candidate failed to run on device `qemu-board`; tuning goes on",
        "candidates failed (each is recorded as failed, and the search went on without it)",
        // The other candidates, and the default schedule they must beat, were timed on
        // the restarted device.
        ": tuned",
    ] {
        assert!(log.contains(part), "{part:?} in:\n{log}");
    }
    let (_, ended) = sessions(&device.output());
    assert!(ended >= 2, "{}", device.output());
    assert!(!app
        .dir
        .join(".relax/tuning/scale")
        .join(AARCH64)
        .join("unfinished")
        .exists());

    let key = |app: &IsolatedApp| {
        let info = app.cargo_relax(&["info", "--target", AARCH64]);
        assert_success(&info, "cargo relax info --target aarch64");
        line_after(&stdout(&info), "model `double`: input key ").to_string()
    };
    let untuned = key(&app);
    let before = sessions(&device.output());
    let tuning = tune("double");
    assert_success(
        &tuning,
        "cargo relax tune --model double --target aarch64 --rpc",
    );
    let log = format!("{}{}", stdout(&tuning), stderr(&tuning));
    // Candidates, and the default schedule they must beat, were timed on the device.
    assert!(log.contains("relax-build: task `multiply`: tuned"), "{log}");
    let (_, ended) = sessions(&device.output());
    assert!(ended >= before.1 + 3, "{}", device.output());
    let records = app.dir.join(".relax/tuning/double").join(AARCH64);
    for file in ["database_workload.json", "database_tuning_record.json"] {
        assert!(records.join(file).is_file(), "{file} written");
    }
    assert!(
        !records.join("unfinished").exists(),
        "a finished run leaves no unfinished database"
    );
    assert!(!app
        .dir
        .join(".relax/tuning/double/x86_64-unknown-linux-gnu")
        .exists());
    assert_ne!(
        key(&app),
        untuned,
        "the records are part of the aarch64 build's key"
    );

    let env = [
        ("RELAX_PYTHON", app.python.wrapper.to_str().unwrap()),
        ("RELAX_CACHE_DIR", app.cache_dir.to_str().unwrap()),
        CROSS_LINKER,
    ];
    let build = cargo(&app.dir, &["build", "--release", "--target", AARCH64], &env);
    assert_success(&build, "the tuned aarch64 build");
    let executable = fixture_target_dir()
        .join(AARCH64)
        .join("release/fixture-two-models-rpc-tuning");
    let emulated = run_under_qemu(&executable, &[], app.temp());
    assert_success(&emulated, "the tuned aarch64 build under qemu");
    let native = app.cargo(&["run", "--quiet", "--release"]);
    assert_success(&native, "the native build");
    assert_eq!(stdout(&emulated), stdout(&native));
}

#[test]
fn the_host_build_of_the_server_serves_the_host_s_models_directly() {
    let logs = tempfile::tempdir().unwrap();
    let build = cargo(
        workspace_root(),
        &["build", "--release", "-p", "relax-rpc-server"],
        &[],
    );
    assert_success(&build, "the host build of relax-rpc-server");
    let server = fixture_target_dir().join("release/relax-rpc-server");
    let mut device = Running::start(
        Command::new(&server).args(["--host", "127.0.0.1", "--port", "19092"]),
        logs.path().join("device.log"),
    );
    device.wait_for("listening on 127.0.0.1:19092", 60);

    let timed = bench(&[
        "--rpc",
        "127.0.0.1:19092",
        "--dim",
        "batch=4",
        "--repeat",
        "7",
    ]);
    assert_success(&timed, "cargo relax bench --rpc on the host's server");
    let host =
        String::from_utf8(Command::new("rustc").arg("-vV").output().unwrap().stdout).unwrap();
    let host = host
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .unwrap()
        .to_string();
    assert_table(
        &stdout(&timed),
        &format!("model `tiny_mlp` on device 127.0.0.1:19092 (target {host})"),
        "7",
    );

    // A second server on the same port, and one whose tracker is not there.
    let taken = Command::new(&server)
        .args(["--host", "127.0.0.1", "--port", "19092"])
        .output()
        .unwrap();
    assert!(!taken.status.success());
    assert!(
        stderr(&taken).contains(
            "port 19092 on 127.0.0.1 is in use (another server?): choose another with --port"
        ),
        "{}",
        stderr(&taken)
    );
    let lost = Command::new(&server)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--tracker",
            "127.0.0.1:1",
            "--key",
            "board",
        ])
        .output()
        .unwrap();
    assert!(!lost.status.success());
    let message = stderr(&lost);
    assert!(
        message.contains("cannot reach the tracker at 127.0.0.1:1")
            && message.contains("cargo relax tracker"),
        "{message}"
    );
    // No server at all.
    let nobody = bench(&["--rpc", "127.0.0.1:1", "--dim", "batch=4"]);
    assert!(!nobody.status.success());
    assert!(
        stderr(&nobody).contains("cannot connect to the device at 127.0.0.1:1"),
        "{}",
        stderr(&nobody)
    );

    tuning_stops_when_the_device_does_not_come_back_and_resumes_when_it_does(
        &server,
        logs.path(),
        &host,
    );
}

/// A host tuning run through a tracker whose only device leaves after the first session
/// and does not come back within `--wait`: the run stops with an error naming the key,
/// keeps what it measured in the unfinished database (which builds do not apply), and the
/// same command, with the device back, resumes and finishes.
fn tuning_stops_when_the_device_does_not_come_back_and_resumes_when_it_does(
    server: &Path,
    logs: &Path,
    host: &str,
) {
    let _tracker = tracker(19193, logs);
    let start_device = |log: &str| {
        let mut device = Running::start(
            Command::new(server).args([
                "--host",
                "127.0.0.1",
                "--port",
                "19094",
                "--tracker",
                "127.0.0.1:19193",
                "--key",
                "host-board",
            ]),
            logs.join(log),
        );
        device.wait_for("as `host-board`", 60);
        device
    };
    let app = tunable_two_models("rpc-host-tuning");
    let tune = [
        "tune",
        "--model",
        "double",
        "--rpc",
        "127.0.0.1:19193:host-board",
        "--wait",
        "5",
        "--trials",
        "2",
    ];
    let device = start_device("host-device.log");
    let stopped = std::thread::scope(|scope| {
        let tuning = scope.spawn(|| app.cargo_relax(&tune));
        // Session 1 asks the device's core count; the device leaves after it.
        let mut device = device;
        if !wait_for_sessions(
            &mut device,
            |(_, ended)| ended >= 1,
            || tuning.is_finished(),
        ) {
            ended_early(tuning);
        }
        kill(device);
        tuning.join().unwrap()
    });
    assert!(!stopped.status.success());
    let message = stderr(&stopped);
    for part in [
        "the device left during tuning: no device of key `host-board`",
        "within 5 s (the devices it knows: none)",
        "the same `cargo relax tune` command resumes from them",
    ] {
        assert!(message.contains(part), "{part:?} in:\n{message}");
    }
    let records = app.dir.join(".relax/tuning/double").join(host);
    assert!(records.join("unfinished").is_dir(), "{message}");
    assert!(
        !records.join("database_tuning_record.json").exists(),
        "an unfinished run's records are not applied"
    );

    let _device = start_device("host-device-back.log");
    let resumed = app.cargo_relax(&tune);
    assert_success(&resumed, "the same tune command with the device back");
    assert!(records.join("database_tuning_record.json").is_file());
    assert!(!records.join("unfinished").exists());
}
