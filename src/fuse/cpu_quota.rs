//! The CPU quota of the daemon's cgroup, in CPUs: cgroup v2's `cpu.max`
//! or v1's `cpu.cfs_quota_us` over `cpu.cfs_period_us`, the smallest
//! along the cgroup and its ancestors (each one's quota caps everything
//! below it). None: no quota anywhere, or no cgroup file to say so.
//!
//! Busy polling spends CPU time a quota counts: under a quota of one CPU
//! on two, a warm `grep -r` through a polling mount ran slower than
//! without polling (docs/performance.md), so [`super::busy_poll`] polls
//! only where the quota, if any, covers every CPU the thread may run on.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The quota of the calling process's cgroup, in CPUs (see the module's
/// doc).
pub(crate) fn of_this_process() -> Option<f64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    least_quota(Path::new("/"), &cgroups, &mountinfo)
}

/// [`of_this_process`] as read at most a second ago (a quota may change
/// while the daemon serves; reading it takes a few files): what the
/// serving threads and the idle keeper look at.
pub(crate) fn of_this_process_lately() -> Option<f64> {
    static LAST: Mutex<Option<(Instant, Option<f64>)>> = Mutex::new(None);
    let mut last = LAST.lock();
    match *last {
        Some((at, q)) if at.elapsed() < Duration::from_secs(1) => q,
        _ => {
            let q = of_this_process();
            *last = Some((Instant::now(), q));
            q
        }
    }
}

/// The smallest quota along every CPU cgroup that `cgroups` (the text of
/// `/proc/PID/cgroup`) names, under the mounts of `mountinfo`, read with
/// `root` prefixed to each mount point (tests build a fake tree).
fn least_quota(root: &Path, cgroups: &str, mountinfo: &str) -> Option<f64> {
    let mounts = cgroup_mounts(mountinfo);
    let mut least: Option<f64> = None;
    for (v2, path) in cpu_cgroups(cgroups) {
        for m in mounts.iter().filter(|m| m.v2 == v2) {
            for dir in dirs_up(&path, m) {
                let dir = root.join(dir.strip_prefix("/").unwrap_or(&dir));
                if let Some(q) = quota_in(&dir, v2) {
                    least = Some(least.map_or(q, |l| l.min(q)));
                }
            }
        }
    }
    least
}

/// A cgroup hierarchy's mount that can hold CPU quotas.
#[derive(Debug, PartialEq)]
struct CgroupMount {
    /// The cgroup path the mount shows at its mount point (not `/` inside
    /// some containers).
    root: String,
    point: PathBuf,
    v2: bool,
}

/// The cgroup2 mounts, and the v1 mounts of the `cpu` controller.
fn cgroup_mounts(mountinfo: &str) -> Vec<CgroupMount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let left: Vec<&str> = left.split(' ').collect();
            let mut right = right.split(' ');
            let (fstype, _source, opts) = (right.next()?, right.next()?, right.next()?);
            let v2 = match fstype {
                "cgroup2" => true,
                "cgroup" if opts.split(',').any(|o| o == "cpu") => false,
                _ => return None,
            };
            Some(CgroupMount {
                root: unescape(left.get(3)?),
                point: PathBuf::from(unescape(left.get(4)?)),
                v2,
            })
        })
        .collect()
}

/// The cgroups of `/proc/PID/cgroup` that can hold a CPU quota: the v2
/// one (`0::/path`) and the v1 one whose controllers include `cpu`.
fn cpu_cgroups(cgroups: &str) -> Vec<(bool, String)> {
    cgroups
        .lines()
        .filter_map(|line| {
            let mut f = line.splitn(3, ':');
            let (id, controllers, path) = (f.next()?, f.next()?, f.next()?);
            if id == "0" && controllers.is_empty() {
                Some((true, path.to_string()))
            } else if controllers.split(',').any(|c| c == "cpu") {
                Some((false, path.to_string()))
            } else {
                None
            }
        })
        .collect()
}

/// The directories of cgroup `path` and its ancestors under mount `m`, up
/// to the mount point; none when the mount doesn't show that cgroup.
fn dirs_up(path: &str, m: &CgroupMount) -> Vec<PathBuf> {
    let rel = if m.root == "/" {
        Some(path)
    } else {
        path.strip_prefix(m.root.as_str())
            .filter(|r| r.is_empty() || r.starts_with('/'))
    };
    let Some(rel) = rel else {
        return Vec::new();
    };
    let mut dir = m.point.clone();
    let mut out = vec![dir.clone()];
    for name in rel.split('/').filter(|n| !n.is_empty()) {
        // A cgroup name is one path component; anything else is not
        // a path this reads.
        if name == "." || name == ".." {
            return Vec::new();
        }
        dir.push(name);
        out.push(dir.clone());
    }
    out
}

/// The quota one cgroup directory sets, if any.
fn quota_in(dir: &Path, v2: bool) -> Option<f64> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    if v2 {
        parse_cpu_max(&read("cpu.max")?)
    } else {
        parse_cfs(&read("cpu.cfs_quota_us")?, &read("cpu.cfs_period_us")?)
    }
}

