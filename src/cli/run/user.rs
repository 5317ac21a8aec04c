//! The user CMD runs as: `--user UID[:GID]` read, and refused unless
//! `run` is root. Both the plan and CMD's keeper (`worker`) carry it.

use super::super::Failure;

/// A uid and gid to run CMD as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct User {
    pub(super) uid: u32,
    pub(super) gid: u32,
}

/// Parse `UID[:GID]`; without GID, the user's primary group from
/// `passwd` (one line of it per entry), or the uid itself.
pub(super) fn parse_user(spec: &str, passwd: &str) -> Result<User, Failure> {
    let bad = || {
        Failure::new(
            2,
            format!("--user {spec:?}: give a numeric UID or UID:GID (e.g. --user 1000:1000)"),
        )
    };
    let (u, g) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let uid: u32 = u.parse().map_err(|_| bad())?;
    let gid = match g {
        Some(g) => g.parse().map_err(|_| bad())?,
        None => passwd
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() > 3 && f[2].parse() == Ok(uid)).then(|| f[3].parse().ok())?
            })
            .next()
            .unwrap_or(uid),
    };
    Ok(User { uid, gid })
}

/// What CMD run as `uid` is told of its user: `HOME` (its home in
/// `passwd`, or `/` when it has no entry or no home there), and `USER` and
/// `LOGNAME` (its name, when it has an entry).
pub(super) fn login_env(uid: u32, passwd: &str) -> (std::path::PathBuf, Vec<(String, String)>) {
    let entry = passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 5 && f[2].parse() == Ok(uid)).then(|| (f[0].to_owned(), f[5].to_owned()))
    });
    match entry {
        Some((name, home)) => {
            let home = if home.starts_with('/') {
                home
            } else {
                "/".to_owned()
            };
            let vars = if name.is_empty() {
                Vec::new()
            } else {
                vec![
                    ("USER".to_owned(), name.clone()),
                    ("LOGNAME".to_owned(), name),
                ]
            };
            (home.into(), vars)
        }
        None => ("/".into(), Vec::new()),
    }
}

/// `--user SPEC`, which only root may give.
pub(super) fn check_user(spec: &str) -> Result<User, Failure> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let u = parse_user(spec, &passwd)?;
    if !rustix::process::geteuid().is_root() {
        return Err(Failure::new(
            2,
            "--user needs root: only root can run CMD as another user",
        ));
    }
    Ok(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_parse() {
        let passwd = "root:x:0:0::/root:/bin/sh\nbob:x:1000:1001::/home/bob:/bin/sh\n";
        assert_eq!(
            parse_user("1000", passwd).unwrap(),
            User {
                uid: 1000,
                gid: 1001
            }
        );
        assert_eq!(
            parse_user("65534:65533", passwd).unwrap(),
            User {
                uid: 65534,
                gid: 65533
            }
        );
        assert_eq!(parse_user("4242", passwd).unwrap().gid, 4242);
        for bad in ["bob", "1000:", ":1", "-1", "1:x"] {
            assert!(parse_user(bad, passwd).is_err(), "{bad}");
        }
    }

    #[test]
    fn login_env_is_the_users() {
        let passwd = "root:x:0:0::/root:/bin/sh\nbob:x:1000:1001::/home/bob:/bin/sh\nnohome:x:1002:1002:::/bin/sh\n";
        let (home, vars) = login_env(1000, passwd);
        assert_eq!(home, std::path::Path::new("/home/bob"));
        let want = |n: &str| {
            vec![
                ("USER".to_owned(), n.to_owned()),
                ("LOGNAME".to_owned(), n.to_owned()),
            ]
        };
        assert_eq!(vars, want("bob"));
        let (home, vars) = login_env(1002, passwd);
        assert_eq!(home, std::path::Path::new("/"));
        assert_eq!(vars, want("nohome"));
        let (home, vars) = login_env(4242, passwd);
        assert_eq!(home, std::path::Path::new("/"));
        assert!(vars.is_empty());
    }
}
