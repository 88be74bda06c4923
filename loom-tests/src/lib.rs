//! loom models of every atomic protocol in weir, and the helpers they share.
//!
//! Run them with `RUSTFLAGS="--cfg loom" cargo test -p loom-tests --profile loom`
//! (`.ci/run` bounds `LOOM_MAX_PREEMPTIONS`). Each model is small (at most 3
//! threads, a few operations) and passes time in explicitly.
//!
//! The central check is linearizability against a sequential reference: the results
//! the threads observed must be exactly the results of running the same operations
//! one at a time in *some* order that respects each thread's program order.

/// Every interleaving of per-thread operation sequences that keeps each thread's own
/// order: the sequential histories a concurrent run may be equivalent to.
pub fn interleavings<T: Clone>(threads: &[Vec<T>]) -> Vec<Vec<(usize, T)>> {
    fn go<T: Clone>(
        threads: &[Vec<T>],
        next: &mut Vec<usize>,
        prefix: &mut Vec<(usize, T)>,
        out: &mut Vec<Vec<(usize, T)>>,
    ) {
        let mut done = true;
        for t in 0..threads.len() {
            if next[t] < threads[t].len() {
                done = false;
                prefix.push((t, threads[t][next[t]].clone()));
                next[t] += 1;
                go(threads, next, prefix, out);
                next[t] -= 1;
                prefix.pop();
            }
        }
        if done {
            out.push(prefix.clone());
        }
    }
    let mut out = Vec::new();
    go(threads, &mut vec![0; threads.len()], &mut Vec::new(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn interleavings_keep_program_order() {
        let all = super::interleavings(&[vec!['a', 'b'], vec!['c']]);
        assert_eq!(all.len(), 3);
        for h in &all {
            let a = h.iter().position(|x| x.1 == 'a').unwrap();
            let b = h.iter().position(|x| x.1 == 'b').unwrap();
            assert!(a < b);
        }
    }
}
