//! The server binary run for a test, and a client of TVM's RPC protocol written from
//! its wire format (TVM's `rpc_endpoint.cc`, `minrpc/rpc_reference.h`), so that a test
//! can send what TVM's own client never would (a huge message, a trickled handshake).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const RPC_MAGIC: i32 = 0xFF271;
pub const RPC_MISMATCH: i32 = 0xFF273;
/// TVM's RPC protocol version (`kRPCProtocolVer` of TVM 0.27).
const PROTOCOL_VERSION: &str = "0.8.0";
const INIT_SERVER: i32 = 2;
const CALL_FUNCTION: i32 = 3;
const RETURN: i32 = 4;
const EXCEPTION: i32 = 5;
const GET_GLOBAL_FUNCTION: i32 = 9;
const OPAQUE_POINTER: i32 = 4;
const RAW_STRING: i32 = 8;
const BYTES: i32 = 9;

/// The server binary, running with its output collected; killed when dropped.
pub struct Server {
    child: Child,
    /// The server's work dir (unless the test gave one).
    _work_dir: tempfile::TempDir,
    output: Arc<Mutex<String>>,
    pub address: String,
}

impl Server {
    /// Starts `relax-rpc-server --port 0 ARGS` (with `env`, without the test's own
    /// RELAX_RPC_TOKEN, and in a work dir of its own unless ARGS give one) and waits
    /// until it listens.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Server {
        let work_dir = tempfile::tempdir().unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_relax-rpc-server"));
        command.args(["--port", "0"]).args(args);
        if !args.contains(&"--work-dir") {
            command.arg("--work-dir").arg(work_dir.path());
        }
        command
            .env_remove("RELAX_RPC_TOKEN")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("starting relax-rpc-server");
        let output = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        {
            let output = Arc::clone(&output);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    let mut output = output.lock().unwrap();
                    output.push_str(&line);
                    output.push('\n');
                }
            });
        }
        let mut server = Server {
            child,
            _work_dir: work_dir,
            output,
            address: String::new(),
        };
        let line = server.wait_for("listening on ", 60);
        server.address = line
            .split("listening on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .map(|address| address.trim_end_matches(',').to_string())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        server
    }

    pub fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// Waits until a line of the output contains `text` and returns it (panics with the
    /// output after `seconds`, or when the server exits).
    pub fn wait_for(&mut self, text: &str, seconds: u64) -> String {
        let started = Instant::now();
        loop {
            if let Some(line) = self.output().lines().find(|line| line.contains(text)) {
                return line.to_string();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                std::thread::sleep(Duration::from_millis(200));
                panic!(
                    "the server exited ({status}) before printing {text:?}:\n{}",
                    self.output()
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(seconds),
                "no {text:?} after {seconds} s:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A connection to the server, reads bounded by `seconds`.
    pub fn connect(&self, seconds: u64) -> TcpStream {
        let stream = TcpStream::connect(&self.address).expect("connecting to the server");
        stream
            .set_read_timeout(Some(Duration::from_secs(seconds)))
            .unwrap();
        stream
    }

    /// A client that completed the handshake with `key` and the session's init.
    pub fn session(&self, key: &str) -> Client {
        let mut stream = self.connect(30);
        assert_eq!(
            hello(&mut stream, key),
            RPC_MAGIC,
            "the server refused `{key}`"
        );
        let mut client = Client { stream };
        client.init().expect("the session's init");
        client
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends TVM's client handshake with `key` and returns the server's answer code (and,
/// for RPC_MAGIC, reads the server's key after it).
pub fn hello(stream: &mut TcpStream, key: &str) -> i32 {
    let mut bytes = RPC_MAGIC.to_le_bytes().to_vec();
    bytes.extend((key.len() as i32).to_le_bytes());
    bytes.extend(key.as_bytes());
    stream.write_all(&bytes).unwrap();
    let code = read_i32(stream);
    if code == RPC_MAGIC {
        let length = read_i32(stream);
        let mut server_key = vec![0u8; length as usize];
        stream.read_exact(&mut server_key).unwrap();
    }
    code
}

fn read_i32(stream: &mut impl Read) -> i32 {
    let mut bytes = [0u8; 4];
    stream
        .read_exact(&mut bytes)
        .expect("the server's answer to the handshake");
    i32::from_le_bytes(bytes)
}

/// An argument of a call.
pub enum Argument<'a> {
    Text(&'a str),
    Bytes(&'a [u8]),
}

/// What the server answered.
#[derive(Debug)]
pub enum Answer {
    /// A return: its first value's type index and 8 bytes (when it has any).
    Return(i32, u64),
    /// An exception's text.
    Exception(String),
}

/// A session with the server, after the handshake.
pub struct Client {
    pub stream: TcpStream,
}

impl Client {
    /// The message starting a session (TVM's `InitRemoteSession`, no constructor).
    pub fn init(&mut self) -> std::io::Result<Answer> {
        let mut body = INIT_SERVER.to_le_bytes().to_vec();
        body.extend((PROTOCOL_VERSION.len() as u64).to_le_bytes());
        body.extend(PROTOCOL_VERSION.as_bytes());
        body.extend(0i32.to_le_bytes());
        self.exchange(&body)
    }

    /// The handle of the server's global function `name`.
    pub fn function(&mut self, name: &str) -> u64 {
        let mut body = GET_GLOBAL_FUNCTION.to_le_bytes().to_vec();
        body.extend(pack(&[Argument::Text(name)]));
        match self.exchange(&body).expect("asking for a function") {
            Answer::Return(OPAQUE_POINTER, handle) if handle != 0 => handle,
            other => panic!("the server has no `{name}`: {other:?}"),
        }
    }

    /// Calls the function of `handle` with `arguments`.
    pub fn call(&mut self, handle: u64, arguments: &[Argument<'_>]) -> std::io::Result<Answer> {
        let mut body = CALL_FUNCTION.to_le_bytes().to_vec();
        body.extend(handle.to_le_bytes());
        body.extend(pack(arguments));
        self.exchange(&body)
    }

    /// Calls the global function `name`.
    pub fn call_global(
        &mut self,
        name: &str,
        arguments: &[Argument<'_>],
    ) -> std::io::Result<Answer> {
        let handle = self.function(name);
        self.call(handle, arguments)
    }

    /// Sends a message whose body is `body` and reads the answer.
    pub fn exchange(&mut self, body: &[u8]) -> std::io::Result<Answer> {
        let mut message = (body.len() as u64).to_le_bytes().to_vec();
        message.extend_from_slice(body);
        self.stream.write_all(&message)?;
        self.answer()
    }

    /// Reads one answer.
    pub fn answer(&mut self) -> std::io::Result<Answer> {
        let mut header = [0u8; 8];
        self.stream.read_exact(&mut header)?;
        let mut body = vec![0u8; u64::from_le_bytes(header) as usize];
        self.stream.read_exact(&mut body)?;
        let code = i32::from_le_bytes(body[0..4].try_into().unwrap());
        let count = i32::from_le_bytes(body[4..8].try_into().unwrap());
        let type_index = if count > 0 {
            i32::from_le_bytes(body[8..12].try_into().unwrap())
        } else {
            0
        };
        match code {
            EXCEPTION => {
                assert_eq!(type_index, RAW_STRING);
                Ok(Answer::Exception(
                    String::from_utf8_lossy(&body[20..]).into_owned(),
                ))
            }
            RETURN => {
                let value = body
                    .get(12..20)
                    .map(|bytes| u64::from_le_bytes(bytes.try_into().unwrap()))
                    .unwrap_or(0);
                Ok(Answer::Return(type_index, value))
            }
            other => panic!("an answer of code {other}"),
        }
    }
}

/// TVM's packed argument sequence.
fn pack(arguments: &[Argument<'_>]) -> Vec<u8> {
    let mut bytes = (arguments.len() as i32).to_le_bytes().to_vec();
    for argument in arguments {
        let (type_index, data) = match argument {
            Argument::Text(text) => (RAW_STRING, text.as_bytes()),
            Argument::Bytes(data) => (BYTES, *data),
        };
        bytes.extend(type_index.to_le_bytes());
        bytes.extend((data.len() as u64).to_le_bytes());
        bytes.extend_from_slice(data);
    }
    bytes
}

/// Whether `folder` holds any session folder or lock file.
pub fn session_folders(folder: &Path) -> Vec<String> {
    std::fs::read_dir(folder)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("relax-rpc-session-"))
        .collect()
}
