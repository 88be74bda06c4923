//! Linearizability: the sequential histories a concurrent run may be equivalent to.
//!
//! A concurrent run is *linearizable* when the results its threads observed are the
//! results of running the same operations one at a time in an order that keeps
//! (1) each thread's program order and (2) real-time precedence: an operation that
//! returned before another was invoked comes first. (1) alone is sequential
//! consistency, a weaker property; (2) is what lets a caller reason about a limiter
//! as one object ("my check returned before yours began, so mine was counted first").
//!
//! Models record real time with a `RealTime` counter (built under `cfg(loom)`) that every thread stamps
//! before invoking and after the operation returns; the stamps are `SeqCst`
//! read-modify-writes of one atomic, so their order is the execution's real-time
//! order, and [`linearizations`] enumerates only the orders that respect it.

/// When one operation of a model ran, in stamps of the model's `RealTime` counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The stamp taken just before the operation was invoked.
    pub invoked: usize,
    /// The stamp taken just after it returned.
    pub returned: usize,
}

impl Span {
    /// Whether this operation returned before `other` was invoked, so that any
    /// linearization must place it first.
    pub fn precedes(&self, other: &Span) -> bool {
        self.returned < other.invoked
    }
}

/// A model's shared real-time counter.
#[cfg(loom)]
#[derive(Debug, Default)]
pub struct RealTime(loom::sync::atomic::AtomicUsize);

#[cfg(loom)]
impl RealTime {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `op`, stamping the counter before and after, and returns its result with
    /// the span it ran in.
    pub fn time<R>(&self, op: impl FnOnce() -> R) -> (R, Span) {
        // Ordering: SeqCst, so that all stamps of a run form one total order that is
        // consistent with the happens-before order of the operations they bracket.
        let invoked = self.0.fetch_add(1, loom::sync::atomic::Ordering::SeqCst);
        let result = op();
        // Ordering: SeqCst, as above.
        let returned = self.0.fetch_add(1, loom::sync::atomic::Ordering::SeqCst);
        (result, Span { invoked, returned })
    }
}

/// Every order of the per-thread operation sequences `threads` that keeps each
/// thread's own order and real-time precedence (`spans[t][i]` is when `threads[t][i]`
/// ran): the sequential histories a linearizable run may be equivalent to. Each item
/// is `(thread, operation)`.
///
/// # Panics
///
/// If `spans` does not have the shape of `threads` (a bug in the model).
pub fn linearizations<T: Clone>(threads: &[Vec<T>], spans: &[Vec<Span>]) -> Vec<Vec<(usize, T)>> {
    assert!(
        threads.len() == spans.len() && threads.iter().zip(spans).all(|(t, s)| t.len() == s.len()),
        "one span per operation"
    );
    orders(threads, |t, i, next| {
        // `threads[t][i]` may go next unless some other thread's next operation
        // returned before it was invoked (that thread's later operations returned
        // later still, so its next one is the only one to check).
        (0..threads.len()).all(|u| u == t || next[u] >= threads[u].len() || !spans[u][next[u]].precedes(&spans[t][i]))
    })
}

/// Every order of the per-thread operation sequences that keeps each thread's own
/// order (sequential consistency only: no real-time precedence). Prefer
/// [`linearizations`]; this serves models whose operations cannot be stamped.
pub fn interleavings<T: Clone>(threads: &[Vec<T>]) -> Vec<Vec<(usize, T)>> {
    orders(threads, |_, _, _| true)
}

/// The orders of `threads` that keep program order and in which `may_go(t, i, next)`
/// allows each step (`next[u]` is the index of thread `u`'s next unplaced operation).
fn orders<T: Clone>(threads: &[Vec<T>], may_go: impl Fn(usize, usize, &[usize]) -> bool) -> Vec<Vec<(usize, T)>> {
    struct Search<'a, T, F> {
        threads: &'a [Vec<T>],
        may_go: F,
        next: Vec<usize>,
        prefix: Vec<(usize, T)>,
        out: Vec<Vec<(usize, T)>>,
    }
    impl<T: Clone, F: Fn(usize, usize, &[usize]) -> bool> Search<'_, T, F> {
        fn go(&mut self) {
            let mut done = true;
            for t in 0..self.threads.len() {
                let i = self.next[t];
                if i < self.threads[t].len() {
                    done = false;
                    if !(self.may_go)(t, i, &self.next) {
                        continue;
                    }
                    self.prefix.push((t, self.threads[t][i].clone()));
                    self.next[t] += 1;
                    self.go();
                    self.next[t] -= 1;
                    self.prefix.pop();
                }
            }
            if done {
                self.out.push(self.prefix.clone());
            }
        }
    }
    let mut search = Search { threads, may_go, next: vec![0; threads.len()], prefix: Vec::new(), out: Vec::new() };
    search.go();
    search.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleavings_keep_program_order() {
        let all = interleavings(&[vec!['a', 'b'], vec!['c']]);
        assert_eq!(all.len(), 3);
        for h in &all {
            let a = h.iter().position(|x| x.1 == 'a').unwrap();
            let b = h.iter().position(|x| x.1 == 'b').unwrap();
            assert!(a < b);
        }
    }

    #[test]
    fn linearizations_keep_real_time_precedence() {
        let span = |invoked, returned| Span { invoked, returned };
        let threads = [vec!['a', 'b'], vec!['c']];
        // 'a' returned before 'c' was invoked, and 'c' returned before 'b' was.
        let all = linearizations(&threads, &[vec![span(0, 1), span(4, 5)], vec![span(2, 3)]]);
        assert_eq!(all, vec![vec![(0, 'a'), (1, 'c'), (0, 'b')]]);
        // 'c' overlaps both: any place keeps real time; only program order binds.
        let all = linearizations(&threads, &[vec![span(0, 3), span(4, 6)], vec![span(1, 5)]]);
        assert_eq!(all.len(), 3);
        // Sequential consistency alone would also allow 'c' first in the first run.
        assert_eq!(interleavings(&threads).len(), 3);
    }
}
