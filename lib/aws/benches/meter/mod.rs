//! CPU time of processes for the benches that measure a client against a local emulator
//! (`consumer`, `producer`): utime + stime from `/proc/PID/stat`, and the emulator process
//! behind an `AWS_ENDPOINT_URL_*` found by the port it listens on.

use std::collections::HashSet;

/// CPU seconds (utime + stime) of named processes, from `/proc/PID/stat`.
pub struct CpuMeter {
    procs: Vec<(String, String)>,
}

impl CpuMeter {
    /// This process (named `me`), then the processes of `others` (`name=PID,...`).
    pub fn new(me: &str, others: &str) -> Self {
        let mut procs = vec![(me.to_owned(), "/proc/self/stat".to_owned())];
        procs.extend(
            others
                .split(',')
                .filter_map(|p| p.split_once('='))
                .map(|(name, pid)| (name.to_owned(), format!("/proc/{pid}/stat"))),
        );
        Self { procs }
    }

    /// The processes' names, in the order of [`CpuMeter::sample`].
    pub fn names(&self) -> Vec<String> {
        self.procs.iter().map(|(n, _)| n.clone()).collect()
    }

    /// utime + stime of each process, in seconds (Linux's USER_HZ of 100 ticks a second; 0 for
    /// a process that is gone).
    pub fn sample(&self) -> Vec<f64> {
        self.procs
            .iter()
            .map(|(_, path)| {
                let stat = std::fs::read_to_string(path).unwrap_or_default();
                let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
                let f: Vec<f64> = after
                    .split_whitespace()
                    .map(|v| v.parse().unwrap_or(0.0))
                    .collect();
                (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / 100.0
            })
            .collect()
    }
}

/// `after - before`, per process.
pub fn cpu_delta(before: &[f64], after: &[f64]) -> Vec<f64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

/// The pid listening on TCP `port` (an IPv4 or IPv6 listener in `/proc/net/tcp*`, then the
/// process holding that socket).
fn listener_pid(port: u16) -> Option<u32> {
    let hex = format!(":{port:04X}");
    let mut inodes = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address, st (0A = LISTEN), inode
            if f.len() > 9 && f[1].ends_with(&hex) && f[3] == "0A" {
                inodes.insert(format!("socket:[{}]", f[9]));
            }
        }
    }
    for proc_dir in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = proc_dir.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(proc_dir.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path())
                && inodes.contains(target.to_string_lossy().as_ref())
            {
                return Some(pid);
            }
        }
    }
    None
}

/// `service:<comm>=PID,...` for the processes listening on the ports of `endpoints`
/// (`("kinesis", "http://127.0.0.1:4569")`, ...), one entry per process; `BENCH_CPU_PIDS`
/// instead when it is set.
pub fn emulator_pids(endpoints: &[(&str, &str)]) -> String {
    if let Ok(given) = std::env::var("BENCH_CPU_PIDS") {
        return given;
    }
    let mut out: Vec<(String, u32)> = Vec::new();
    for (service, url) in endpoints {
        let port = url
            .rsplit(':')
            .next()
            .and_then(|p| p.trim_end_matches('/').parse::<u16>().ok());
        let Some(pid) = port.and_then(listener_pid) else {
            continue;
        };
        if out.iter().any(|(_, p)| *p == pid) {
            continue;
        }
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        out.push((format!("{service}:{}", comm.trim()), pid));
    }
    out.iter()
        .map(|(n, p)| format!("{n}={p}"))
        .collect::<Vec<_>>()
        .join(",")
}
