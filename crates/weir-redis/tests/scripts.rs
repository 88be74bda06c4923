//! The decision scripts themselves against a real redis-server, with explicit
//! times: the sliding log's window boundaries, what a denial or a peek leaves
//! behind, key expiries, edge arguments, Lua's doubles, and agreement with the
//! scripts as they were before they were rewritten for speed (state written by
//! one read by the other, and the same replies to the same random operations).

mod support;

#[allow(dead_code)]
#[path = "../src/scripts.rs"]
mod scripts;

use redis::{Connection, Script, Value};
use scripts::Lua;
use std::collections::HashMap;
use support::RedisServer;

/// 2⁵³: the last integer from which every integer is a double.
const EXACT: u64 = 1 << 53;

/// A Unix time in µs (2023-11-14), a whole number of hours.
const T0: u64 = 1_699_999_200_000_000;

/// A script's reply: integers, or Redis's error text.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    Ints(Vec<i64>),
    Int(i64),
    Err(String),
}

impl Reply {
    fn ints(&self) -> &[i64] {
        match self {
            Reply::Ints(v) => v,
            other => panic!("expected integers, got {other:?}"),
        }
    }

    fn admitted(&self) -> bool {
        self.ints()[0] >= 1
    }
}

struct Db {
    _server: RedisServer,
    con: Connection,
    /// Run each script in [`KEEP_PRELUDE`]'s harness: no write sets an expiry
    /// in Redis, each one is recorded instead (in the hash [`KEPT_TTLS`], kept
    /// across calls as Redis keeps an expiry). Redis expires keys by its own
    /// clock, even between a script's commands (seen with Redis 7.0: a key given
    /// 1 ms inside a script, then read inside the same script or transaction, 2
    /// times in 5 000 gone), and the calls' times are their own, so a state
    /// written for 1 ms would otherwise vanish or not depending on how fast the
    /// test runs.
    keep: bool,
    /// The harnessed scripts, by source.
    kept: HashMap<&'static str, Script>,
    /// With `keep`, each key's TTL after the last call: the expiry (ms) that the
    /// last write setting one gave it, in this call or an earlier one (kept by
    /// `SET … KEEPTTL`, forgotten by a plain `SET` or the key's removal), -1 for
    /// none, -2 for a key that does not exist.
    ttls: Vec<i64>,
}

/// The hash in which the kept harness records expiries: field the key, value
/// the TTL in ms its last expiry-setting write gave it. No script touches it
/// (scripts without flags may touch keys they are not given, outside a cluster).
const KEPT_TTLS: &str = "harness:kept-ttls";

/// Put before a script's source (on its first line, empty in every script, so
/// error messages keep their line numbers): a `redis` whose `call` records in
/// [`KEPT_TTLS`] the expiries `PEXPIRE k ms` and `SET k v PX ms` would set
/// (`ms` a whole number in 1..2⁶³ as Redis reads one) and writes without them,
/// keeps a recorded expiry where Redis keeps one (`SET … KEEPTTL`), and forgets
/// it where Redis would (a `SET` without `KEEPTTL`, the key removed, by the
/// script or since the last call). Other arguments go to Redis as they are, so
/// Redis's own errors stay. `@TTLS@` stands for [`KEPT_TTLS`].
const KEEP_PRELUDE: &str = "local weir_redis, weir_h = redis, '@TTLS@' \
    local function weir_ms(x) x = tostring(x) \
      if string.match(x, '^[1-9]%d*$') and (#x < 19 or (#x == 19 and x <= '9223372036854775807')) then return x end \
    end \
    local function weir_forget(k) if weir_redis.call('EXISTS', k) == 0 then weir_redis.call('HDEL', weir_h, k) end end \
    for i = 1, #KEYS do weir_forget(KEYS[i]) end \
    local redis = setmetatable({call = function(...) \
      local a = {...} local c, k = string.upper(a[1]), a[2] local ms = nil \
      if c == 'PEXPIRE' and #a == 3 then ms = weir_ms(a[3]) \
      elseif c == 'SET' and #a == 5 and string.upper(a[4]) == 'PX' then ms = weir_ms(a[5]) end \
      if ms then \
        if c == 'PEXPIRE' then \
          if weir_redis.call('EXISTS', k) == 0 then return 0 end \
          weir_redis.call('HSET', weir_h, k, ms) return 1 \
        end \
        local r = weir_redis.call('SET', k, a[3]) weir_redis.call('HSET', weir_h, k, ms) return r \
      end \
      local r = weir_redis.call(unpack(a)) \
      if c == 'SET' and not (#a == 4 and string.upper(a[4]) == 'KEEPTTL') then weir_redis.call('HDEL', weir_h, k) end \
      if type(k) == 'string' then weir_forget(k) end \
      return r \
    end}, {__index = weir_redis}) \
    local weir_reply = (function()";

/// After the source: the reply, and each key's TTL (see `Db::ttls`).
const KEEP_POSTLUDE: &str = "\nend)() local weir_ttls = {} \
    for i = 1, #KEYS do \
      if weir_redis.call('EXISTS', KEYS[i]) == 0 then weir_ttls[i] = -2 \
      else weir_ttls[i] = weir_redis.call('HGET', weir_h, KEYS[i]) or -1 end \
    end \
    return {weir_reply, weir_ttls}";

impl Db {
    fn start() -> Self {
        let server = RedisServer::start();
        let client = redis::Client::open(server.url()).expect("client");
        let con = client.get_connection().expect("connect to the test server");
        Self { _server: server, con, keep: false, kept: HashMap::new(), ttls: Vec::new() }
    }

    /// A server whose keys the calls leave without an expiry (see `keep`).
    fn kept() -> Self {
        Self { keep: true, ..Self::start() }
    }

    fn run(&mut self, lua: &Lua, keys: &[&str], args: &[&str]) -> Reply {
        let script: &Script = if self.keep {
            self.kept.entry(lua.source()).or_insert_with(|| {
                assert!(lua.source().starts_with('\n'), "a script whose first line is not empty");
                let prelude = KEEP_PRELUDE.replace("@TTLS@", KEPT_TTLS);
                Script::new(&format!("{prelude}{}{KEEP_POSTLUDE}", lua.source()))
            })
        } else {
            lua
        };
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        // The key's name left out: the same error on another key is the same.
        let error = |e: String| Reply::Err(keys.iter().fold(e, |e, key| e.replace(key, "KEY")));
        let value = match invocation.invoke::<Value>(&mut self.con) {
            Ok(Value::Array(mut pair)) if self.keep => {
                assert_eq!(pair.len(), 2, "the harness's reply");
                let ttls = pair.pop().expect("the TTLs");
                self.ttls = redis::FromRedisValue::from_redis_value(ttls).expect("the TTLs");
                Ok(pair.pop().expect("the reply"))
            }
            Ok(other) if self.keep => panic!("the harness's reply: {other:?}"),
            value => value,
        };
        match value {
            Ok(Value::Int(i)) => Reply::Int(i),
            Ok(Value::Array(items)) => Reply::Ints(
                items
                    .into_iter()
                    .map(|v| match v {
                        Value::Int(i) => i,
                        other => panic!("a reply item that is not an integer: {other:?}"),
                    })
                    .collect(),
            ),
            Ok(Value::ServerError(e)) => error(redis::RedisError::from(e).to_string()),
            Ok(other) => panic!("unexpected reply {other:?}"),
            Err(e) => error(e.to_string()),
        }
    }

