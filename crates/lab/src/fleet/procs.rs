//! The processes around the fleet: a `nats-server` of its own, and the
//! managers, each a child process (`clarion-lab fleet-manager`, the
//! manager library's service as `clarion manager` runs it), so that its
//! CPU time and memory are its own, read from `/proc`, and `perf record
//! -p PID` profiles it alone.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

/// `nats-server` on PATH, else Debian's `/usr/sbin/nats-server` (a user's
/// PATH may lack /usr/sbin).
pub fn find_nats_server() -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable =
        |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("nats-server"))
            .find(|p| runnable(p))
    });
    on_path.or_else(|| Some(PathBuf::from("/usr/sbin/nats-server")).filter(|p| runnable(p)))
}

/// A child process killed (and reaped) when dropped.
pub struct Guarded(pub Child);

impl Drop for Guarded {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `nats-server` (with JetStream, for shared managers) on a free
/// loopback port, its storage in a temporary directory.
pub struct NatsServer {
    pub process: Guarded,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl NatsServer {
    pub fn start(bin: &Path) -> anyhow::Result<NatsServer> {
        let dir = tempfile::tempdir().context("creating the NATS server's directory")?;
        let mut why = String::new();
        // A port found free can be taken before the server binds it: try another.
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .context("finding a free loopback port")?;
            let child = Command::new(bin)
                .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .with_context(|| format!("cannot run {}", bin.display()))?;
            let mut process = Guarded(child);
            match wait_listening(&mut process.0, port, Duration::from_secs(10)) {
                Ok(()) => {
                    return Ok(NatsServer {
                        process,
                        url: format!("nats://127.0.0.1:{port}"),
                        _dir: dir,
                    })
                }
                Err(e) => why = e,
            }
        }
        bail!(
            "{} did not listen on any of 5 free ports; the last time: {why}",
            bin.display()
        )
    }
}

fn wait_listening(child: &mut Child, port: u16, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            return Err(format!(
                "it exited ({status}) before listening on {port}: {}",
                err.trim()
            ));
        }
        if Instant::now() > deadline {
            return Err(format!("it did not listen on {port} within {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A process's CPU time (user + system, all threads) and memory, from `/proc`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub cpu_s: f64,
    /// Time its threads spent runnable but waiting for a CPU (`schedstat`):
    /// a process held back by the machine, not by its own work.
    pub runq_wait_s: f64,
    pub rss_kb: u64,
    pub peak_rss_kb: u64,
}

pub fn usage(pid: u32) -> Option<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i - 3)?.parse::<u64>().ok();
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let cpu_s = (ticks(14)? + ticks(15)?) as f64 / hz;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mut runq_wait_ns = 0u64;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let s = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
            runq_wait_ns += s
                .split_whitespace()
                .nth(1)
                .and_then(|w| w.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Some(Usage {
        cpu_s,
        runq_wait_s: runq_wait_ns as f64 / 1e9,
        rss_kb: kb("VmRSS:"),
        peak_rss_kb: kb("VmHWM:"),
    })
}

/// The load average over the last minute (`/proc/loadavg`): how busy the machine was.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// This process's CPU time (the generator's: the managers and the server are other processes).
pub fn own_cpu_s() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole rusage into the pointer given, which points to one.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) } == 0;
    if !ok {
        return 0.0;
    }
    // SAFETY: getrusage succeeded, so it filled the struct (zeroed before in any case).
    let ru = unsafe { ru.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// What a manager said of its run (its `ManagerStats`, as `fleet-manager` prints them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManagerFigures {
    pub satisfied: u64,
    pub polls: u64,
    pub poll_timeouts: u64,
    pub decisions: u64,
    pub fired: u64,
    pub partial: u64,
    pub invalid: u64,
    pub refused: u64,
    pub not_owned: u64,
    pub registrations: u64,
}

impl ManagerFigures {
    pub fn from_json(v: &serde_json::Value) -> ManagerFigures {
        let n = |k: &str| v.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
        ManagerFigures {
            satisfied: n("satisfied"),
            polls: n("polls"),
            poll_timeouts: n("poll_timeouts"),
            decisions: n("decisions"),
            fired: n("fired"),
            partial: n("partial"),
            invalid: n("invalid"),
            refused: n("refused"),
            not_owned: n("not_owned"),
            registrations: n("registrations"),
        }
    }

    pub fn add(&mut self, o: &ManagerFigures) {
        self.satisfied += o.satisfied;
        self.polls += o.polls;
        self.poll_timeouts += o.poll_timeouts;
        self.decisions += o.decisions;
        self.fired += o.fired;
        self.partial += o.partial;
        self.invalid += o.invalid;
        self.refused += o.refused;
        self.not_owned += o.not_owned;
        self.registrations += o.registrations;
    }
}

/// A manager child process.
pub struct ManagerProc {
    pub name: String,
    process: Guarded,
}

/// How a manager is started.
pub struct ManagerSpec<'a> {
    pub url: &'a str,
    pub inventory: &'a Path,
    /// Its events file (the first shared manager adds it to the bucket).
    pub events: Option<&'a Path>,
    pub name: &'a str,
    pub shared: bool,
    pub poll_timeout: &'a str,
}

impl ManagerProc {
    pub fn spawn(s: &ManagerSpec) -> anyhow::Result<ManagerProc> {
        let exe = std::env::current_exe().context("finding clarion-lab's own executable")?;
        let mut cmd = Command::new(exe);
        cmd.args([
            "fleet-manager",
            "--nats",
            s.url,
            "--name",
            s.name,
            "--poll-timeout",
            s.poll_timeout,
        ])
        .arg("--inventory")
        .arg(s.inventory);
        if let Some(e) = s.events {
            cmd.arg("--events").arg(e);
        }
        if s.shared {
            cmd.arg("--shared");
        }
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting a manager (clarion-lab fleet-manager)")?;
        Ok(ManagerProc {
            name: s.name.to_string(),
            process: Guarded(child),
        })
    }

    pub fn pid(&self) -> u32 {
        self.process.0.id()
    }

    /// Fails if the manager has exited (it said why on standard error).
    pub fn alive(&mut self) -> anyhow::Result<()> {
        match self.process.0.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => bail!("manager {} exited ({status}); see its message above", self.name),
            Err(e) => Err(anyhow!("manager {}: {e}", self.name)),
        }
    }

    /// Stops the manager (SIGTERM: it decides what is pending and says
    /// goodbye) and reads its figures; killed if it takes over `limit`.
    pub fn stop(mut self, limit: Duration) -> anyhow::Result<ManagerFigures> {
        let pid = self.pid() as libc::pid_t;
        // SAFETY: kill(2) on our own child, not yet waited for, so the pid is still ours.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(s) = self.process.0.try_wait()? {
                break s;
            }
            if Instant::now() > deadline {
                bail!(
                    "manager {} did not stop within {limit:?} of SIGTERM (killed)",
                    self.name
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        if let Some(mut o) = self.process.0.stdout.take() {
            o.read_to_string(&mut out)?;
        }
        if !status.success() {
            bail!("manager {} failed ({status}); see its message above", self.name);
        }
        let line = out.lines().last().unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("manager {} printed no figures ({line:?})", self.name))?;
        Ok(ManagerFigures::from_json(&v))
    }
}
