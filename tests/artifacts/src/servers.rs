//! Real database and object-store servers for the node's tests, one of
//! each per test process, started on first use: a PostgreSQL cluster
//! (the system's `initdb` and `postgres`, as the `postgres` user when the
//! tests run as root) and an S3 server (`s3s-fs`), both on loopback.
//! Every test takes a database or a bucket of its own.
//!
//! The servers die with the test process: each is started by a thread
//! that lives as long as the process, with the kernel told to kill it
//! when that thread goes (`PR_SET_PDEATHSIG`), and is stopped and its
//! folder removed when the process exits normally.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// A PostgreSQL cluster of this process's.
pub struct Postgres {
    bin: PathBuf,
    port: u16,
    user: Option<(u32, u32)>,
}

/// An S3 server of this process's.
pub struct S3 {
    port: u16,
    root: PathBuf,
}

const S3_ACCESS_KEY: &str = "rye-test-access";
const S3_SECRET_KEY: &str = "rye-test-secret-key";

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Servers to stop and folders to remove when the process exits.
static STARTED: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());

impl Postgres {
    /// The cluster of this process, started on first use; `Err` says
    /// what is missing where PostgreSQL's programs are not installed
    /// (`RYE_TEST_POSTGRES_BIN`, else the newest
    /// `/usr/lib/postgresql/*/bin`).
    pub fn shared() -> Result<&'static Postgres, String> {
        static CLUSTER: OnceLock<Result<Postgres, String>> = OnceLock::new();
        CLUSTER
            .get_or_init(Postgres::start)
            .as_ref()
            .map_err(Clone::clone)
    }

    fn start() -> Result<Postgres, String> {
        let bin = postgres_bin()?;
        let user = if unsafe { libc::geteuid() } == 0 {
            Some(system_user("postgres")?)
        } else {
            None
        };
        let dir = scratch("pg")?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(|e| format!("chown {}: {e}", dir.display()))?;
        }
        let data = dir.join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .args(["-U", "rye", "--auth=trust", "-E", "UTF8", "--no-sync", "-D"])
            .arg(&data);
        run(as_user(&mut initdb, user), "initdb")?;
        let port = free_port()?;
        let mut server = Command::new(bin.join("postgres"));
        server
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(&dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=300",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("server.log")).map_err(|e| e.to_string())?,
            ));
        as_user(&mut server, user);
        spawn_for_life(server, dir.clone(), "postgres")?;
        wait_for_port(port, "postgres", &dir.join("server.log"))?;
        let cluster = Postgres { bin, port, user };
        // Connections are refused while the server still starts up.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match cluster.psql("postgres", "SELECT 1") {
                Ok(()) => return Ok(cluster),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn psql(&self, database: &str, sql: &str) -> Result<(), String> {
        let mut psql = Command::new(self.bin.join("psql"));
        psql.args([
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-U",
            "rye",
            "-d",
            database,
            "-c",
            sql,
        ]);
        run(as_user(&mut psql, self.user), "psql")
    }

    /// A new, empty database of the cluster's; its URL.
    pub fn database(&self) -> String {
        let name = format!("rye_test_{}", NEXT.fetch_add(1, Ordering::Relaxed));
        self.psql("postgres", &format!("CREATE DATABASE {name}"))
            .expect("creating a test database");
        self.url(&name)
    }

    /// The URL of the cluster's database `name`.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://rye@127.0.0.1:{}/{name}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl S3 {
    /// The S3 server of this process, started on first use; `Err` says
    /// what is missing where `s3s-fs` is not installed
    /// (`RYE_TEST_S3S_FS`, else `s3s-fs` on the `PATH`).
    pub fn shared() -> Result<&'static S3, String> {
        static SERVER: OnceLock<Result<S3, String>> = OnceLock::new();
        SERVER.get_or_init(S3::start).as_ref().map_err(Clone::clone)
    }

    fn start() -> Result<S3, String> {
        let program = match std::env::var_os("RYE_TEST_S3S_FS") {
            Some(path) => PathBuf::from(path),
            None => on_path("s3s-fs").ok_or("no s3s-fs (RYE_TEST_S3S_FS or PATH)")?,
        };
        let root = scratch("s3")?;
        let data = root.join("data");
        std::fs::create_dir(&data).map_err(|e| e.to_string())?;
        let port = free_port()?;
        let mut server = Command::new(program);
        server
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", S3_ACCESS_KEY, "--secret-key", S3_SECRET_KEY])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(root.join("server.log")).map_err(|e| e.to_string())?,
            ));
        spawn_for_life(server, root.clone(), "s3s-fs")?;
        wait_for_port(port, "s3s-fs", &root.join("server.log"))?;
        Ok(S3 { port, root: data })
    }

    /// A new, empty bucket; its name.
    pub fn bucket(&self) -> String {
        let name = format!("rye-test-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        std::fs::create_dir(self.root.join(&name)).expect("creating a test bucket");
        name
    }

    /// Where the server keeps `bucket`'s objects, for tests that damage
    /// them behind the node's back.
    pub fn bucket_dir(&self, bucket: &str) -> PathBuf {
        self.root.join(bucket)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The settings an S3 client needs to reach the server, by the
    /// lower-case names `object_store` takes; as `AWS_*` environment
    /// variables, upper-cased.
    pub fn options(&self) -> Vec<(String, String)> {
        [
            ("aws_endpoint", self.endpoint()),
            ("aws_access_key_id", S3_ACCESS_KEY.to_owned()),
            ("aws_secret_access_key", S3_SECRET_KEY.to_owned()),
            ("aws_region", "us-east-1".to_owned()),
            ("aws_allow_http", "true".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

fn postgres_bin() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("RYE_TEST_POSTGRES_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| "no PostgreSQL (RYE_TEST_POSTGRES_BIN or /usr/lib/postgresql/*/bin)")?
        .filter_map(|e| {
            let e = e.ok()?;
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| "no PostgreSQL server in /usr/lib/postgresql/*/bin".to_owned())
}

/// The user and group ids of the system user `name`.
fn system_user(name: &str) -> Result<(u32, u32), String> {
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(|e| e.to_string())?;
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 3 && f[0] == name)
        .and_then(|f| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
        .ok_or_else(|| format!("running as root, and there is no {name} user to run as"))
}

fn as_user(command: &mut Command, user: Option<(u32, u32)>) -> &mut Command {
    use std::os::unix::process::CommandExt as _;
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
    command
}

fn run(command: &mut Command, what: &str) -> Result<(), String> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// A new folder under the system's temporary folder.
fn scratch(what: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!(
        "rye-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

fn wait_for_port(port: u16, what: &str, log: &Path) -> Result<(), String> {
    let at = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect_timeout(&at, Duration::from_millis(200)).is_err() {
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            return Err(format!("{what} did not listen on {port} in 30 s: {log}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Starts `command` from a thread that lives as long as the process, the
/// kernel told to kill the server when that thread ends; it is stopped
/// and `dir` removed when the process exits.
fn spawn_for_life(mut command: Command, dir: PathBuf, what: &str) -> Result<(), String> {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (sent, started) = mpsc::channel();
    std::thread::Builder::new()
        .name(format!("rye-test-{what}"))
        .spawn(move || {
            let child = command.stdin(Stdio::null()).spawn();
            let ok = child.is_ok();
            let _ = sent.send(child.map(|c| c.id()));
            if ok {
                loop {
                    std::thread::park();
                }
            }
        })
        .map_err(|e| e.to_string())?;
    let pid = started
        .recv()
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("starting {what}: {e}"))?;
    let mut list = STARTED.lock().unwrap_or_else(|e| e.into_inner());
    if list.is_empty() {
        // SAFETY: `stop_all` is an `extern "C" fn()` that never unwinds.
        unsafe { libc::atexit(stop_all) };
    }
    list.push((pid, dir));
    Ok(())
}

extern "C" fn stop_all() {
    let list = std::mem::take(&mut *STARTED.lock().unwrap_or_else(|e| e.into_inner()));
    for (pid, _) in &list {
        // SIGQUIT: PostgreSQL's immediate shutdown; s3s-fs just ends.
        unsafe { libc::kill(*pid as i32, libc::SIGQUIT) };
    }
    for (pid, dir) in list {
        let deadline = Instant::now() + Duration::from_secs(2);
        while !crate::process_gone(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        let _ = std::fs::remove_dir_all(dir);
    }
}
