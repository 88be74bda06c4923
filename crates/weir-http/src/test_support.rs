//! What the unit tests of several modules share.

use crate::{Key, Request, User};
use core::ops::ControlFlow;
use std::net::IpAddr;
use weir_rl_core::{Decision, InsufficientCapacity, KeyedLimiter, Policy, Snapshot};

/// A store that admits everything under one policy.
pub(crate) struct Open(pub(crate) [Policy; 1]);

impl KeyedLimiter<Key> for Open {
    fn check_n(&self, _: &Key, _: u64) -> Result<Decision, InsufficientCapacity> {
        Ok(Decision::allowed(Snapshot::new(1, 1, 0)))
    }
    fn refund(&self, _: &Key, _: u64, _: &Decision) -> Result<(), InsufficientCapacity> {
        Ok(())
    }
    fn snapshot(&self, _: &Key) -> Snapshot {
        Snapshot::new(1, 1, 0)
    }
    fn policies(&self) -> &[Policy] {
        &self.0
    }
}

/// A request made by hand.
#[derive(Debug, Clone, Default)]
pub(crate) struct TestRequest {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
    pub(crate) peer: Option<IpAddr>,
    pub(crate) user: Option<User>,
}

impl TestRequest {
    pub(crate) fn get(path: &str) -> Self {
        Self { method: "GET".into(), path: path.into(), ..Self::default() }
    }

    pub(crate) fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.headers.push((name.to_ascii_lowercase(), value.as_ref().to_vec()));
        self
    }

    pub(crate) fn peer(self, ip: &str) -> Self {
        Self { peer: Some(ip.parse().unwrap()), ..self }
    }

    pub(crate) fn user(self, id: &str) -> Self {
        Self { user: Some(User::from(id)), ..self }
    }
}

impl Request for TestRequest {
    fn method(&self) -> &str {
        &self.method
    }
    fn path(&self) -> &str {
        &self.path
    }
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| &v[..])
    }
    fn header_lines_rev(&self, name: &str, each: &mut dyn FnMut(&[u8]) -> ControlFlow<()>) {
        for (_, v) in self.headers.iter().rev().filter(|(n, _)| n.eq_ignore_ascii_case(name)) {
            if each(v).is_break() {
                return;
            }
        }
    }
    fn peer_ip(&self) -> Option<IpAddr> {
        self.peer
    }
    fn user(&self) -> Option<User> {
        self.user.clone()
    }
}
