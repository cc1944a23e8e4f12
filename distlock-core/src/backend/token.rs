//! Owner tokens: 128 random bits that identify one acquisition in the store.

use rand::Rng;

/// A new random owner token, 32 lowercase hex digits (128 bits from `rand`'s CSPRNG).
pub fn owner_token() -> String {
    let v: u128 = rand::rng().random();
    format!("{v:032x}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_distinct_and_hex() {
        let a = super::owner_token();
        let b = super::owner_token();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
