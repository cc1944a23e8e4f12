//! Lock name rules shared by every backend.
//!
//! A name is non-empty UTF-8 of at most [`MAX_NAME_BYTES`] bytes with no NUL byte.
//! Everything else (slashes, quotes, SQL and Lua metacharacters, unicode) is legal here;
//! each backend either maps it injectively to its store (SQL binds it as a parameter, Redis
//! uses it as the key bytes) or rejects what its store cannot represent with
//! [`LockError::InvalidName`] (ZooKeeper paths, for instance). Two different names never share
//! a lock.

use crate::LockError;

/// The longest name accepted, in bytes.
pub const MAX_NAME_BYTES: usize = 256;

/// Checks the rules every backend shares.
///
/// # Errors
/// [`LockError::InvalidName`] naming the broken rule.
pub fn validate(name: &str) -> Result<(), LockError> {
    if name.is_empty() {
        return Err(LockError::invalid_name(
            name,
            "a lock name must not be empty",
        ));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(LockError::invalid_name(
            name,
            format!(
                "a lock name is at most {MAX_NAME_BYTES} bytes, this one has {}",
                name.len()
            ),
        ));
    }
    if name.contains('\0') {
        return Err(LockError::invalid_name(
            name,
            "a lock name must not contain a NUL byte",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::preview;

    #[test]
    fn rejects_empty_long_and_nul() {
        assert!(matches!(validate(""), Err(LockError::InvalidName { .. })));
        assert!(matches!(
            validate(&"x".repeat(257)),
            Err(LockError::InvalidName { .. })
        ));
        assert!(matches!(
            validate("a\0b"),
            Err(LockError::InvalidName { .. })
        ));
        assert!(validate(&"x".repeat(256)).is_ok());
        assert!(validate("'; DROP TABLE x; --").is_ok());
        assert!(validate("ключ/🔒").is_ok());
    }

    #[test]
    fn preview_is_bounded_and_escaped() {
        let p = preview(&"y".repeat(10_000));
        assert!(p.len() < 100, "{p}");
        assert!(p.contains("10000 bytes"));
        assert_eq!(preview("a\0b"), "\"a\\0b\"");
    }
}
