//! Keys a client chose that are longer than a store keeps: [`LongKeys`] says whether
//! such a key is kept as its 128-bit hash or refused, and [`long_key_hash`] is that
//! hash, one for every weir crate.
//!
//! The hash is the first 16 bytes of the key's SHA-256: the same on every instance
//! of a fleet and in every version of weir (so instances that share a remote store
//! name one client's state alike), and collision-resistant without a secret, so no
//! client can choose a key that lands on another client's state (that would take a
//! SHA-256 collision on 128 bits, about 2⁶⁴ work). Hashing reads the key once; a
//! store hashes only keys above its bound, which short keys never pay for.

/// What a store or key source does with a key longer than its bound (weir-tower's
/// `MAX_KEY_BYTES`, weir-redis's `max_key_bytes`).
///
/// ```
/// use weir_rl_core::LongKeys;
///
/// assert_eq!(LongKeys::default(), LongKeys::Hash);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum LongKeys {
    /// Keep the key as its [`long_key_hash`] (the default): the client is still told
    /// apart from every other (up to a SHA-256 collision), and costs no more than a
    /// short key wherever it is kept or sent.
    #[default]
    Hash,
    /// Refuse the key: weir-tower answers the request `400 Bad Request` naming the
    /// header and the bound; weir-redis returns `Error::KeyTooLong` before any round
    /// trip.
    Refuse,
}

/// The bytes of a [`long_key_hash`].
pub const LONG_KEY_HASH_BYTES: usize = 16;

/// The 128-bit hash a long key is kept as: the first [`LONG_KEY_HASH_BYTES`] bytes of
/// its SHA-256. The same on every instance of a fleet and in every version of weir,
/// so instances that share a remote store name one client's state alike; and
/// collision-resistant without a secret, so no client can choose a key that lands on
/// another client's state (that would take a SHA-256 collision on 128 bits, about
/// 2⁶⁴ work). Hashing reads the key once; a store hashes only keys above its bound.
///
/// ```
/// use weir_rl_core::long_key_hash;
///
/// // SHA-256("abc") begins ba7816bf 8f01cfea 414140de 5dae2223.
/// assert_eq!(long_key_hash(b"abc")[..4], [0xba, 0x78, 0x16, 0xbf]);
/// assert_ne!(long_key_hash(&[b'k'; 200]), long_key_hash(&[b'k'; 201]));
/// ```
pub fn long_key_hash(key: &[u8]) -> [u8; LONG_KEY_HASH_BYTES] {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(key);
    let mut out = [0u8; LONG_KEY_HASH_BYTES];
    out.copy_from_slice(&digest[..LONG_KEY_HASH_BYTES]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_sha256s_first_sixteen_bytes() {
        // FIPS 180-2's test vectors, their first 16 bytes.
        let vectors: [(&[u8], [u8; 16]); 3] = [
            (b"", *b"\xe3\xb0\xc4\x42\x98\xfc\x1c\x14\x9a\xfb\xf4\xc8\x99\x6f\xb9\x24"),
            (b"abc", *b"\xba\x78\x16\xbf\x8f\x01\xcf\xea\x41\x41\x40\xde\x5d\xae\x22\x23"),
            (
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                *b"\x24\x8d\x6a\x61\xd2\x06\x38\xb8\xe5\xc0\x26\x93\x0c\x3e\x60\x39",
            ),
        ];
        for (message, want) in vectors {
            assert_eq!(long_key_hash(message), want);
        }
    }
}
