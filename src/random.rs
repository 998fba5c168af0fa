//! Fresh random bytes from the kernel's generator, for ids that must be unique (not secret):
//! staging and claim names, lock nonces, attempt ids, and the ids `serve` and the CLI mint.
//!
//! One fill loop for every caller: `getrandom` may return fewer bytes than asked or be
//! interrupted (`EINTR`), and both are retried; any other failure is [`Unavailable`]. There is
//! no fallback (a clock hash is predictable and can repeat across processes): a caller that
//! cannot get an id refuses the operation that needed it.

/// The kernel's random generator failed, so no fresh id could be made.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot read random bytes from the kernel ({0}); nothing that needed a fresh id was done: retry, and check the system's entropy source if it persists"
)]
pub struct Unavailable(#[source] pub std::io::Error);

/// `N` random bytes.
///
/// # Errors
/// [`Unavailable`] when the kernel cannot supply them.
pub fn bytes<const N: usize>() -> Result<[u8; N], Unavailable> {
    let mut buf = [0u8; N];
    let mut filled = 0;
    while filled < N {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(Unavailable(e.into())),
        }
    }
    Ok(buf)
}

/// 16 random bytes in lowercase hex (32 digits).
///
/// # Errors
/// [`Unavailable`] when the kernel cannot supply them.
pub fn hex16() -> Result<String, Unavailable> {
    Ok(hex::encode(bytes::<16>()?))
}

/// A random UUID version 4 in lowercase hyphenated text (36 characters), as Node's
/// `crypto.randomUUID()`; the `uuid` crate sets the version and variant bits and formats it.
///
/// # Errors
/// [`Unavailable`] when the kernel cannot supply the bytes.
pub fn uuid_v4() -> Result<String, Unavailable> {
    Ok(uuid::Builder::from_random_bytes(bytes::<16>()?)
        .into_uuid()
        .hyphenated()
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_their_shape_and_differ() {
        let u = uuid_v4().unwrap();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4", "version 4: {u}");
        assert!(
            matches!(&u[19..20], "8" | "9" | "a" | "b"),
            "RFC 4122 variant: {u}"
        );
        assert_ne!(u, uuid_v4().unwrap());
        let h = hex16().unwrap();
        assert_eq!(h.len(), 32);
        assert!(
            h.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_ne!(h, hex16().unwrap());
        // A request larger than one getrandom call may return is filled in full.
        let big = bytes::<4096>().unwrap();
        assert!(big.iter().any(|&b| b != 0));
    }
}
