//! What several of weir-keyed's test files share.
#![allow(dead_code)] // each test file uses some of it

use std::alloc::{GlobalAlloc, Layout, System};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicIsize, Ordering};
use std::sync::{Arc, Mutex};
use weir_rl_core::{Clock, ManualClock, Nanos};

type Hook = Arc<Mutex<Option<Box<dyn FnOnce() + Send>>>>;

/// A manual clock that runs a hook inside its `n`-th reading from when it is
/// armed, to place another thread's operation exactly between two steps of a call.
#[derive(Clone)]
pub struct HookClock {
    /// The time, moved by hand.
    pub inner: ManualClock,
    countdown: Arc<AtomicI64>,
    hook: Hook,
    /// Whether the armed reading is taken before its hook runs (and so is stale
    /// once the hook has moved the time): a caller that read the clock and then
    /// stalled.
    stale: Arc<AtomicBool>,
}

impl HookClock {
    pub fn new() -> Self {
        Self {
            inner: ManualClock::new(),
            countdown: Default::default(),
            hook: Default::default(),
            stale: Default::default(),
        }
    }

    /// Runs `hook` inside the `nth` reading from now (1: the next one).
    pub fn arm(&self, nth: i64, hook: impl FnOnce() + Send + 'static) {
        *self.hook.lock().unwrap() = Some(Box::new(hook));
        self.stale.store(false, Ordering::SeqCst);
        self.countdown.store(nth, Ordering::SeqCst);
    }

    /// Runs `hook` just after the `nth` reading from now is taken, and returns that
    /// reading: the caller reads the clock, stalls while `hook` runs (and may move
    /// the time), then goes on with the reading it took.
    pub fn arm_stale(&self, nth: i64, hook: impl FnOnce() + Send + 'static) {
        *self.hook.lock().unwrap() = Some(Box::new(hook));
        self.stale.store(true, Ordering::SeqCst);
        self.countdown.store(nth, Ordering::SeqCst);
    }
}

impl Clock for HookClock {
    fn now(&self) -> Nanos {
        if self.countdown.fetch_sub(1, Ordering::SeqCst) == 1 {
            let reading = self.inner.now();
            let hook = self.hook.lock().unwrap().take();
            if let Some(hook) = hook {
                hook();
            }
            if self.stale.load(Ordering::SeqCst) {
                return reading;
            }
        }
        self.inner.now()
    }
}

/// An allocator that counts the bytes allocated and not yet freed, for a test
/// binary's `#[global_allocator]` (a binary of one test, so that nothing else
/// allocates meanwhile); read by `live_bytes`.
pub struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// The bytes allocated through `Counting` and not yet freed.
pub fn live_bytes() -> isize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// Every key hashes to the same value: what a flood of keys chosen to collide
/// makes of a fast hash at worst.
#[derive(Clone, Copy, Debug, Default)]
pub struct Colliding;

impl BuildHasher for Colliding {
    type Hasher = Constant;
    fn build_hasher(&self) -> Constant {
        Constant
    }
}

/// [`Colliding`]'s hasher.
pub struct Constant;

impl Hasher for Constant {
    fn finish(&self) -> u64 {
        0x0123_4567_89ab_cdef
    }
    fn write(&mut self, _: &[u8]) {}
}
