//! `single_limiter!`: the one definition of "an algorithm,
//! one state and a clock" that each algorithm crate's limiter type is made from.

/// Declares a single limiter over an [`Algorithm`](crate::Algorithm): a struct
/// holding the algorithm, one cache-padded state and a clock (generic `C`, defaulting
/// to [`DefaultClock`](crate::DefaultClock)), with `check`, `check_n`, `refund`, `snapshot` and
/// `clock`, and its [`Limiter`](crate::Limiter) impl. The calling crate writes the
/// constructors and whatever is specific to its algorithm. Usage, as weir-gcra
/// declares `Gcra` (not compiled here: it expands to items of the calling crate):
///
/// ```text
/// weir_rl_core::__private::single_limiter! {
///     /// A token bucket in GCRA encoding.
///     pub struct Gcra { algorithm: GcraAlgorithm, state: GcraState }
/// }
/// ```
///
/// Not part of weir's public API: reach it as `weir_rl_core::__private::single_limiter`
/// (the crate-root path, where `#[macro_export]` puts every macro, is hidden and
/// kept for crates that still name it there).
#[doc(hidden)]
#[macro_export]
macro_rules! single_limiter {
    (
        $(#[$meta:meta])*
        pub struct $name:ident { algorithm: $algorithm:ty, state: $state:ty $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug)]
        pub struct $name<C = $crate::DefaultClock> {
            algorithm: $algorithm,
            state: $crate::__private::sync::CachePadded<$state>,
            clock: C,
        }

        impl<C: $crate::Clock> $name<C> {
            /// Checks one request: admits it or denies it (consuming nothing).
            #[inline(always)] // the whole fast path, into the caller
            pub fn check(&self) -> $crate::Decision {
                <$algorithm as $crate::Algorithm>::check(&self.algorithm, &self.state, &self.clock)
            }

            /// The lean check of one request: admitted, or how long to wait (see
            /// [`Limiter::admit`]($crate::Limiter::admit)); the decision's other
            /// numbers are computed only where they are read.
            #[inline(always)]
            pub fn admit(&self) -> Result<(), $crate::Wait> {
                self.check().verdict()
            }

            /// Checks a request of cost `n`, all or nothing. `n` above the limit is an
            /// error (it can never be admitted); `n == 0` is admitted and consumes
            /// nothing.
            #[inline]
            pub fn check_n(&self, n: u64) -> Result<$crate::Decision, $crate::InsufficientCapacity> {
                <$algorithm as $crate::Algorithm>::check_n(&self.algorithm, &self.state, n, &self.clock)
            }

            /// Gives back `n` units that `admission` (a decision of this limiter)
            /// consumed and the caller did not use; nothing for a denial, never
            /// beyond a full limiter, and for a window limiter only to the window
            /// the admission was counted in (see
            /// [`Algorithm::refund`]($crate::Algorithm::refund)). `n` above the limit
            /// is an error.
            #[inline]
            pub fn refund(&self, n: u64, admission: &$crate::Decision) -> Result<(), $crate::InsufficientCapacity> {
                <$algorithm as $crate::Algorithm>::refund(&self.algorithm, &self.state, n, admission, &self.clock)
            }

            /// The current state, without consuming anything.
            pub fn snapshot(&self) -> $crate::Snapshot {
                <$algorithm as $crate::Algorithm>::snapshot(&self.algorithm, &self.state, $crate::Clock::now(&self.clock))
            }

            /// The clock this limiter reads.
            pub fn clock(&self) -> &C {
                &self.clock
            }
        }

        impl<C: $crate::Clock> $crate::Limiter for $name<C> {
            #[inline(always)]
            fn check(&self) -> $crate::Decision {
                $name::check(self)
            }
            #[inline(always)]
            fn admit(&self) -> Result<(), $crate::Wait> {
                $name::admit(self)
            }
            #[inline]
            fn check_n(&self, n: u64) -> Result<$crate::Decision, $crate::InsufficientCapacity> {
                $name::check_n(self, n)
            }
            #[inline]
            fn refund(&self, n: u64, admission: &$crate::Decision) -> Result<(), $crate::InsufficientCapacity> {
                $name::refund(self, n, admission)
            }
            fn snapshot(&self) -> $crate::Snapshot {
                $name::snapshot(self)
            }
        }
    };
}