    /// A command sent as it is; with `keep`, a plain `SET` forgets the key's
    /// recorded expiry, as Redis forgets its expiry.
    fn cmd<T: redis::FromRedisValue>(&mut self, args: &[&str]) -> T {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        if self.keep && args[0].eq_ignore_ascii_case("SET") && !args.iter().any(|a| a.eq_ignore_ascii_case("KEEPTTL")) {
            let _: i64 = redis::cmd("HDEL").arg(KEPT_TTLS).arg(args[1]).query(&mut self.con).expect("HDEL");
        }
        cmd.query(&mut self.con).expect("command")
    }

    /// The key's serialized value and absolute expiry: equal before and after
    /// a call that writes nothing.
    fn footprint(&mut self, key: &str) -> (Option<Vec<u8>>, i64) {
        (self.cmd(&["DUMP", key]), self.cmd(&["PEXPIRETIME", key]))
    }

    /// Runs `script` in a transaction between two readings of Redis's clock, and
    /// returns its reply with the bounds of the TTL it set on `key` (ms): Redis
    /// took its time for the expiry between the two readings. `None` if the key
    /// is gone; `(-1, -1)` if it has no expiry. Then the span between the two
    /// readings (ms): Redis expires keys by its own clock even inside a
    /// transaction, so a key given less than that may be gone already.
    fn run_timed(&mut self, script: &Lua, keys: &[&str], args: &[&str], key: &str) -> (Reply, Option<(i64, i64)>, i64) {
        let mut invocation = script.prepare_invoke();
        for k in keys {
            invocation.key(*k);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        let _: String = invocation.load(&mut self.con).expect("load the script");
        let mut pipe = redis::pipe();
        pipe.atomic().cmd("TIME").invoke_script(&invocation).cmd("PEXPIRETIME").arg(key).cmd("TIME");
        let values: Vec<Value> = pipe.query(&mut self.con).expect("transaction");
        let ms = |v: &Value| -> i64 {
            let (s, us): (i64, i64) = redis::FromRedisValue::from_redis_value(v.clone()).expect("TIME");
            s * 1_000 + us / 1_000
        };
        let (before, after) = (ms(&values[0]), ms(&values[3]));
        let reply = match &values[1] {
            Value::Array(items) => {
                Reply::Ints(items.iter().map(|v| redis::FromRedisValue::from_redis_value(v.clone()).unwrap()).collect())
            }
            Value::Int(i) => Reply::Int(*i),
            other => Reply::Err(format!("{other:?}")),
        };
        let expiry: i64 = redis::FromRedisValue::from_redis_value(values[2].clone()).expect("PEXPIRETIME");
        let ttl = match expiry {
            -2 => None,
            -1 => Some((-1, -1)),
            at => Some((at - after, at - before)),
        };
        (reply, ttl, after - before)
    }
}

fn s(x: impl ToString) -> String {
    x.to_string()
}

/// Asserts that a TTL in `bounds` (ms) covers `needed_us` and not a whole ms more.
/// A key gone passes only if it may have expired by Redis's clock within the
/// call's `span_ms` (see `Db::run_timed`): a TTL that short was set and ran out.
#[track_caller]
fn assert_ttl_covers(bounds: Option<(i64, i64)>, span_ms: i64, needed_us: u64, what: &str) {
    let needed_ms = needed_us.div_ceil(1_000) as i64;
    let Some((low, high)) = bounds else {
        assert!(needed_ms <= span_ms, "{what}: the key is gone while it holds state");
        return;
    };
    // The lower bound is below 0 where the TTL is shorter than the span (the key
    // expires, by Redis's clock, before the second reading); the upper bound of an
    // expiry set within the span is at least 1 ms, and -1 for no expiry.
    assert!(high > 0, "{what}: no expiry ({bounds:?})");
    assert!(
        low <= needed_ms && needed_ms <= high,
        "{what}: TTL in {low}..={high} ms, the state matters {needed_us} µs"
    );
}

/// A 1 ms expiry read over a 4 ms transaction has bounds -3..=1 ms: an expiry,
/// not none (a loaded machine made one such span in about 50 runs).
#[test]
fn a_short_expiry_read_over_a_long_span_is_an_expiry() {
    assert_ttl_covers(Some((-3, 1)), 4, 1_000, "1 ms over 4 ms");
    let none = std::panic::catch_unwind(|| assert_ttl_covers(Some((-1, -1)), 4, 1_000, "none"));
    assert!(none.is_err(), "no expiry is still refused");
}

// ------------------------------------------------------------ the harness

/// One command on `KEYS[1]`: `ARGV[1]` the command, the rest its arguments
/// after the key. Reply: the command's integer, or 1.
static COMMAND: Lua = Lua::new(
    "\nlocal r = redis.call(ARGV[1], KEYS[1], unpack(ARGV, 2)) if type(r) == 'number' then return r end return 1",
);

/// The kept harness keeps and forgets expiries across calls as Redis does: the
/// same commands on a real Redis (expiries of an hour or more, which do not run
/// out during the test) and in the harness, with the same replies, and the
/// harness's TTL the one last set where Redis has one.
#[test]
fn the_kept_harness_keeps_and_forgets_expiries_as_redis_does() {
    let (mut real, mut kept) = (Db::start(), Db::kept());
    // (command and arguments after the key, the TTL the harness then records:
    // after an error, the one before)
    let steps: [(&[&str], i64); 14] = [
        (&["SET", "v", "PX", "3600000"], 3_600_000),
        (&["SET", "w", "KEEPTTL"], 3_600_000),
        (&["SET", "w", "keepttl"], 3_600_000),
        (&["SET", "x"], -1),
        (&["PEXPIRE", "7200000"], 7_200_000),
        (&["SET", "y", "KEEPTTL"], 7_200_000),
        (&["DEL"], -2),
        (&["PEXPIRE", "3600000"], -2),
        (&["SET", "z", "KEEPTTL"], -1),
        (&["SET", "v", "PX", "0"], -1),
        (&["SET", "v", "PX", "01"], -1),
        (&["SET", "v", "PX", "1.5"], -1),
        (&["PEXPIRE", "-5"], -2),
        (&["SET", "v", "px", "3600000"], 3_600_000),
    ];
    let ttl = |real: &mut Db| -> i64 { real.cmd(&["PTTL", "k"]) };
    // Redis's error without where it was raised (the script's hash, the line of
    // the harness's own call).
    let what = |reply: Reply| match reply {
        Reply::Err(e) => Reply::Err(e.split(" script: ").next().unwrap_or_default().to_owned()),
        other => other,
    };
    for (i, (args, recorded)) in steps.into_iter().enumerate() {
        let (a, b) = (what(real.run(&COMMAND, &["k"], args)), what(kept.run(&COMMAND, &["k"], args)));
        assert_eq!(a, b, "step {i}: {args:?}");
        assert_eq!(kept.ttls, [recorded], "step {i}: {args:?}");
        let left = ttl(&mut real);
        assert!(if recorded > 0 { 0 < left && left <= recorded } else { left == recorded }, "step {i}: PTTL {left}");
    }
    // A key written or removed outside the scripts.
    let _: () = real.cmd(&["SET", "k", "outside"]);
    let _: () = kept.cmd(&["SET", "k", "outside"]);
    let exists = ["EXISTS"].as_slice();
    assert_eq!(
        (real.run(&COMMAND, &["k"], exists), kept.run(&COMMAND, &["k"], exists)),
        (Reply::Int(1), Reply::Int(1))
    );
    assert_eq!((ttl(&mut real), kept.ttls[0]), (-1, -1), "a plain SET forgets the expiry");
    let keep = ["SET", "v", "KEEPTTL"].as_slice();
    for db in [&mut real, &mut kept] {
        assert_eq!(db.run(&COMMAND, &["k"], &["PEXPIRE", "3600000"]), Reply::Int(1));
        let _: i64 = db.cmd(&["DEL", "k"]);
        assert_eq!(db.run(&COMMAND, &["k"], keep), Reply::Int(1));
    }
    assert_eq!((ttl(&mut real), kept.ttls[0]), (-1, -1), "a key removed forgets its expiry");
}

// ---------------------------------------------------------------- sliding log

/// A sliding-log call at `now` for `n` in windows `(limit, P)`.
fn log(db: &mut Db, script: &Lua, key: &str, now: u64, n: u64, (limit, p): (u64, u64), tag: &str) -> Reply {
    db.run(script, &[key], &[&s(now), &s(n), &s(limit), &s(p), tag])
}

#[test]
fn log_window_boundary_is_exact() {
    let mut db = Db::kept();
    let (limit, p) = (3, 1_000_000);
    for (i, script) in [&scripts::LOG, &old::LOG].into_iter().enumerate() {
        let key = format!("b{i}");
        // Three at T0, all at one time.
        assert!(log(&mut db, script, &key, T0, 3, (limit, p), "a").admitted());
        // 1 µs before they leave: all live, and the request fits once the
        // entries at T0 have left, at T0 + P.
        let d = log(&mut db, script, &key, T0 + p - 1, 1, (limit, p), "b");
        assert_eq!(d.ints(), [0, (T0 + p - 1) as i64, (T0 + p - 1) as i64, 3, T0 as i64, T0 as i64]);
        // A peek at the boundary itself: entries at `at − P` have left.
        let peek = log(&mut db, script, &key, T0 + p, 0, (limit, p), "c");
        assert_eq!(peek.ints(), [0, (T0 + p) as i64, (T0 + p) as i64, 0, 0, 0]);
        // Still three in the set on the new script (a peek writes nothing), yet
        // an admission at the boundary sees none of them.
        assert!(log(&mut db, script, &key, T0 + p, 3, (limit, p), "d").admitted());
        assert!(!log(&mut db, script, &key, T0 + p, 1, (limit, p), "e").admitted());
        let card: u64 = db.cmd(&["ZCARD", &key]);
        assert_eq!(card, 3, "the admission removed the entries that left");
    }
}

#[test]
fn log_many_entries_at_one_time_and_denials_never_over_admit() {
    let mut db = Db::kept();
    let (limit, p) = (5_000, 10_000_000);
    let key = "many";
    // 4 999 at one time, across several ZADD batches; then exactly one more fits.
    assert!(log(&mut db, &scripts::LOG, key, T0, 4_999, (limit, p), "a").admitted());
    let card: u64 = db.cmd(&["ZCARD", key]);
    assert_eq!(card, 4_999);
    assert!(!log(&mut db, &scripts::LOG, key, T0 + 1, 2, (limit, p), "b").admitted());
    assert!(log(&mut db, &scripts::LOG, key, T0 + 1, 1, (limit, p), "c").admitted());
    // Denials of all sizes at any time before those at T0 leave write nothing.
    let before = db.footprint(key);
    for t in [T0 + 1, T0 + 2, T0 + p - 1] {
        for n in [1, 2, 5_000] {
            let d = log(&mut db, &scripts::LOG, key, t, n, (limit, p), &format!("x{t}.{n}"));
            assert_eq!(d.ints()[..4], [0, t as i64, t as i64, 5_000], "at {t} for {n}");
            assert_eq!(d.ints()[5], if n == 5_000 { T0 as i64 + 1 } else { T0 as i64 }, "at {t} for {n}");
            assert_eq!(db.footprint(key), before, "a denial at {t} for {n} wrote");
        }
    }
    // At T0 + P the 4 999 have left: one is live, 4 999 fit and 5 000 do not.
    assert!(!log(&mut db, &scripts::LOG, key, T0 + p, 5_000, (limit, p), "y").admitted());
    assert!(log(&mut db, &scripts::LOG, key, T0 + p, 4_999, (limit, p), "z").admitted());
    let card: u64 = db.cmd(&["ZCARD", key]);
    assert_eq!(card, 5_000);
}

#[test]
fn log_retry_after_points_at_the_entry_that_lets_the_request_fit() {
    let mut db = Db::kept();
    let (limit, p) = (4, 1_000);
    let key = "retry";
    // Two at 0 (the time 0 is a time, not "use TIME"), one at 10, one at 20.
    assert!(log(&mut db, &scripts::LOG, key, 0, 2, (limit, p), "a").admitted());
    assert!(log(&mut db, &scripts::LOG, key, 10, 1, (limit, p), "b").admitted());
    assert!(log(&mut db, &scripts::LOG, key, 20, 1, (limit, p), "c").admitted());
    for (n, blocking) in [(1u64, 0i64), (2, 0), (3, 10), (4, 20)] {
        let d = log(&mut db, &scripts::LOG, key, 30, n, (limit, p), "d");
        assert_eq!(d.ints(), [0, 30, 30, 4, 20, blocking], "for {n}");
        // And at blocking + P it fits, not a µs earlier.
        let early = log(&mut db, &scripts::LOG, key, blocking as u64 + p - 1, 0, (limit, p), "e");
        assert!(early.ints()[3] as u64 + n > limit, "for {n}, 1 µs early: {early:?}");
        let on_time = log(&mut db, &scripts::LOG, key, blocking as u64 + p, 0, (limit, p), "e");
        assert!(on_time.ints()[3] as u64 + n <= limit, "for {n} on time: {on_time:?}");
    }
}

#[test]
fn log_clock_stepping_back_and_refunds_do_not_over_admit() {
    let mut db = Db::kept();
    let (limit, p) = (2, 1_000);
    let key = "back";
    assert!(log(&mut db, &scripts::LOG, key, 5_000, 2, (limit, p), "a").admitted());
    // A peek far later writes nothing; then the clock steps back into the
    // window of the entries: they still count (the old script removed them at
    // the peek, and then admitted here).
    let _ = log(&mut db, &scripts::LOG, key, 9_000, 0, (limit, p), "b");
    let d = log(&mut db, &scripts::LOG, key, 5_500, 1, (limit, p), "c");
    assert_eq!(d.ints(), [0, 5_500, 5_500, 2, 5_000, 5_000]);
    // A step back behind the newest entry is stamped at the newest entry.
    let d = log(&mut db, &scripts::LOG, key, 100, 1, (limit, p), "d");
    assert_eq!(d.ints(), [0, 100, 5_000, 2, 5_000, 5_000]);
    // A refund of one gives one back, once, at the entry's stamp.
    assert_eq!(db.run(&scripts::LOG_REFUND, &[key], &["5600", "1", "5000"]), Reply::Int(5_600));
    let d = log(&mut db, &scripts::LOG, key, 5_600, 1, (limit, p), "e");
    assert_eq!(d.ints(), [1, 5_600, 5_600, 2, 5_600, 0]);
    assert!(!log(&mut db, &scripts::LOG, key, 5_600, 1, (limit, p), "f").admitted());
    // A refund stamped at a time nothing was admitted at removes nothing.
    assert_eq!(db.run(&scripts::LOG_REFUND, &[key], &["5600", "5", "5001"]), Reply::Int(5_600));
    let card: u64 = db.cmd(&["ZCARD", key]);
    assert_eq!(card, 2);
    // A refund of entries that already left gives nothing back to live ones.
    assert!(log(&mut db, &scripts::LOG, "left", 0, 2, (limit, p), "g").admitted());
    let _ = log(&mut db, &scripts::LOG, "left", 1_000, 0, (limit, p), "h");
    assert!(log(&mut db, &scripts::LOG, "left", 1_000, 2, (limit, p), "i").admitted());
    assert_eq!(db.run(&scripts::LOG_REFUND, &["left"], &["1000", "2", "0"]), Reply::Int(1_000));
    assert!(!log(&mut db, &scripts::LOG, "left", 1_000, 1, (limit, p), "j").admitted());
}

// ------------------------------------------------ denials, peeks and expiries

/// Each script's call that must write nothing, after a setup that admits.
#[test]
fn denials_and_peeks_write_nothing() {
    // Long enough (a state holds for an hour or more) that no key expires by
    // Redis's clock during the test.
    const P: u64 = 3_600_000_000;
    let mut db = Db::start();
    let t = s(T0);
    let later = s(T0 + 10);
    let (p, full) = (s(P), s(2 * P));
    let (stale_f, stale_s) = (s(T0 / P - 1), s(T0 / P - 2));
    let (left, empty, nothing_at) = (format!("p{}", T0 + 2 * P), s(T0 + 5 * P), s(T0 + 1));
    // GCRA: a full bucket of 2 at P each.
    assert!(db.run(&scripts::GCRA, &["g"], &[&t, "1", &full, &full]).admitted());
    // Fixed and sliding windows of 2 per P, full.
    assert!(db.run(&scripts::FIXED, &["f"], &[&t, "2", "2", &p]).admitted());
    assert!(db.run(&scripts::SLIDING, &["s"], &[&t, "2", "2", &p]).admitted());
    assert!(db.run(&scripts::LOG, &["l"], &[&t, "2", "2", &p, "a"]).admitted());
    assert_eq!(db.run(&scripts::LEASE, &["e"], &[&t, &full, &p, &full]).ints()[0], 2);
    let calls: Vec<(&Lua, &str, Vec<&str>)> = vec![
        (&scripts::GCRA, "g", vec![&later, "1", &p, &full]),
        (&scripts::GCRA, "g", vec![&later, "0", "0", &full]),
        (&scripts::GCRA, "g", vec![&later, "0", &p, &full]),
        (&scripts::FIXED, "f", vec![&later, "1", "2", &p]),
        (&scripts::FIXED, "f", vec![&later, "0", "2", &p]),
        (&scripts::FIXED, "f", vec![&later, "3", "2", &p]),
        (&scripts::SLIDING, "s", vec![&later, "1", "2", &p]),
        (&scripts::SLIDING, "s", vec![&later, "0", "2", &p]),
        (&scripts::LOG, "l", vec![&later, "1", "2", &p, "b"]),
        (&scripts::LOG, "l", vec![&later, "0", "2", &p, "b"]),
        (&scripts::LOG, "l", vec![&later, "3", "2", &p, "b"]),
        // A peek after every entry has left, and a denial there of more than the limit.
        (&scripts::LOG, "l", vec![&left, "0", "2", &p, "b"]),
        (&scripts::LOG, "l", vec![&empty, "3", "2", &p, "b"]),
        (&scripts::LEASE, "e", vec![&later, &full, &p, &full]),
        // Refunds that find nothing to give back.
        (&scripts::WINDOW_REFUND, "f", vec![&later, "1", &stale_f, "f"]),
        (&scripts::WINDOW_REFUND, "s", vec![&later, "1", &stale_s, "s"]),
        (&scripts::LOG_REFUND, "l", vec![&later, "1", &nothing_at]),
        (&scripts::GCRA_REFUND, "g", vec![&later, &later, "0"]),
    ];
    for (script, key, args) in calls {
        let before = db.footprint(key);
        assert!(before.0.is_some(), "{key} holds state");
        let reply = db.run(script, &[key], &args);
        assert!(!matches!(reply, Reply::Err(_)), "{key} {args:?}: {reply:?}");
        if let Reply::Ints(v) = &reply {
            assert_eq!(v[0], 0, "{key} {args:?}: {reply:?}");
        }
        assert_eq!(db.footprint(key), before, "{key} {args:?} wrote");
    }
}

#[test]
fn every_admission_expires_its_key_when_its_state_stops_mattering() {
    let mut db = Db::start();
    // Times: aligned, mid-window, last µs of a window, a step back.
    let p = 1_000_000u64;
    let times = [T0, T0 + 1, T0 + 999_999, T0 + 1_000_000, T0 + 1_500_001, T0 + 400, T0 + 2_999_999];
    for (i, &now) in times.iter().enumerate() {
        // Keys of their own: what an earlier one set may have run out by now.
        let keys = ["g", "e", "f", "s", "l"].map(|k| format!("{k}{i}"));
        let [g, e, f, s_, l] = keys.each_ref().map(String::as_str);
        let now_s = s(now);
        // GCRA: 250 µs per unit, burst 10.
        let (r, ttl, span) = db.run_timed(&scripts::GCRA, &[g], &[&now_s, "1", "250", "2500"], g);
        if r.admitted() {
            assert_ttl_covers(ttl, span, r.ints()[2] as u64, &format!("gcra at {i}"));
        }
        let (r, ttl, span) = db.run_timed(&scripts::LEASE, &[e], &[&now_s, "1000", "250", "2500"], e);
        if r.admitted() {
            assert_ttl_covers(ttl, span, r.ints()[2] as u64, &format!("lease at {i}"));
        }
        let (r, ttl, span) = db.run_timed(&scripts::FIXED, &[f], &[&now_s, "1", "3", &s(p)], f);
        if r.admitted() {
            let window = r.ints()[2] as u64;
            assert_ttl_covers(ttl, span, (window + 1) * p - now, &format!("fixed at {i}"));
        }
        let (r, ttl, span) = db.run_timed(&scripts::SLIDING, &[s_], &[&now_s, "1", "3", &s(p)], s_);
        if r.admitted() {
            let window = r.ints()[2] as u64;
            assert_ttl_covers(ttl, span, (window + 2) * p - now, &format!("sliding at {i}"));
        }
        let (r, ttl, span) = db.run_timed(&scripts::LOG, &[l], &[&now_s, "1", "3", &s(p), &format!("t{i}")], l);
        if r.admitted() {
            assert_ttl_covers(ttl, span, r.ints()[2] as u64 + p - now, &format!("log at {i}"));
        }
        // A GCRA refund sets an expiry of its own.
        let (_, ttl, _) = db.run_timed(&scripts::GCRA_REFUND, &[g], &[&now_s, &now_s, "250"], g);
        assert!(ttl.is_none_or(|(low, _)| low >= 0), "gcra refund at {i}: {ttl:?}");
    }
    // A window refund that leaves part of the state keeps the key's expiry, to
    // the ms: windows of an hour, so that no key expires by Redis's clock
    // meanwhile however slowly the test runs.
    let hour = 3_600_000_000u64;
    let h = s(hour);
    for (i, now) in [T0, T0 + 1].into_iter().enumerate() {
        let (now_s, window) = (s(now), now / hour);
        for (script, key, kind, left) in [
            (&scripts::FIXED, format!("rf{i}"), "f", format!("{window}:1")),
            (&scripts::SLIDING, format!("rs{i}"), "s", format!("{window}:0:1")),
        ] {
            assert!(db.run(script, &[&key], &[&now_s, "2", "3", &h]).admitted(), "{key}");
            let before: i64 = db.cmd(&["PEXPIRETIME", &key]);
            assert!(before > 0, "{key}: an expiry ({before})");
            let refund = db.run(&scripts::WINDOW_REFUND, &[&key], &[&now_s, "1", &s(window), kind]);
            assert_eq!(refund, Reply::Int(now as i64), "{key}");
            let state: Option<String> = db.cmd(&["GET", &key]);
            assert_eq!(state.as_deref(), Some(left.as_str()), "{key}: one of two given back");
            let after: i64 = db.cmd(&["PEXPIRETIME", &key]);
            assert_eq!(after, before, "{key}: the refund kept the expiry");
        }
    }
    // A clock stepping back behind a stored state: the state still matters until
    // its own window ends (or its TAT), counted from the earlier time.
    let (first, back) = (s(T0 + hour / 2), s(T0 + 10));
    for (script, key, windows) in [(&scripts::FIXED, "bf", 1), (&scripts::SLIDING, "bs", 2)] {
        assert!(db.run(script, &[key], &[&first, "1", "3", &h]).admitted());
        let (r, ttl, span) = db.run_timed(script, &[key], &[&back, "1", "3", &h], key);
        assert_eq!(r.ints()[2] as u64, T0 / hour, "{key}");
        assert_ttl_covers(ttl, span, (T0 / hour + windows) * hour - (T0 + 10), key);
    }
    assert!(db.run(&scripts::LOG, &["bl"], &[&first, "1", "3", &h, "a"]).admitted());
    let (r, ttl, span) = db.run_timed(&scripts::LOG, &["bl"], &[&back, "1", "3", &h, "b"], "bl");
    assert_eq!(r.ints()[2] as u64, T0 + hour / 2, "stamped at the newest entry");
    assert_ttl_covers(ttl, span, hour / 2 + hour - 10, "log stepping back");
    let three = s(3 * hour);
    assert!(db.run(&scripts::GCRA, &["bg"], &[&first, "1", &h, &three]).admitted());
    let (r, ttl, span) = db.run_timed(&scripts::GCRA, &["bg"], &[&back, "1", &h, &three], "bg");
    assert_eq!(r.ints()[2] as u64, hour / 2 + 2 * hour - 10);
    assert_ttl_covers(ttl, span, hour / 2 + 2 * hour - 10, "gcra stepping back");
    // Windows as long as a u64 of µs: an expiry all the same, as long as Redis takes.
    let max = s(u64::MAX);
    let t0 = s(T0);
    for (script, key, args) in [
        (&scripts::FIXED, "hf", vec![&t0, "1", "3", &max]),
        (&scripts::SLIDING, "hs", vec![&t0, "1", "3", &max]),
        (&scripts::LOG, "hl", vec![&t0, "1", "3", &max, "m"]),
        (&scripts::GCRA, "hg", vec![&t0, "1", &max, &max]),
    ] {
        let (r, ttl, _) = db.run_timed(script, &[key], &args, key);
        assert!(r.admitted(), "{key}: {r:?}");
        let (low, _) = ttl.expect("the key holds state");
        assert!(low > 1 << 50, "{key}: an expiry of {low} ms");
    }
    // `p`: no expiry on any write.
    for (script, key, args) in [
        (&scripts::GCRA, "pg", vec!["p5", "1", "250", "2500"]),
        (&scripts::FIXED, "pf", vec!["p5", "1", "3", "1000"]),
        (&scripts::SLIDING, "ps", vec!["p5", "1", "3", "1000"]),
        (&scripts::LOG, "pl", vec!["p5", "1", "3", "1000", "x"]),
        (&scripts::LEASE, "pe", vec!["p5", "1000", "250", "2500"]),
        (&scripts::GCRA_REFUND, "pg", vec!["p6", "5", "100"]),
    ] {
        let (r, ttl, _) = db.run_timed(script, &[key], &args, key);
        assert!(!matches!(r, Reply::Err(_)), "{key}: {r:?}");
        assert_eq!(ttl, Some((-1, -1)), "{key}");
    }
}

// ------------------------------------------------------------- edge arguments

#[test]
fn edge_arguments_are_decided_as_before_and_never_write_unreadable_state() {
    let mut db = Db::kept();
    let times = ["0", "1", "p0", "999", &s(T0), &s(EXACT - 1_000_000)];
    let big = s(u64::MAX);
    let ns = ["0", "1", "2", "3", "1000000", &big];
    let periods = ["1", "1000", "3600000000", &big];
    let mut case = 0;
    for t in times {
        for n in ns {
            for p in periods {
                case += 1;
                let arg_sets: Vec<(&Lua, &Lua, Vec<String>)> = vec![
                    (&scripts::FIXED, &old::FIXED, vec![s(t), s(n), s(3), s(p)]),
                    (&scripts::SLIDING, &old::SLIDING, vec![s(t), s(n), s(3), s(p)]),
                    (&scripts::LOG, &old::LOG, vec![s(t), s(n), s(3), s(p), s("m")]),
                    (&scripts::GCRA, &old::GCRA, vec![s(t), s(if n == "0" { "0" } else { "1" }), s(n), s(p)]),
                    (&scripts::LEASE, &old::LEASE, vec![s(t), s(n), s(1), s(p)]),
                ];
                for (j, (new, old, args)) in arg_sets.into_iter().enumerate() {
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    let (kn, ko) = (format!("n{case}.{j}"), format!("o{case}.{j}"));
                    // Twice: the second call reads what the first wrote.
                    for round in 0..2 {
                        let a = db.run(new, &[&kn], &args);
                        let x = db.ttls[0];
                        let b = db.run(old, &[&ko], &args);
                        let y = db.ttls[0];
                        assert_eq!(a, b, "{args:?}, call {round}");
                        assert!(!matches!(a, Reply::Err(_)), "{args:?}, call {round}: {a:?}");
                        assert_eq!(x, y, "{args:?}, call {round}: expiries");
                        if round == 0 {
                            assert!(x != -1 || t.starts_with('p'), "{args:?}: a key without an expiry");
                        }
                    }
                }
            }
        }
    }
}

// ------------------------------------------------------ Lua's doubles, times

#[test]
fn times_beyond_exact_doubles_are_refused_not_rounded() {
    let mut db = Db::kept();
    // A client clock at its last readings: u64::MAX ns is 18 446 744 073 709 551
    // µs, past 2⁵³ µs, where a double's integers are 2 or 4 apart. Rounded, a
    // GCRA debt of 1 µs vanished into the TAT and every call was admitted.
    let last = s(u64::MAX / 1_000);
    let mut admitted = 0;
    for _ in 0..20 {
        match db.run(&scripts::GCRA, &["g"], &[&last, "1", "1", "10"]) {
            Reply::Err(e) => assert!(e.contains("WEIRTIME"), "{e}"),
            r => admitted += usize::from(r.admitted()),
        }
    }
    assert!(admitted <= 10, "{admitted} of 20 admitted with a burst of 10");
    // Times that are not whole, non-negative µs below 2⁵³: refused, nothing written.
    // (A negative time wrote a fixed window "-1:1", which no later call could read.)
    let bad =
        [s(EXACT), s(EXACT + 1), s(u64::MAX), s("-5"), s("-0"), s("1.5"), s("inf"), s("nan"), s("p-1"), s("1e300")];
    for t in &bad {
        let calls: Vec<(&Lua, Vec<&str>)> = vec![
            (&scripts::GCRA, vec![t, "1", "1", "10"]),
            (&scripts::GCRA_REFUND, vec![t, "0", "1"]),
            (&scripts::FIXED, vec![t, "1", "3", "1000"]),
            (&scripts::SLIDING, vec![t, "1", "3", "1000"]),
            (&scripts::WINDOW_REFUND, vec![t, "1", "0", "f"]),
            (&scripts::LOG, vec![t, "1", "3", "1000", "m"]),
            (&scripts::LOG_REFUND, vec![t, "1", "0"]),
            (&scripts::LEASE, vec![t, "1", "1", "10"]),
        ];
        for (script, args) in calls {
            let key = format!("bad:{t}");
            let r = db.run(script, &[&key], &args);
            assert!(matches!(&r, Reply::Err(e) if e.contains("WEIRTIME")), "{args:?}: {r:?}");
            let exists: i64 = db.cmd(&["EXISTS", &key]);
            assert_eq!(exists, 0, "{args:?} wrote");
        }
    }
    // The last time below 2⁵³ is a time; so are 0 and the server's clock.
    let r = db.run(&scripts::GCRA, &["g2"], &[&s(EXACT - 1), "1", "1", "10"]);
    assert_eq!(r.ints(), [1, EXACT as i64 - 1, 1]);
    assert_eq!(db.run(&scripts::GCRA, &["g3"], &["0", "1", "1", "10"]).ints(), [1, 0, 1]);
    for clock in ["", "p", "x", "p-"] {
        let r = db.run(&scripts::GCRA, &["g4"], &[clock, "0", "0", "10"]);
        assert!(r.ints()[1] > T0 as i64, "{clock:?} is the server's time: {r:?}");
    }
}

// ------------------------------------------- the scripts before the rewrite

/// States written by the previous scripts are read by the new ones and the
/// reverse (a rolling deploy shares keys between both), with the same replies.
#[test]
fn states_cross_between_the_previous_scripts_and_the_new_ones() {
    let mut db = Db::kept();
    type Step<'a> = (&'a Lua, &'a Lua, Vec<String>);
    let t = |dt: u64| s(T0 + dt);
    let sequences: Vec<Vec<Step>> = vec![
        vec![
            (&scripts::GCRA, &old::GCRA, vec![t(0), s(1), s(300), s(1000)]),
            (&scripts::GCRA, &old::GCRA, vec![t(10), s(1), s(300), s(1000)]),
            (&scripts::GCRA_REFUND, &old::GCRA_REFUND, vec![t(20), t(10), s(300)]),
            (&scripts::GCRA, &old::GCRA, vec![t(30), s(1), s(600), s(1000)]),
            (&scripts::GCRA, &old::GCRA, vec![t(40), s(0), s(300), s(1000)]),
        ],
        vec![
            (&scripts::FIXED, &old::FIXED, vec![t(0), s(2), s(3), s(1000)]),
            (&scripts::FIXED, &old::FIXED, vec![t(999), s(1), s(3), s(1000)]),
            (&scripts::FIXED, &old::FIXED, vec![t(999), s(1), s(3), s(1000)]),
            (&scripts::WINDOW_REFUND, &old::WINDOW_REFUND, vec![t(999), s(2), s(T0 / 1000), s("f")]),
            (&scripts::FIXED, &old::FIXED, vec![t(999), s(2), s(3), s(1000)]),
            (&scripts::FIXED, &old::FIXED, vec![t(1000), s(3), s(3), s(1000)]),
            (&scripts::FIXED, &old::FIXED, vec![t(500), s(1), s(3), s(1000)]),
        ],
        vec![
            (&scripts::SLIDING, &old::SLIDING, vec![t(0), s(3), s(4), s(1000)]),
            (&scripts::SLIDING, &old::SLIDING, vec![t(1000), s(1), s(4), s(1000)]),
            (&scripts::SLIDING, &old::SLIDING, vec![t(1250), s(1), s(4), s(1000)]),
            (&scripts::WINDOW_REFUND, &old::WINDOW_REFUND, vec![t(1300), s(1), s(T0 / 1000), s("s")]),
            (&scripts::SLIDING, &old::SLIDING, vec![t(1300), s(1), s(4), s(1000)]),
            (&scripts::SLIDING, &old::SLIDING, vec![t(2999), s(2), s(4), s(1000)]),
        ],
        vec![
            (&scripts::LOG, &old::LOG, vec![t(0), s(2), s(3), s(1000), s("a")]),
            (&scripts::LOG, &old::LOG, vec![t(10), s(1), s(3), s(1000), s("b")]),
            (&scripts::LOG, &old::LOG, vec![t(20), s(1), s(3), s(1000), s("c")]),
            (&scripts::LOG_REFUND, &old::LOG_REFUND, vec![t(30), s(1), t(10)]),
            (&scripts::LOG, &old::LOG, vec![t(1000), s(2), s(3), s(1000), s("d")]),
            (&scripts::LOG, &old::LOG, vec![t(1010), s(1), s(3), s(1000), s("e")]),
        ],
        vec![
            (&scripts::LEASE, &old::LEASE, vec![t(0), s(500), s(100), s(1000)]),
            (&scripts::LEASE, &old::LEASE, vec![t(0), s(600), s(100), s(1000)]),
            (&scripts::GCRA, &old::GCRA, vec![t(0), s(1), s(400), s(1000)]),
            (&scripts::LEASE, &old::LEASE, vec![t(100), s(500), s(100), s(1000)]),
        ],
    ];
    // Per sequence: each step by the new script alone, the previous alone, and
    // alternating both ways; the replies and the stored states agree.
    for (i, steps) in sequences.iter().enumerate() {
        let mut runs: Vec<Vec<Reply>> = Vec::new();
        let mut states = Vec::new();
        for pattern in 0..4 {
            let key = format!("x{i}:{pattern}");
            let mut replies = Vec::new();
            for (j, (new, old, args)) in steps.iter().enumerate() {
                let use_new = match pattern {
                    0 => true,
                    1 => false,
                    2 => j % 2 == 0,
                    _ => j % 2 == 1,
                };
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let reply = db.run(if use_new { new } else { old }, &[&key], &args);
                assert!(!matches!(reply, Reply::Err(_)), "sequence {i} step {j}: {reply:?}");
                replies.push(reply);
            }
            runs.push(replies);
            let kind: String = db.cmd(&["TYPE", &key]);
            states.push(if kind == "string" { db.cmd::<Option<String>>(&["GET", &key]) } else { None });
        }
        for run in &runs[1..] {
            assert_eq!(run, &runs[0], "sequence {i}");
        }
        assert!(states.iter().all(|s| s == &states[0]), "sequence {i}: {states:?}");
    }
    // Odd strings are read alike: accepted alike, refused alike.
    for state in ["5:3:", "5:3:7", "5:3", "5", "-1:2", "1e3:1", " 5:3", "5:3:7:", "0x10", "12", "abc", "", "00:01:02"] {
        for (new, old, args) in [
            (&scripts::GCRA, &old::GCRA, vec![s(T0), s(1), s(1), s(10)]),
            (&scripts::FIXED, &old::FIXED, vec![s(5_000), s(1), s(9), s(1000)]),
            (&scripts::SLIDING, &old::SLIDING, vec![s(5_000), s(1), s(9), s(1000)]),
            (&scripts::WINDOW_REFUND, &old::WINDOW_REFUND, vec![s(5_000), s(1), s(5), s("f")]),
            (&scripts::WINDOW_REFUND, &old::WINDOW_REFUND, vec![s(5_000), s(1), s(5), s("s")]),
            (&scripts::LEASE, &old::LEASE, vec![s(T0), s(1), s(1), s(10)]),
        ] {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let _: () = db.cmd(&["SET", "on", state]);
            let _: () = db.cmd(&["SET", "oo", state]);
            let a = db.run(new, &["on"], &args);
            let b = db.run(old, &["oo"], &args);
            assert_eq!(a, b, "state {state:?}, {args:?}");
            let (x, y): (Option<String>, Option<String>) = (db.cmd(&["GET", "on"]), db.cmd(&["GET", "oo"]));
            assert_eq!(x, y, "state {state:?}, {args:?}");
        }
    }
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// One random operation's script pair and arguments, on the named state.
struct Op {
    new: &'static Lua,
    old: &'static Lua,
    keys: Vec<&'static str>,
    args: Vec<String>,
}

/// The same random operations through the previous scripts (on keys `o:…`) and
/// the new ones (`n:…`): identical replies and identical window and GCRA states.
/// With `steps_back`, the clock sometimes steps back, and the sliding log only
/// has to be as strict as before: the previous script removed the entries that
/// left at a denial or a peek, so that a step back found them gone, and the new
/// one still counts them (it admits only what the previous one admitted).
fn differential(seed: u64, ops: usize, steps_back: bool) {
    let mut db = Db::kept();
    let mut rng = Rng(seed);
    let mut now = T0 + rng.below(1_000_000_000);
    let mut log_now = now;
    // Decision times to refund at: (gcra µs, fixed window, sliding window, log stamp).
    let mut admitted: Vec<(&'static str, String)> = Vec::new();
    let (limit, p) = (*rng.pick(&[1u64, 3, 5]), *rng.pick(&[1_000u64, 7_000, 1_000_000]));
    let interval = *rng.pick(&[1u64, 250, 100_000]);
    let burst = *rng.pick(&[1u64, 4]);
    for i in 0..ops {
        let step = match rng.below(10) {
            0..=2 => 0,
            3..=5 => rng.below(p / 4 + 1),
            6 | 7 => rng.below(2 * p + 2),
            8 => rng.pick(&[p - 1, p, p + 1, 2 * p]).to_owned(),
            _ => 5 * p,
        };
        now += step;
        if steps_back && rng.below(8) == 0 {
            now -= rng.below(2 * p).min(now - T0);
        }
        log_now = if steps_back { now } else { log_now.max(now) };
        let persist = if rng.below(6) == 0 { "p" } else { "" };
        let clock = format!("{persist}{now}");
        let n = rng.below(limit + 2);
        let op = match rng.below(9) {
            0 | 1 => {
                let cost = n.min(burst + 1) * interval;
                let flag = if n == 0 { "0" } else { "1" };
                if rng.below(3) == 0 {
                    Op {
                        new: &scripts::GCRA,
                        old: &old::GCRA,
                        keys: vec!["g", "g2"],
                        args: vec![clock, s(flag), s(cost), s(burst * interval), s(cost * 2), s(burst * interval * 3)],
                    }
                } else {
                    Op {
                        new: &scripts::GCRA,
                        old: &old::GCRA,
                        keys: vec!["g"],
                        args: vec![clock, s(flag), s(cost), s(burst * interval)],
                    }
                }
            }
            2 => {
                let at = admitted.iter().rev().find(|(k, _)| *k == "g").map_or(s(now), |(_, a)| a.clone());
                let credit = rng.below(burst + 1) * interval;
                Op {
                    new: &scripts::GCRA_REFUND,
                    old: &old::GCRA_REFUND,
                    keys: vec!["g"],
                    args: vec![clock, at, s(credit)],
                }
            }
            3 => {
                Op { new: &scripts::FIXED, old: &old::FIXED, keys: vec!["f"], args: vec![clock, s(n), s(limit), s(p)] }
            }
            4 => Op {
                new: &scripts::SLIDING,
                old: &old::SLIDING,
                keys: vec!["s"],
                args: vec![clock, s(n), s(limit), s(p)],
            },
            5 => {
                let (key, kind) = *rng.pick(&[("f", "f"), ("s", "s")]);
                let at = admitted.iter().rev().find(|(k, _)| *k == key).map_or(s(now / p), |(_, a)| a.clone());
                Op {
                    new: &scripts::WINDOW_REFUND,
                    old: &old::WINDOW_REFUND,
                    keys: vec![key],
                    args: vec![clock, s(rng.below(limit + 1)), at, s(kind)],
                }
            }
            6 | 7 => Op {
                new: &scripts::LOG,
                old: &old::LOG,
                keys: vec!["l"],
                args: vec![format!("{persist}{log_now}"), s(n), s(limit), s(p), format!("m{i}")],
            },
            _ => {
                let at = admitted.iter().rev().find(|(k, _)| *k == "l").map_or(s(log_now), |(_, a)| a.clone());
                Op {
                    new: &scripts::LOG_REFUND,
                    old: &old::LOG_REFUND,
                    keys: vec!["l"],
                    args: vec![format!("{persist}{log_now}"), s(rng.below(limit + 1)), at],
                }
            }
        };
        let args: Vec<&str> = op.args.iter().map(String::as_str).collect();
        let new_keys: Vec<String> = op.keys.iter().map(|k| format!("n:{k}")).collect();
        let old_keys: Vec<String> = op.keys.iter().map(|k| format!("o:{k}")).collect();
        let a = db.run(op.new, &new_keys.iter().map(String::as_str).collect::<Vec<_>>(), &args);
        let new_ttls = db.ttls.clone();
        let b = db.run(op.old, &old_keys.iter().map(String::as_str).collect::<Vec<_>>(), &args);
        let what = format!("seed {seed}, op {i}: {:?} {args:?}", op.keys);
        if op.keys[0] != "l" {
            // Expiries: the same ones, kept and forgotten alike.
            assert_eq!(new_ttls, db.ttls, "{what}: expiries");
        }
        if steps_back && op.keys == ["l"] && std::ptr::eq(op.new, &scripts::LOG) {
            assert!(!a.admitted() || b.admitted(), "{what}: new {a:?}, previous {b:?}");
        } else if !(steps_back && op.keys == ["l"]) {
            assert_eq!(a, b, "{what}");
        }
        if let Reply::Ints(v) = &a
            && v[0] >= 1
            && args[1] != "0"
        {
            match op.keys[0] {
                "g" => admitted.push(("g", s(v[1]))),
                "f" | "s" => admitted.push((op.keys[0], s(v[2]))),
                _ => admitted.push(("l", s(v[2]))),
            }
        }
        for key in ["g", "g2", "f", "s"] {
            let (x, y): (Option<String>, Option<String>) =
                (db.cmd(&["GET", &format!("n:{key}")]), db.cmd(&["GET", &format!("o:{key}")]));
            assert_eq!(x, y, "{what}: state of {key}");
        }
    }
}

#[test]
fn the_new_scripts_decide_as_the_previous_ones() {
    for seed in 1..=12u64 {
        differential(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15), 400, false);
    }
}

#[test]
fn with_the_clock_stepping_back_the_new_scripts_are_as_strict() {
    for seed in 1..=12u64 {
        differential(seed.wrapping_mul(0x2545_f491_4f6c_dd1d), 400, true);
    }
}

// -------------------------------------------- the previous scripts, verbatim

/// weir-redis's scripts as they were before b3cb723 (git show b3cb723~1:crates/weir-redis/src/scripts.rs),
/// their doc comments left out.
#[allow(dead_code)]
mod old {
    use super::Lua;

    macro_rules! now_prologue {
        () => {
            r#"
local clock = ARGV[1]
local persist = string.sub(clock, 1, 1) == 'p'
if persist then clock = string.sub(clock, 2) end
local now = tonumber(clock)
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function int(x) return string.format('%.0f', x) end
local function put(key, value, ttl)
  if persist then redis.call('SET', key, value) else redis.call('SET', key, value, 'PX', ttl) end
end
"#
        };
    }

    pub(crate) static GCRA: Lua = Lua::new(concat!(
        now_prologue!(),
        r#"
local admit = ARGV[2] == '1'
local fits = true
local used = {}
local k = #KEYS
for i = 1, k do
  local tat = now
  local v = redis.call('GET', KEYS[i])
  if v then
    tat = tonumber(v)
    if not tat then
      return redis.error_reply('WEIRSTATE ' .. KEYS[i] .. ' does not hold a GCRA state')
    end
    if tat < now then tat = now end
  end
  used[i] = tat - now
  if used[i] + tonumber(ARGV[2 * i + 1]) > tonumber(ARGV[2 * i + 2]) then fits = false end
end
local reply = {0, now}
if fits and admit then
  reply[1] = 1
  for i = 1, k do
    local debt = used[i] + tonumber(ARGV[2 * i + 1])
    used[i] = debt
    if debt > 0 then
      put(KEYS[i], int(now + debt), int(math.ceil(debt / 1000)))
    end
  end
end
for i = 1, k do reply[i + 2] = used[i] end
return reply
"#
    ));

    pub(crate) static GCRA_REFUND: Lua = Lua::new(concat!(
        now_prologue!(),
        r#"
local since = now - tonumber(ARGV[2])
if since < 0 then since = 0 end
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if v then
    local tat = tonumber(v)
    if not tat then
      return redis.error_reply('WEIRSTATE ' .. KEYS[i] .. ' does not hold a GCRA state')
    end
    local credit = tonumber(ARGV[2 + i]) - since
    if tat > now and credit > 0 then
      local new = tat - credit
      if new <= now then
        redis.call('DEL', KEYS[i])
      else
        put(KEYS[i], int(new), int(math.ceil((new - now) / 1000)))
      end
    end
  end
end
return now
"#
    ));

    macro_rules! window_parse {
        () => {
            r#"
local function parse(v, fields)
  local w, a, b = string.match(v, '^(%d+):(%d+):?(%d*)$')
  if not w or (fields == 3 and b == '') or (fields == 2 and b ~= '') then
    return nil
  end
  return tonumber(w), tonumber(a), tonumber(b) or 0
end
"#
        };
    }

    pub(crate) static FIXED: Lua = Lua::new(concat!(
        now_prologue!(),
        window_parse!(),
        r#"
local n, limit, p = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local window, count = math.floor(now / p), 0
local v = redis.call('GET', KEYS[1])
if v then
  local w, c = parse(v, 2)
  if not w then return redis.error_reply('WEIRSTATE ' .. KEYS[1] .. ' does not hold a fixed window') end
  if w >= window then window, count = w, c end
end
if n > 0 and count + n <= limit then
  count = count + n
  put(KEYS[1], int(window) .. ':' .. int(count), int(math.ceil(((window + 1) * p - now) / 1000)))
  return {1, now, window, count}
end
return {0, now, window, count}
"#
    ));

    pub(crate) static SLIDING: Lua = Lua::new(concat!(
        now_prologue!(),
        window_parse!(),
        r#"
local n, limit, p = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local window = math.floor(now / p)
local prev, curr = 0, 0
local v = redis.call('GET', KEYS[1])
if v then
  local w, a, b = parse(v, 3)
  if not w then return redis.error_reply('WEIRSTATE ' .. KEYS[1] .. ' does not hold a sliding window') end
  if w >= window then window, prev, curr = w, a, b
  elseif w == window - 1 then prev = b end
end
local elapsed = now - window * p
if elapsed < 0 then elapsed = 0 end
local room = limit - curr - n
if n > 0 and room >= 0 and prev * (p - elapsed) <= room * p then
  curr = curr + n
  put(KEYS[1], int(window) .. ':' .. int(prev) .. ':' .. int(curr), int(math.ceil(((window + 2) * p - now) / 1000)))
  return {1, now, window, prev, curr}
end
return {0, now, window, prev, curr}
"#
    ));

    pub(crate) static WINDOW_REFUND: Lua = Lua::new(concat!(
        now_prologue!(),
        window_parse!(),
        r#"
local n, at, kind = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local v = redis.call('GET', KEYS[1])
if not v then return now end
if kind == 'f' then
  local w, c = parse(v, 2)
  if not w then return redis.error_reply('WEIRSTATE ' .. KEYS[1] .. ' does not hold a fixed window') end
  if w == at and c > 0 then
    c = c - math.min(n, c)
    if c == 0 then redis.call('DEL', KEYS[1])
    else redis.call('SET', KEYS[1], int(w) .. ':' .. int(c), 'KEEPTTL') end
  end
else
  local w, a, b = parse(v, 3)
  if not w then return redis.error_reply('WEIRSTATE ' .. KEYS[1] .. ' does not hold a sliding window') end
  if w == at then b = b - math.min(n, b) elseif w == at + 1 then a = a - math.min(n, a) else return now end
  if a == 0 and b == 0 then redis.call('DEL', KEYS[1])
  else redis.call('SET', KEYS[1], int(w) .. ':' .. int(a) .. ':' .. int(b), 'KEEPTTL') end
end
return now
"#
    ));

    pub(crate) static LOG: Lua = Lua::new(concat!(
        now_prologue!(),
        r#"
local n, limit, p, tag = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local at, newest = now, 0
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then
  newest = tonumber(last[2])
  if newest > at then at = newest end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', int(at - p))
local live = redis.call('ZCARD', KEYS[1])
if n > 0 and live + n <= limit then
  local stamp = int(at)
  local i = 1
  while i <= n do
    local batch = {}
    local j = 0
    while i <= n and j < 1000 do
      batch[#batch + 1] = stamp
      batch[#batch + 1] = tag .. ':' .. i
      i = i + 1
      j = j + 1
    end
    redis.call('ZADD', KEYS[1], unpack(batch))
  end
  if not persist then redis.call('PEXPIRE', KEYS[1], int(math.ceil((at + p - now) / 1000))) end
  return {1, now, at, live + n, at, 0}
end
local blocking = 0
if n > 0 and live > 0 then
  local idx = live + n - limit - 1
  if idx >= live then idx = live - 1 end
  local e = redis.call('ZRANGE', KEYS[1], idx, idx, 'WITHSCORES')
  if e[2] then blocking = tonumber(e[2]) end
end
if live == 0 then newest = 0 end
return {0, now, at, live, newest, blocking}
"#
    ));

    pub(crate) static LOG_REFUND: Lua = Lua::new(concat!(
        now_prologue!(),
        r#"
local left = tonumber(ARGV[2])
while left > 0 do
  local entries = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[3], ARGV[3], 'LIMIT', 0, math.min(left, 1000))
  if #entries == 0 then break end
  redis.call('ZREM', KEYS[1], unpack(entries))
  left = left - #entries
end
return now
"#
    ));

    pub(crate) static LEASE: Lua = Lua::new(concat!(
        now_prologue!(),
        r#"
local lease, request, tolerance = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tat = now
local v = redis.call('GET', KEYS[1])
if v then
  tat = tonumber(v)
  if not tat then return redis.error_reply('WEIRSTATE ' .. KEYS[1] .. ' does not hold a GCRA state') end
  if tat < now then tat = now end
end
local used = tat - now
local granted, cost = 0, 0
if used + lease <= tolerance then granted, cost = 2, lease
elseif used + request <= tolerance then granted, cost = 1, request end
if granted > 0 and cost > 0 then
  used = used + cost
  put(KEYS[1], int(now + used), int(math.ceil(used / 1000)))
end
return {granted, now, used}
"#
    ));
}
