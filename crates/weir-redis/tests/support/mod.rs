//! Test fixture: real `redis-server` processes on free loopback ports, stopped when
//! dropped. Without `redis-server` on PATH every test that needs one fails with a
//! message saying how to install it; none passes silently.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to start answering: a guard against a server that
/// never starts, with room for a loaded machine (not a timing claim).
const START_TIMEOUT: Duration = Duration::from_secs(30);

fn binary(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|dir| dir.join(name)).find(|p| p.is_file()));
    match found {
        Some(path) => path,
        None => panic!(
            "`{name}` is not on PATH: the weir-redis tests run against a real Redis server. Install it with \
             `apt-get install redis-server` (Debian/Ubuntu, as root), or run `.ci/redis-server install` from the \
             repository root, then run the tests again."
        ),
    }
}

/// Connection options for a test that needs Redis's answers, not its timeouts:
/// a call timeout (10 s) that a healthy loopback server meets on any loaded
/// machine, where the default (100 ms) may run out while the test's process or
/// the server waits for a core. Tests of timeouts set their own.
pub fn patient() -> weir_redis::RedisOptions {
    weir_redis::RedisOptions::builder().call_timeout(Duration::from_secs(10)).build().expect("options")
}

/// A connection with `options`, for the tests of timeouts, whose call timeout a
/// loaded machine may miss: the connection's first ping is retried (up to 10
/// tries), so a test's process or the server waiting for a core once does not
/// fail the test before it starts.
pub async fn connect_retrying(url: &str, options: weir_redis::RedisOptions) -> weir_redis::Redis {
    for _ in 0..9 {
        if let Ok(redis) = weir_redis::Redis::connect_with(url, options.clone()).await {
            return redis;
        }
    }
    weir_redis::Redis::connect_with(url, options).await.expect("connect")
}

/// A free loopback port (and, for cluster nodes, `port + 10000` free too).
fn free_port(with_bus: bool) -> u16 {
    for _ in 0..100 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("local address").port();
        if !with_bus {
            return port;
        }
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port found");
}

/// One `redis-server` process.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    password: Option<String>,
    extra: Vec<String>,
    dir: PathBuf,
    paused: bool,
    tls: bool,
}

impl RedisServer {
    /// A server without a password.
    pub fn start() -> Self {
        Self::start_on_a_free_port(None)
    }

    /// A server that requires `password` (`--requirepass`).
    pub fn start_with_password(password: &str) -> Self {
        Self::start_on_a_free_port(Some(password))
    }

    /// A server on a port found free, and another one found if that one is
    /// taken before the server binds it (a free port is free only until someone
    /// binds it: another test's server, say).
    fn start_on_a_free_port(password: Option<&str>) -> Self {
        let mut why = Vec::new();
        for _ in 0..10 {
            match Self::try_spawn(free_port(false), password.map(str::to_owned), Vec::new()) {
                Ok(server) => return server,
                Err(e) => why.push(e),
            }
        }
        panic!("no redis-server started on 10 free ports: {why:?}");
    }

    /// A server without a password on `port`, or why it is not ours: it exited
    /// at start, or another server answers there.
    pub fn try_start_on(port: u16) -> Result<Self, String> {
        Self::try_spawn(port, None, Vec::new())
    }

    fn spawn(port: u16, password: Option<String>, extra: Vec<String>) -> Self {
        Self::try_spawn(port, password, extra).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_spawn(port: u16, password: Option<String>, extra: Vec<String>) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("weir-redis-test-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the server's folder");
        let tls = extra.iter().any(|a| a == "--tls-port");
        let mut server = Self { child: None, port, password, extra, dir, paused: false, tls };
        server.launch()?;
        Ok(server)
    }

    /// A server that speaks only TLS, with a certificate for 127.0.0.1 from a test CA
    /// made by `openssl`; returns the server and the CA certificate (PEM).
    pub fn start_tls() -> (Self, Vec<u8>) {
        let port = free_port(false);
        let dir = std::env::temp_dir().join(format!("weir-redis-tls-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the certificate folder");
        let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
        let (ca, ca_key, csr, cert, key, ext) =
            (file("ca.pem"), file("ca.key"), file("server.csr"), file("server.pem"), file("server.key"), file("ext"));
        std::fs::write(&ext, "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n").unwrap();
        let openssl = |args: &[&str]| {
            let status = Command::new(binary("openssl"))
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("run openssl");
            assert!(status.success(), "openssl {args:?} failed");
        };
        // A test CA, and a server certificate for 127.0.0.1 signed by it.
        let ca_args = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=weir test CA"];
        openssl(&[&ca_args[..], &["-keyout", &ca_key, "-out", &ca]].concat());
        openssl(&["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", &key, "-out", &csr]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &ext,
            "-out",
            &cert,
        ]);
        let (cert, key) = (PathBuf::from(cert), PathBuf::from(key));
        let path = |p: &PathBuf| p.to_string_lossy().into_owned();
        let extra = vec![
            "--tls-port".to_owned(),
            port.to_string(),
            "--tls-cert-file".to_owned(),
            path(&cert),
            "--tls-key-file".to_owned(),
            path(&key),
            "--tls-ca-cert-file".to_owned(),
            ca.clone(),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ];
        let pem = std::fs::read(&ca).expect("read the CA certificate");
        let server = Self::spawn(port, None, extra);
        let _ = std::fs::remove_dir_all(&dir);
        (server, pem)
    }

