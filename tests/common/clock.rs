//! A wall clock shared by test servers (tests/common/clock_shim.c, preloaded): the test sets
//! the microseconds every server reads, so the module and the scripts decide a call on the
//! server's clock (leases, holds, TIME, key expiry) at the same instant.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The shim built once per test binary (cc from the system), under target/.
pub fn shim() -> &'static Path {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/common/clock_shim.c");
        let out_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-clock");
        std::fs::create_dir_all(&out_dir).unwrap();
        let out = out_dir.join(format!("clock_shim-{}.so", std::process::id()));
        let status = std::process::Command::new("cc")
            .args(["-O2", "-shared", "-fPIC", "-o"])
            .arg(&out)
            .arg(&src)
            .arg("-ldl")
            .status()
            .expect("cc (the system's C compiler) builds the test clock");
        assert!(status.success(), "building {}", src.display());
        out
    })
}

/// One shared clock: a file of 8 bytes mapped by the test and by every server started with
/// `env()`.
pub struct SharedClock {
    path: PathBuf,
    micros: &'static AtomicU64,
}

impl SharedClock {
    pub fn new(dir: &Path) -> SharedClock {
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join("clock");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(8).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: an 8-byte shared mapping of a file of 8 bytes, kept for the process's life
        // (leaked on purpose: servers may outlive the clock's owner by a few milliseconds).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap of the test clock");
        // SAFETY: the mapping is 8 bytes, page-aligned, and lives as long as the process.
        let micros = unsafe { &*(ptr as *const AtomicU64) };
        let clock = SharedClock { path, micros };
        clock.set(now_micros());
        clock
    }

    /// The environment a server needs to read this clock.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("LD_PRELOAD".into(), shim().display().to_string()),
            ("TB_CLOCK_FILE".into(), self.path.display().to_string()),
        ]
    }

    /// Every server reads `micros` from now on.
    pub fn set(&self, micros: u64) {
        self.micros.store(micros, Ordering::Release);
    }

    pub fn get(&self) -> u64 {
        self.micros.load(Ordering::Acquire)
    }

    /// The servers' clock set to the real one.
    pub fn sync(&self) -> u64 {
        let now = now_micros().max(self.get());
        self.set(now);
        now
    }
}

pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// Whether the server under test (REDIS_SERVER) takes its wall clock from the shared clock:
/// a server started with a clock set to a fixed past instant answers that instant to
/// `TIME`. Redis 7.0 and 8.0 and Valkey 8.1 do. Valkey 9.1 does not: it derives its wall
/// clock (TIME, TIME in scripts, key expiry) from its monotonic clock, which the shim leaves
/// alone because the event loop's timers run on it (measured: with the clock set to
/// ...353.111111, then .222222, then .333333, TIME answered .111359, .111720, .111927).
/// The runs that compare the two backends at one instant then cannot be held to one
/// instant, and say so instead of comparing two clocks.
pub fn server_follows_shared_clock() -> bool {
    static FOLLOWS: OnceLock<bool> = OnceLock::new();
    *FOLLOWS.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("redis-tb-clock-{}-probe", std::process::id()));
        let clock = SharedClock::new(&dir);
        let fixed = 1_500_000_000_123_456;
        clock.set(fixed);
        let server = super::Server::start_with_env(super::Options::default(), clock.env());
        let mut c = server.conn();
        let time = c.cmd(&["TIME"]);
        let follows = match &time {
            super::Reply::Array(parts) if parts.len() == 2 => {
                parts[0].text() == "1500000000" && parts[1].text() == "123456"
            }
            _ => false,
        };
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
        if !follows {
            eprintln!(
                "this server's TIME does not follow the shared test clock ({time:?} where it was \
                 set to {fixed} µs): the runs on one clock are not run on it"
            );
        }
        follows
    })
}
