//! Processes the tests run: `redis-server` on a free loopback port, and the
//! `weir-rls` binary. Both are stopped when dropped. Without `redis-server` on PATH
//! a test that needs one fails with a message saying how to install it.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A guard against a process that never starts, with room for a loaded machine
/// (not a timing claim).
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// `name` on PATH, or a panic saying how to install it.
pub fn binary(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|dir| dir.join(name)).find(|p| p.is_file()));
    found.unwrap_or_else(|| {
        panic!(
            "`{name}` is not on PATH: this test runs weir-rls against a real Redis server. Install it with \
             `apt-get install redis-server` (Debian/Ubuntu, as root), or run `.ci/redis-server install` from the \
             repository root, then run the tests again."
        )
    })
}

/// A port free now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free loopback port")
}

/// A fresh directory for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "weir-rls-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// Sends `SIGSTOP`, `SIGCONT`, `SIGHUP`... to `pid`.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill").arg(signal).arg(pid.to_string()).status().expect("run kill");
    assert!(status.success(), "kill {signal} {pid} failed");
}

/// One `redis-server`, without persistence, on a free loopback port.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
    paused: bool,
}

impl RedisServer {
    /// Starts one and waits until it answers.
    pub fn start() -> Self {
        let redis = binary("redis-server");
        for _ in 0..10 {
            let port = free_port();
            let dir = temp_dir(&format!("redis-{port}"));
            let child = Command::new(&redis)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start redis-server");
            let mut server = Self { child, port, dir, paused: false };
            if server.wait_ready() {
                return server;
            }
        }
        panic!("no redis-server started on 10 free ports");
    }

    /// Whether it answers `PING` on its port (false: it exited, a port taken).
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if self.command("PING").as_deref() == Some("+PONG") {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server on port {} did not answer within {START_TIMEOUT:?}", self.port);
    }

    /// One inline command; its first reply line, or `None` without an answer
    /// within 1 s.
    pub fn command(&self, command: &str) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        stream.write_all(format!("{command}\r\n").as_bytes()).ok()?;
        let mut reply = Vec::new();
        let mut buffer = [0u8; 1024];
        while !reply.ends_with(b"\r\n") {
            let read = stream.read(&mut buffer).ok()?;
            if read == 0 {
                break;
            }
            reply.extend_from_slice(&buffer[..read]);
        }
        String::from_utf8_lossy(&reply).lines().next().map(str::to_owned)
    }

    /// `INFO <section>`: the whole reply, or `None` without an answer within 1 s.
    pub fn info(&self, section: &str) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        stream.write_all(format!("INFO {section}\r\n").as_bytes()).ok()?;
        // `$<length>\r\n<length bytes>\r\n`
        let mut reply = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            if let Some(end) = reply.windows(2).position(|w| w == b"\r\n") {
                let length: usize = String::from_utf8_lossy(&reply[1..end]).parse().ok()?;
                if reply.len() >= end + 2 + length {
                    return Some(String::from_utf8_lossy(&reply[end + 2..end + 2 + length]).into_owned());
                }
            }
            let read = stream.read(&mut buffer).ok()?;
            if read == 0 {
                return None;
            }
            reply.extend_from_slice(&buffer[..read]);
        }
    }

    /// How many times the server has run `command` (`INFO commandstats`'s
    /// `calls`; 0 for a command it has not run).
    pub fn calls(&self, command: &str) -> u64 {
        let stats = self.info("commandstats").expect("INFO commandstats answered");
        let prefix = format!("cmdstat_{}:calls=", command.to_ascii_lowercase());
        stats
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |calls| calls.parse().expect("a number of calls"))
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Freezes it (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&mut self) {
        signal(self.child.id(), "-STOP");
        self.paused = true;
    }

    /// Thaws it (SIGCONT).
    pub fn resume(&mut self) {
        signal(self.child.id(), "-CONT");
        self.paused = false;
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.paused {
            self.resume();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `weir-rls` process on free loopback ports.
#[derive(Debug)]
pub struct WeirRls {
    child: Option<Child>,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    log: PathBuf,
}

impl WeirRls {
    /// Starts the binary with `--config config` and `args`, and waits until its
    /// `/healthcheck` answers 200.
    pub fn start(config: &Path, args: &[&str]) -> Self {
        let (grpc, http) = (free_port(), free_port());
        let log = config.with_extension(format!("{grpc}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_weir-rls"))
            .arg("--config")
            .arg(config)
            .args(["--grpc-addr", &format!("127.0.0.1:{grpc}"), "--http-addr", &format!("127.0.0.1:{http}")])
            .args(args)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("a log file"))
            .spawn()
            .expect("start weir-rls");
        let mut rls = Self {
            child: Some(child),
            grpc: SocketAddr::from(([127, 0, 0, 1], grpc)),
            http: SocketAddr::from(([127, 0, 0, 1], http)),
            log,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(Ok(Some(status))) = rls.child.as_mut().map(Child::try_wait) {
                panic!("weir-rls exited at start ({status}): {}", rls.log());
            }
            if http_get(rls.http, "/healthcheck").is_some_and(|(status, _)| status == 200) {
                return rls;
            }
            assert!(Instant::now() < deadline, "weir-rls did not start: {}", rls.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("running")
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        signal(child.id(), "-TERM");
        child.wait().expect("wait for weir-rls")
    }
}

impl Drop for WeirRls {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `GET path` over HTTP/1.1: the status and body, or `None` without an answer.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    http(addr, "GET", path, b"")
}

/// One HTTP/1.1 request: the status and body, or `None` without an answer within
/// 10 s.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let head =
        format!("{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
    stream.write_all(head.as_bytes()).ok()?;
    stream.write_all(body).ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.get(9..12)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| b.to_owned());
    Some((status, body))
}
