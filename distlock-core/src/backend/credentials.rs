//! What the URL says about secrets and TLS, read once for every backend: a password from the URL,
//! a file or an environment variable, and the PEM files of a TLS connection.
//!
//! * `password_file=PATH`: the password is the file's content (one trailing newline dropped).
//! * `password_env=VAR`: the password is that environment variable's value.
//! * `ca=PATH`: verify the server against this CA (PEM) instead of the system's roots.
//! * `cert=PATH&key=PATH`: present this client certificate (PEM) and key.
//!
//! Errors name the parameter and the file or variable, never a password.

use std::path::PathBuf;

use crate::backend::url::Params;
use crate::LockError;

/// The parameters [`take_password`] and [`TlsFiles::take`] read (for `Params::finish` lists).
pub const PARAMS: &[&str] = &["password_file", "password_env", "ca", "cert", "key"];

/// The password: the URL's own, or one from `password_file` / `password_env` (one source only).
///
/// # Errors
/// [`LockError::InvalidConfig`] when two sources are given, the file cannot be read or the
/// variable is unset.
pub fn take_password(p: &mut Params, in_url: Option<String>) -> Result<Option<String>, LockError> {
    let file = p.take("password_file");
    let env = p.take("password_env");
    let given = [in_url.is_some(), file.is_some(), env.is_some()];
    if given.iter().filter(|g| **g).count() > 1 {
        return Err(LockError::invalid_config(
            "the password is given more than once: use one of the URL's user:password, password_file= or password_env=",
        ));
    }
    if let Some(path) = file {
        let text = std::fs::read_to_string(&path).map_err(|e| {
            LockError::invalid_config(format!("password_file={path}: cannot read it: {e}"))
        })?;
        let text = text.strip_suffix('\n').unwrap_or(&text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        return Ok(Some(text.to_owned()));
    }
    if let Some(var) = env {
        return std::env::var(&var).map(Some).map_err(|_| {
            LockError::invalid_config(format!(
                "password_env={var}: the environment variable is not set (or not UTF-8)"
            ))
        });
    }
    Ok(in_url)
}

/// `s` with everything but URL-unreserved characters percent-encoded, for putting a user or
/// password back into a driver's URL.
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The PEM files a TLS connection uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA to verify the server with; `None`: the system's roots.
    pub ca: Option<PathBuf>,
    /// Client certificate and key, both or neither.
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// [`TlsFiles`] read into memory.
#[derive(Clone, Default)]
pub struct TlsPem {
    /// The CA certificate(s).
    pub ca: Option<Vec<u8>>,
    /// Client certificate and key.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsPem")
            .field("ca", &self.ca.as_ref().map(|c| c.len()))
            .field("identity", &self.identity.as_ref().map(|_| "***"))
            .finish()
    }
}

impl TlsFiles {
    /// Takes `ca`, `cert` and `key`; `None` when none is given.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] when only one of `cert` and `key` is given.
    pub fn take(p: &mut Params) -> Result<Option<TlsFiles>, LockError> {
        let ca = p.take("ca").map(PathBuf::from);
        let identity = match (p.take("cert"), p.take("key")) {
            (Some(c), Some(k)) => Some((PathBuf::from(c), PathBuf::from(k))),
            (None, None) => None,
            (Some(_), None) => {
                return Err(LockError::invalid_config(
                    "cert= needs key= (the client certificate's private key)",
                ))
            }
            (None, Some(_)) => {
                return Err(LockError::invalid_config(
                    "key= needs cert= (the client certificate)",
                ))
            }
        };
        Ok((ca.is_some() || identity.is_some()).then_some(TlsFiles { ca, identity }))
    }

    /// Reads the files.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] naming the parameter and file that cannot be read.
    pub fn read(&self) -> Result<TlsPem, LockError> {
        let read = |what: &str, path: &PathBuf| {
            std::fs::read(path).map_err(|e| {
                LockError::invalid_config(format!("{what}={}: cannot read it: {e}", path.display()))
            })
        };
        let identity = match &self.identity {
            Some((c, k)) => {
                let cert = read("cert", c)?;
                // A server may refuse an expired certificate without saying why: say it here.
                if let Some(why) = crate::backend::cert_dates::invalid_now(&cert) {
                    return Err(LockError::invalid_config(format!(
                        "cert={}: the client certificate is {why}",
                        c.display()
                    )));
                }
                Some((cert, read("key", k)?))
            }
            None => None,
        };
        Ok(TlsPem {
            ca: self.ca.as_ref().map(|p| read("ca", p)).transpose()?,
            identity,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::url::DistlockUrl;

    fn params(url: &str) -> (Params, Option<String>) {
        let u = DistlockUrl::parse(url, 1).unwrap();
        (u.params(), u.password.clone())
    }

    #[test]
    fn a_password_comes_from_one_source() {
        let dir =
            std::env::temp_dir().join(format!("distlock-cred-{}", crate::backend::owner_token()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pw");
        std::fs::write(&file, "s3cret\n").unwrap();
        let (mut p, pw) = params(&format!("x://h?password_file={}", file.display()));
        assert_eq!(
            take_password(&mut p, pw).unwrap().as_deref(),
            Some("s3cret")
        );
        // The environment as the process got it (set_var in a threaded test process races).
        let (mut p, pw) = params("x://h?password_env=PATH");
        assert_eq!(
            take_password(&mut p, pw).unwrap(),
            std::env::var("PATH").ok()
        );
        let (mut p, pw) = params("x://u:inline@h");
        assert_eq!(
            take_password(&mut p, pw).unwrap().as_deref(),
            Some("inline")
        );

        let (mut p, pw) = params(&format!("x://u:inline@h?password_file={}", file.display()));
        let e = take_password(&mut p, pw).unwrap_err().to_string();
        assert!(
            e.contains("more than once") && !e.contains("inline") && !e.contains("s3cret"),
            "{e}"
        );
        let (mut p, pw) = params("x://h?password_file=/nonexistent/pw");
        let e = take_password(&mut p, pw).unwrap_err().to_string();
        assert!(e.contains("password_file=/nonexistent/pw"), "{e}");
        let (mut p, pw) = params("x://h?password_env=DISTLOCK_SURELY_UNSET_VAR");
        let e = take_password(&mut p, pw).unwrap_err().to_string();
        assert!(e.contains("DISTLOCK_SURELY_UNSET_VAR"), "{e}");
    }

    #[test]
    fn tls_files_come_in_pairs_and_name_what_cannot_be_read() {
        let (mut p, _) = params("x://h?cert=/c.pem");
        assert!(TlsFiles::take(&mut p)
            .unwrap_err()
            .to_string()
            .contains("key="));
        let (mut p, _) = params("x://h");
        assert_eq!(TlsFiles::take(&mut p).unwrap(), None);
        let (mut p, _) = params("x://h?ca=/nonexistent/ca.pem");
        let files = TlsFiles::take(&mut p).unwrap().unwrap();
        let e = files.read().unwrap_err().to_string();
        assert!(e.contains("ca=/nonexistent/ca.pem"), "{e}");
    }
}