    /// Starts the process and waits until it answers; `Err` (the process
    /// stopped) if it is not the server that answers on the port.
    fn launch(&mut self) -> Result<(), String> {
        let mut command = Command::new(binary("redis-server"));
        // A TLS server listens on its TLS port only.
        let plain_port = if self.tls { 0 } else { self.port };
        command
            .arg("--port")
            .arg(plain_port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(password) = &self.password {
            command.args(["--requirepass", password]);
        }
        self.child = Some(command.spawn().expect("start redis-server"));
        let ready = self.wait_ready();
        if ready.is_err() {
            self.stop();
        }
        ready
    }

    /// Waits (bounded) until the server answers on its port, and checks that
    /// the one answering is this process (by `INFO server`'s `process_id`; a TLS
    /// server, which speaks no plain RESP, by its port accepting connections).
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        let ours = self.child.as_ref().map(Child::id);
        loop {
            if self.tls && TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if !self.tls
                && let Some(pid) = self.answering_pid()
            {
                if Some(pid) == ours {
                    return Ok(());
                }
                return Err(format!(
                    "port {} answers from another redis-server (process {pid}, not {ours:?})",
                    self.port
                ));
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!("redis-server on port {} exited at start: {status}", self.port));
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer within {START_TIMEOUT:?}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The process id of the server answering on the port (`INFO server`), or
    /// `None` if none answers within 1 s.
    fn answering_pid(&self) -> Option<u32> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        let mut request = String::new();
        if let Some(password) = &self.password {
            request.push_str(&format!("AUTH {password}\r\n"));
        }
        request.push_str("INFO server\r\n");
        stream.write_all(request.as_bytes()).ok()?;
        let mut reply = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&reply);
            if let Some(rest) = text.split("process_id:").nth(1)
                && let Some((pid, _)) = rest.split_once("\r\n")
            {
                return pid.parse().ok();
            }
            let read = stream.read(&mut buffer).ok()?;
            if read == 0 {
                return None;
            }
            reply.extend_from_slice(&buffer[..read]);
        }
    }

    /// Sends one inline command over a fresh connection and returns the first reply
    /// line, or `None` if the server does not answer within 1 s.
    pub fn raw_command(&self, command: &str) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        stream.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
        let mut request = String::new();
        if let Some(password) = &self.password {
            request.push_str(&format!("AUTH {password}\r\n"));
        }
        request.push_str(command);
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).ok()?;
        let mut reply = Vec::new();
        let mut buffer = [0u8; 4096];
        let lines_wanted = if self.password.is_some() { 2 } else { 1 };
        while reply.iter().filter(|&&b| b == b'\n').count() < lines_wanted {
            let read = stream.read(&mut buffer).ok()?;
            if read == 0 {
                break;
            }
            reply.extend_from_slice(&buffer[..read]);
        }
        let text = String::from_utf8_lossy(&reply).into_owned();
        let mut lines = text.lines();
        if self.password.is_some() {
            lines.next();
        }
        lines.next().map(str::to_owned)
    }

    /// Runs `redis-cli` against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let mut command = Command::new(binary("redis-cli"));
        command.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        if let Some(password) = &self.password {
            command.args(["--no-auth-warning", "-a", password]);
        }
        let output = command.args(args).output().expect("run redis-cli");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>` (with the password, if any).
    pub fn url(&self) -> String {
        match &self.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let status = Command::new("kill").arg(signal).arg(child.id().to_string()).status().expect("run kill");
            assert!(status.success(), "kill {signal} failed");
        }
    }

    /// Stops the server (SIGKILL: no goodbye to clients) and waits for it to exit.
    pub fn stop(&mut self) {
        if self.paused {
            self.resume();
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        if let Err(e) = self.launch() {
            panic!("the server did not restart on its port: {e}");
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&mut self) {
        self.signal("-STOP");
        self.paused = true;
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&mut self) {
        self.signal("-CONT");
        self.paused = false;
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of three masters on loopback, no replicas.
#[derive(Debug)]
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                let port = free_port(true);
                let extra = vec![
                    "--cluster-enabled".to_owned(),
                    "yes".to_owned(),
                    "--cluster-config-file".to_owned(),
                    format!("nodes-{port}.conf"),
                    "--cluster-node-timeout".to_owned(),
                    "2000".to_owned(),
                ];
                RedisServer::spawn(port, None, extra)
            })
            .collect();
        let addresses: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let output = Command::new(binary("redis-cli"))
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = Self { nodes };
        let deadline = Instant::now() + START_TIMEOUT;
        while !cluster.nodes.iter().all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok")) {
            assert!(Instant::now() < deadline, "the cluster did not reach cluster_state:ok within {START_TIMEOUT:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        cluster
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

/// What a [`FakeRedis`] does with the commands it receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeMode {
    /// Answer every command with `+PONG`.
    Pong,
    /// Answer every command with these raw RESP bytes.
    Reply(Vec<u8>),
    /// Read commands and never answer (a server that hangs).
    Silent,
}

#[derive(Debug)]
struct FakeState {
    mode: FakeMode,
    /// Script calls (`EVALSHA`/`EVAL`) received.
    scripts: usize,
}

/// A fake Redis on a loopback port that speaks just enough RESP to connect, then
/// answers as told: for bad replies and for counting the calls that reach "Redis".
#[derive(Debug, Clone)]
pub struct FakeRedis {
    port: u16,
    state: std::sync::Arc<std::sync::Mutex<FakeState>>,
}

impl FakeRedis {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().unwrap().port();
        let state = std::sync::Arc::new(std::sync::Mutex::new(FakeState { mode: FakeMode::Pong, scripts: 0 }));
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let state = shared.clone();
                std::thread::spawn(move || serve_fake(stream, state));
            }
        });
        Self { port, state }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn set_mode(&self, mode: FakeMode) {
        self.state.lock().unwrap().mode = mode;
    }

    /// Script calls received so far.
    pub fn scripts(&self) -> usize {
        self.state.lock().unwrap().scripts
    }
}

/// Parses whole RESP commands (`*N` arrays of `$len` bulk strings) from the front
/// of `buffer`, returning each command's first word.
fn take_commands(buffer: &mut Vec<u8>) -> Vec<String> {
    fn line(buf: &[u8], at: usize) -> Option<(String, usize)> {
        let end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
        Some((String::from_utf8_lossy(&buf[at..end]).into_owned(), end + 2))
    }
    let mut commands = Vec::new();
    loop {
        let parsed = (|| {
            let (head, mut at) = line(buffer, 0)?;
            let count: usize = head.strip_prefix('*')?.parse().ok()?;
            let mut first = String::new();
            for i in 0..count {
                let (len, next) = line(buffer, at)?;
                let len: usize = len.strip_prefix('$')?.parse().ok()?;
                if buffer.len() < next + len + 2 {
                    return None;
                }
                if i == 0 {
                    first = String::from_utf8_lossy(&buffer[next..next + len]).to_uppercase();
                }
                at = next + len + 2;
            }
            Some((first, at))
        })();
        match parsed {
            Some((first, used)) => {
                buffer.drain(..used);
                commands.push(first);
            }
            None => return commands,
        }
    }
}

fn serve_fake(mut stream: TcpStream, state: std::sync::Arc<std::sync::Mutex<FakeState>>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    // Commands received while silent: answered, in order, once the server speaks
    // again (as a paused server does when it resumes).
    let mut owed = 0usize;
    loop {
        let read = match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        buffer.extend_from_slice(&chunk[..read]);
        for command in take_commands(&mut buffer) {
            let reply = {
                let mut state = state.lock().unwrap();
                if command.starts_with("EVAL") {
                    state.scripts += 1;
                }
                let one = match &state.mode {
                    FakeMode::Pong => b"+PONG\r\n".to_vec(),
                    FakeMode::Reply(bytes) => bytes.clone(),
                    FakeMode::Silent => Vec::new(),
                };
                if one.is_empty() {
                    owed += 1;
                    None
                } else {
                    Some(one.repeat(std::mem::take(&mut owed) + 1))
                }
            };
            if let Some(reply) = reply
                && stream.write_all(&reply).is_err()
            {
                return;
            }
        }
    }
}
