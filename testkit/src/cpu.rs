//! CPU time from /proc (Linux); zero elsewhere.

use std::time::Duration;

/// User + system CPU time of this process.
pub fn cpu_time() -> Duration {
    proc_stat_ticks(11, 12)
}

/// User + system CPU time of waited-for child processes.
pub fn children_cpu_time() -> Duration {
    proc_stat_ticks(13, 14)
}

fn proc_stat_ticks(user: usize, system: usize) -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // Fields after the parenthesised command name: field n of the whole line
    // (utime is 14, stime 15) is index n - 3 here. Clock ticks are 1/100 s.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(user) + ticks(system)) * 10)
}
