//! The default hasher of a store's keys: [`KeyHasher`].

use std::fmt;
use std::hash::{BuildHasher, Hasher};

/// The default hasher of a [`Keyed`](crate::Keyed) store: foldhash's `quality`
/// hash, seeded at random per store, behind the store's defence against
/// collision floods.
///
/// A store's keys usually come from clients (addresses, API keys, user names), so
/// a client may choose keys that collide. foldhash is "minimally DoS-resistant"
/// (its authors' words: a random seed defeats input-independent collisions, not
/// an attacker who can measure timings), so the store does not rely on it: a
/// shard whose keys, when its index is rebuilt, lie further from their homes than
/// a spreading hash would put them (a mean displacement above 8 words, where a
/// hash that spreads them gives about 1, and at most 5 was seen over 1 000 seeds
/// of sequential, strided and address-like keys) is rebuilt with std's
/// SipHash-1-3, keyed at random per
/// store, and stays so (std's `HashMap` once defended itself the same way). A
/// flood can then cost at most the probes of one index's keys before it is
/// rebuilt, in one shard; it never changes a decision. The defence applies to
/// every hasher passed to [`Keyed::with_hasher`](crate::Keyed::with_hasher).
///
/// Against std's `RandomState` (SipHash for every key), the default saves about
/// 120 instructions per check (`cargo bench -p weir-bench --bench instructions`;
/// BENCHMARKS.md, "Instruction counts").
///
/// ```
/// use std::hash::BuildHasher;
/// use weir_keyed::KeyHasher;
///
/// let (a, b) = (KeyHasher::new(), KeyHasher::new());
/// assert_eq!(a.hash_one("203.0.113.7"), a.hash_one("203.0.113.7"));
/// assert_ne!(a.hash_one("203.0.113.7"), b.hash_one("203.0.113.7")); // seeded per store
/// ```
#[derive(Clone, Default)]
pub struct KeyHasher(foldhash::quality::RandomState);

/// Shows no seed: it is what keeps a store's hashes unpredictable.
impl fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyHasher").finish_non_exhaustive()
    }
}

impl KeyHasher {
    /// A hasher with a fresh random seed.
    pub fn new() -> Self {
        Self::default()
    }
}

impl BuildHasher for KeyHasher {
    type Hasher = KeyHash;

    #[inline(always)]
    fn build_hasher(&self) -> KeyHash {
        KeyHash(self.0.build_hasher())
    }
}

/// The [`Hasher`] of a [`KeyHasher`].
#[derive(Clone)]
pub struct KeyHash(foldhash::quality::FoldHasher<'static>);

/// Shows no state: a hasher's state is derived from its store's secret seed.
impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyHash").finish_non_exhaustive()
    }
}

/// Forwards each write to foldhash, which specializes the integer ones.
impl Hasher for KeyHash {
    #[inline(always)]
    fn finish(&self) -> u64 {
        self.0.finish()
    }

    #[inline(always)]
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }

    #[inline(always)]
    fn write_u8(&mut self, i: u8) {
        self.0.write_u8(i);
    }

    #[inline(always)]
    fn write_u16(&mut self, i: u16) {
        self.0.write_u16(i);
    }

    #[inline(always)]
    fn write_u32(&mut self, i: u32) {
        self.0.write_u32(i);
    }

    #[inline(always)]
    fn write_u64(&mut self, i: u64) {
        self.0.write_u64(i);
    }

    #[inline(always)]
    fn write_u128(&mut self, i: u128) {
        self.0.write_u128(i);
    }

    #[inline(always)]
    fn write_usize(&mut self, i: usize) {
        self.0.write_usize(i);
    }
}

/// Which of a store's shards hash their keys with SipHash after a flood of
/// colliding keys ([`Keyed::hardened_shards`](crate::Keyed::hardened_shards); see
/// [`KeyHasher`]). Under ordinary traffic none do: a hardened shard means a flood of
/// keys chosen to collide, or a hasher that does not spread the keys it is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct HardenedShards {
    /// Hardened shards of the store's keys.
    pub keys: usize,
    /// Whether the shard of the hot keys' stripes ([`HotKeys`](crate::HotKeys))
    /// has hardened.
    pub hot_keys: bool,
}
