//! A client certificate's validity period, read from its DER, so an expired (or not yet valid)
//! certificate is named before a server refuses it without saying why (TLS 1.3 servers drop the
//! connection after the handshake, and the client sees only a closed stream).

use std::time::{SystemTime, UNIX_EPOCH};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

/// Why the first certificate in `pem` is not valid now, if it is not: "expired at …" or
/// "not valid before …" (UTC). `None` when valid or unreadable (the TLS library will say).
pub fn invalid_now(pem: &[u8]) -> Option<String> {
    let der = CertificateDer::from_pem_slice(pem).ok()?;
    let (not_before, not_after) = validity(&der)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs() as i64;
    if now > not_after.0 {
        return Some(format!("expired at {}", not_after.1));
    }
    if now < not_before.0 {
        return Some(format!("not valid before {}", not_before.1));
    }
    None
}

/// One DER element at the start of `d`: (tag, contents, rest).
fn element(d: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, d) = d.split_first()?;
    let (&first, mut d) = d.split_first()?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || d.len() < n {
            return None;
        }
        let len = d[..n].iter().fold(0usize, |a, b| (a << 8) | *b as usize);
        d = &d[n..];
        len
    };
    (d.len() >= len).then(|| (tag, &d[..len], &d[len..]))
}

/// notBefore and notAfter as (Unix seconds, text): Certificate → tbsCertificate → [version],
/// serial, signature, issuer, validity.
fn validity(der: &[u8]) -> Option<((i64, String), (i64, String))> {
    let (_, cert, _) = element(der)?;
    let (_, tbs, _) = element(cert)?;
    let mut rest = tbs;
    let (tag, _, after) = element(rest)?;
    if tag == 0xa0 {
        rest = after; // explicit version
    }
    for _ in 0..3 {
        rest = element(rest)?.2; // serial, signature algorithm, issuer
    }
    let (_, validity, _) = element(rest)?;
    let (t1, before, rest) = element(validity)?;
    let (t2, after, _) = element(rest)?;
    Some((time(t1, before)?, time(t2, after)?))
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn time(tag: u8, v: &[u8]) -> Option<(i64, String)> {
    let s = std::str::from_utf8(v).ok()?.strip_suffix('Z')?;
    let (year, s) = match tag {
        0x17 => {
            let yy: i64 = s.get(..2)?.parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &s[2..])
        }
        0x18 => (s.get(..4)?.parse().ok()?, &s[4..]),
        _ => return None,
    };
    let n = |i: usize| -> Option<i64> { s.get(i..i + 2)?.parse().ok() };
    let (mo, d, h, mi, se) = (n(0)?, n(2)?, n(4)?, n(6)?, n(8)?);
    // Days from 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    let y = if mo <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if mo > 2 { mo - 3 } else { mo + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let text = format!("{year:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{se:02}Z");
    Some((days * 86_400 + h * 3600 + mi * 60 + se, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_convert_to_unix_seconds() {
        assert_eq!(time(0x17, b"700101000000Z").unwrap().0, 0);
        assert_eq!(time(0x17, b"200102000000Z").unwrap().0, 1_577_923_200);
        assert_eq!(time(0x18, b"20380119031408Z").unwrap().0, 2_147_483_648);
        assert_eq!(
            time(0x17, b"491231235959Z").unwrap().1,
            "2049-12-31T23:59:59Z"
        );
        assert!(time(0x17, b"garbage").is_none());
    }

    #[test]
    fn not_a_certificate_is_left_to_the_tls_library() {
        assert_eq!(invalid_now(b"not pem at all"), None);
        assert_eq!(element(&[0x30, 0x85, 1, 2, 3, 4, 5]), None);
    }
}
