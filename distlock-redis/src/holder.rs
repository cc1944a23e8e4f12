//! How a holder identity ([`distlock_core::AcquireOptions::holder`]) is kept: inside the lock
//! key's value, after the random owner token and one newline (`<token>\n<identity>`).
//!
//! Every token-checked script (release, extend, the fair queue, Redlock's undo) compares the
//! whole value, so the identity is part of the owner's secret and changes nothing they
//! guarantee; no other key is written, so no other name's keys can be touched. Identities
//! contain no control characters ([`distlock_core::validate_identity`]) and tokens are hex, so the
//! first newline splits a value unambiguously; a value without one (a holder that gave no
//! identity, redis-py's `Lock`) has no identity.

/// The lock value for owner `token` and an optional holder identity.
pub(crate) fn owner_value(token: String, holder: Option<&str>) -> String {
    match holder {
        Some(h) => format!("{token}\n{h}"),
        None => token,
    }
}

/// A lock value split into the owner token and the holder identity, if any.
pub(crate) fn split(value: String) -> (String, Option<String>) {
    match value.split_once('\n') {
        Some((token, holder)) => (token.to_owned(), Some(holder.to_owned())),
        None => (value, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_split_back_into_token_and_identity() {
        let v = owner_value("ab12".into(), Some("node 7: west"));
        assert_eq!(split(v), ("ab12".into(), Some("node 7: west".into())));
        assert_eq!(
            split(owner_value("ab12".into(), None)),
            ("ab12".into(), None)
        );
        // redis-py's value: a uuid hex, no identity.
        assert_eq!(split("9f1c".into()), ("9f1c".into(), None));
    }
}
