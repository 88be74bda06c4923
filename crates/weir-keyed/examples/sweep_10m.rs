//! A sweep of a store holding 10 million `u64` keys, on one thread (`sweep_all`)
//! and spread over rayon's pool (`par_sweep_all`, the `rayon` feature): with every
//! key busy (the sweep only looks), and with every key idle (it evicts them all).
//! Run with
//! `cargo run --release -p weir-keyed --features rayon --example sweep_10m`.

use std::time::{Duration, Instant};
use weir_gcra::GcraAlgorithm;
use weir_keyed::{Keyed, KeyedConfig};
use weir_rl_core::{ManualClock, Quota};

const KEYS: u64 = 10_000_000;

/// A store of `KEYS` keys, every one idle one second after its check.
fn filled() -> (Keyed<u64, GcraAlgorithm, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let config = KeyedConfig::builder(KEYS as usize).sweep_from(usize::MAX).build().expect("a valid config");
    let store = Keyed::gcra_with_clock(Quota::per_second(1).expect("a valid quota"), config, clock.clone());
    for key in 0..KEYS {
        let _ = store.check(&key.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    }
    assert_eq!(store.len() as u64, KEYS);
    clock.advance(Duration::from_secs(1));
    (store, clock)
}

fn main() {
    println!("threads in rayon's pool: {}", rayon::current_num_threads());
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for round in 0..3 {
        let (store, clock) = filled();
        clock.set(weir_rl_core::Nanos::ZERO); // every key busy again: a sweep only looks
        let start = Instant::now();
        assert_eq!(store.sweep_all(), 0);
        let look_one = start.elapsed();
        let start = Instant::now();
        assert_eq!(store.par_sweep_all(), 0);
        let look_par = start.elapsed();
        clock.advance(Duration::from_secs(1));
        let start = Instant::now();
        assert_eq!(store.sweep_all() as u64, KEYS);
        let evict_one = start.elapsed();
        let (store, _clock) = filled();
        let start = Instant::now();
        assert_eq!(store.par_sweep_all() as u64, KEYS);
        let evict_par = start.elapsed();
        println!(
            "round {round}: busy keys: sweep_all {:.0} ms, par_sweep_all {:.0} ms ({:.2}x); idle keys: sweep_all {:.0} ms, par_sweep_all {:.0} ms ({:.2}x)",
            ms(look_one),
            ms(look_par),
            look_one.as_secs_f64() / look_par.as_secs_f64(),
            ms(evict_one),
            ms(evict_par),
            evict_one.as_secs_f64() / evict_par.as_secs_f64()
        );
    }
}