/// cgroup v2's `cpu.max`: `max PERIOD` (none) or `QUOTA PERIOD`.
fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut f = text.split_whitespace();
    let quota: f64 = f.next()?.parse().ok()?;
    let period: f64 = f.next()?.parse().ok()?;
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

/// cgroup v1's quota and period, in µs; a negative quota is none.
fn parse_cfs(quota: &str, period: &str) -> Option<f64> {
    let quota: f64 = quota.trim().parse().ok()?;
    let period: f64 = period.trim().parse().ok()?;
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(v as u8);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_MOUNTS: &str = "\
25 1 0:22 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs ro,mode=755
30 25 0:27 / /sys/fs/cgroup/cpu rw,nosuid - cgroup cgroup rw,cpu
31 25 0:28 / /sys/fs/cgroup/cpuacct rw,nosuid - cgroup cgroup rw,cpuacct
32 25 0:29 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
";

    const V2_MOUNTS: &str = "\
22 1 8:1 / / rw - ext4 /dev/vda rw
35 22 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
";

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    }

    #[test]
    fn quota_files_read_as_cpus_and_no_limit_as_none() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("50000 100000\n"), Some(0.5));
        assert_eq!(parse_cpu_max("200000 100000"), Some(2.0));
        assert_eq!(parse_cpu_max(""), None);
        assert_eq!(parse_cfs("-1\n", "100000\n"), None);
        assert_eq!(parse_cfs("150000\n", "100000\n"), Some(1.5));
        assert_eq!(parse_cfs("x", "100000"), None);
    }

    #[test]
    fn the_cpu_cgroups_and_their_mounts_are_found() {
        let cg = "9:name=systemd:/\n4:memory:/a/b\n2:cpu,cpuacct:/docker/x\n0::/user.slice/s\n";
        assert_eq!(
            cpu_cgroups(cg),
            [(false, "/docker/x".into()), (true, "/user.slice/s".into())]
        );
        let m = cgroup_mounts(V1_MOUNTS);
        assert_eq!(
            m,
            [CgroupMount {
                root: "/".into(),
                point: "/sys/fs/cgroup/cpu".into(),
                v2: false
            }]
        );
        let m = cgroup_mounts(V2_MOUNTS);
        assert_eq!(m.len(), 1);
        assert!(m[0].v2);
        // A mount point with a space, as mountinfo escapes it.
        let m = cgroup_mounts("40 1 0:31 /ct /c\\040g rw - cgroup2 none rw\n");
        assert_eq!(m[0].point, PathBuf::from("/c g"));
        assert_eq!(m[0].root, "/ct");
    }

    #[test]
    fn a_cgroup_is_read_with_its_ancestors_under_the_mount_that_shows_it() {
        let m = CgroupMount {
            root: "/docker/x".into(),
            point: "/sys/fs/cgroup/cpu".into(),
            v2: false,
        };
        assert_eq!(
            dirs_up("/docker/x/inner", &m),
            [
                PathBuf::from("/sys/fs/cgroup/cpu"),
                "/sys/fs/cgroup/cpu/inner".into()
            ]
        );
        // A cgroup outside what the mount shows, or a path that climbs.
        assert!(dirs_up("/docker/xy", &m).is_empty());
        assert!(dirs_up("/other", &m).is_empty());
        let top = CgroupMount {
            root: "/".into(),
            ..m
        };
        assert!(dirs_up("/a/../b", &top).is_empty());
        assert_eq!(dirs_up("/", &top), [PathBuf::from("/sys/fs/cgroup/cpu")]);
    }

    #[test]
    fn the_least_quota_along_the_ancestors_counts() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        // v2: the parent allows 1.5 CPUs, the process's own cgroup none.
        let base = r.join("sys/fs/cgroup");
        write(&base, "cpu.max", "max 100000\n");
        write(&base.join("work"), "cpu.max", "150000 100000\n");
        write(&base.join("work/job"), "cpu.max", "max 100000\n");
        assert_eq!(least_quota(r, "0::/work/job\n", V2_MOUNTS), Some(1.5));
        assert_eq!(least_quota(r, "0::/\n", V2_MOUNTS), None);
        // v1: the process's cgroup half a CPU, under no limit.
        let cpu = r.join("sys/fs/cgroup/cpu");
        write(&cpu, "cpu.cfs_quota_us", "-1\n");
        write(&cpu, "cpu.cfs_period_us", "100000\n");
        write(&cpu.join("zm"), "cpu.cfs_quota_us", "50000\n");
        write(&cpu.join("zm"), "cpu.cfs_period_us", "100000\n");
        assert_eq!(least_quota(r, "1:cpu:/zm\n", V1_MOUNTS), Some(0.5));
        // Both hierarchies: the smaller counts.
        let both = format!("{V1_MOUNTS}{}", V2_MOUNTS.lines().nth(1).unwrap());
        assert_eq!(
            least_quota(r, "1:cpu:/zm\n0::/work/job\n", &both),
            Some(0.5)
        );
        // Files missing (no cpu controller enabled there): no quota known.
        assert_eq!(least_quota(r, "0::/elsewhere\n", V2_MOUNTS), None);
    }
}
