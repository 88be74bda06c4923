//! The Lua scripts: each decision is one script, atomic on the server.
//!
//! Conventions shared by every script:
//!
//! - `ARGV[1]` is the decision time in integer microseconds, or the empty string
//!   for the server's own clock (`TIME`, read inside the script so the decision and
//!   its time are one atomic step); prefixed with `p`, the script writes its keys
//!   without an expiry (`Expiry::Never`). A number that is not a whole number of
//!   microseconds below 2⁵³ (negative, fractional, 2⁵³ or more where doubles skip
//!   integers, `inf`, `nan`) fails the script with `WEIRTIME`, writing nothing;
//!   anything else that is not a number reads `TIME`.
//! - Times and costs are integers in microseconds, held in Lua's doubles: exact up
//!   to 2⁵³ µs (the year 2255 as a Unix time). Numbers are written with
//!   `string.format('%.0f')` so Redis stores them as plain integers.
//! - A denial writes nothing (nor does a peek); every write sets the key's expiry
//!   to the instant its state becomes indistinguishable from a missing key, so idle
//!   clients cost Redis nothing (unless `p`: then no expiry, and a state past its time reads as a
//!   missing key's).
//! - A key holding another Redis type fails inside `GET`/`ZRANGE` with Redis's own
//!   `WRONGTYPE` error; a string this script cannot read fails with `WEIRSTATE`.
//!   Either way nothing is admitted.
//! - Replies are arrays of integers.
//! - What Redis spends on a script is mostly its `redis.call`s (`TIME` among them),
//!   then whatever the Lua allocates: the scripts define no closures and build no
//!   tables on the common path, and a denial makes as few calls as the decision
//!   needs (BENCHMARKS.md, "Redis scripts: server time", has the figures).

use redis::Script;
use std::ops::Deref;
use std::sync::OnceLock;

/// A script's Lua source, hashed into a [`Script`] on first use (each call
/// sends only its SHA1: `EVALSHA`).
pub(crate) struct Lua {
    source: &'static str,
    script: OnceLock<Script>,
}

impl Lua {
    pub(crate) const fn new(source: &'static str) -> Self {
        Self { source, script: OnceLock::new() }
    }

    /// The Lua text, as sent to Redis by `SCRIPT LOAD` (read by the script
    /// tests, which run it in a harness of their own).
    #[allow(dead_code)]
    pub(crate) fn source(&self) -> &'static str {
        self.source
    }
}

impl Deref for Lua {
    type Target = Script;

    fn deref(&self) -> &Script {
        self.script.get_or_init(|| Script::new(self.source))
    }
}

/// Common prologue: `now` from `ARGV[1]` or `TIME`; `persist` if `ARGV[1]`
/// starts with `p` (byte 112); `fmt` is `string.format`, for `fmt('%.0f', x)`.
/// A write of a state with its expiry is `SET key value PX ttl_ms`, or a plain
/// `SET` if `persist` (written out at each write: a helper function would be a
/// closure allocated on every call).
macro_rules! now_prologue {
    () => {
        r#"
local clock, persist, now = ARGV[1], false, nil
if clock ~= '' then
  if string.byte(clock, 1) == 112 then
    persist = true
    clock = string.sub(clock, 2)
  end
  now = tonumber(clock)
  -- Whole µs below 2⁵³ (from 2⁵³ on, doubles skip integers: 2⁵³ + 1 reads as
  -- 2⁵³, and a small debt rounds away); -0, nan and inf fail too (1 / now > 0
  -- is false for them).
  if now and not (1 / now > 0 and now < 9007199254740992 and now % 1 == 0) then
    return redis.error_reply('WEIRTIME ' .. ARGV[1] .. ' is not a time in whole microseconds below 2^53')
  end
end
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local fmt = string.format
"#
    };
}

/// GCRA over one or more keys (a tier), all or nothing.
///
/// `KEYS[i]`: the TAT of quota `i` (integer µs, Unix time). `ARGV[2]`: the
/// per-unit flag `1` to admit, `0` to peek (nothing written). Then per key
/// `ARGV[2i+1]` = cost of the request in µs, `ARGV[2i+2]` = tolerance (burst × T)
/// in µs. Reply: `{admitted (1/0), now, used_1, …, used_k}`, where `used_i` is the
/// capacity in use (µs) after the admission, or before the denial.
///
/// Calls: one `GET` per key, one `SET … PX` per key when admitted.
pub(crate) static GCRA: Lua = Lua::new(concat!(
    now_prologue!(),
    r#"
local k = #KEYS
local reply = {0, now}
local fits = true
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
  local used = tat - now
  reply[i + 2] = used
  if used + tonumber(ARGV[2 * i + 1]) > tonumber(ARGV[2 * i + 2]) then fits = false end
end
if fits and ARGV[2] == '1' then
  reply[1] = 1
  for i = 1, k do
    local debt = reply[i + 2] + tonumber(ARGV[2 * i + 1])
    reply[i + 2] = debt
    if debt > 0 then
      local tat = fmt('%.0f', now + debt)
      if persist then redis.call('SET', KEYS[i], tat)
      else redis.call('SET', KEYS[i], tat, 'PX', fmt('%.0f', math.ceil(debt / 1000))) end
    end
  end
end
return reply
"#
));

/// GCRA refund over one or more keys, weir-gcra's rule: `ARGV[2]` is the time
/// the admission was decided (µs), and each TAT moves back by `ARGV[2 + i]` µs
/// (what the units are worth) less the time since that admission (the refill
/// since then has been paying the admission's debt; crediting it again would
/// give back capacity a later admission took), never before `now`.
/// Reply: `now`.
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
        if persist then redis.call('SET', KEYS[i], fmt('%.0f', new))
        else redis.call('SET', KEYS[i], fmt('%.0f', new), 'PX', fmt('%.0f', math.ceil((new - now) / 1000))) end
      end
    end
  end
end
return now
"#
));

/// The patterns of a window state: `FIXED_STATE` matches `"<window>:<count>"` (a
/// trailing `:` tolerated), `SLIDING_STATE` `"<window>:<prev>:<curr>"`; a state
/// that does not match fails the script.
macro_rules! window_parse {
    () => {
        r#"
local FIXED_STATE, SLIDING_STATE = '^(%d+):(%d+):?$', '^(%d+):(%d+):(%d+)$'
"#
    };
}

/// Fixed window. `KEYS[1]`: `"<window>:<count>"`. `ARGV[2]` = n (0 peeks),
/// `ARGV[3]` = limit, `ARGV[4]` = window length P (µs). Windows are
/// `[w·P, (w+1)·P)` in Unix µs. A time earlier than the stored window is decided
/// in the stored window (a clock stepping back is no time passing).
/// Reply: `{admitted, now, window, count}` (count after the admission).
///
/// Calls: one `GET`, one `SET … PX` when admitted.
pub(crate) static FIXED: Lua = Lua::new(concat!(
    now_prologue!(),
    window_parse!(),
    r#"
local n, limit, p = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local window, count = math.floor(now / p), 0
local v = redis.call('GET', KEYS[1])
if v then
  local w, c = string.match(v, FIXED_STATE)
  if not w then return redis.error_reply('WEIRSTATE ' .. KEYS[1] .. ' does not hold a fixed window') end
  w = tonumber(w)
  if w >= window then window, count = w, tonumber(c) end
end
if n > 0 and count + n <= limit then
  count = count + n
  local state = fmt('%.0f:%.0f', window, count)
  if persist then redis.call('SET', KEYS[1], state)
  else redis.call('SET', KEYS[1], state, 'PX', fmt('%.0f', math.ceil(((window + 1) * p - now) / 1000))) end
  return {1, now, window, count}
end
return {0, now, window, count}
"#
));

/// Sliding window counter. `KEYS[1]`: `"<window>:<prev>:<curr>"`. Arguments as
/// for [`FIXED`]. The estimate is `prev·(P − e)/P + curr` with `e` the time into
/// the current window; `n` fit iff `prev·(P − e) ≤ (limit − curr − n)·P`, compared
/// in doubles (exact while `limit × P < 2⁵³`). Reply: `{admitted, now, window,
/// prev, curr}` (the view in the decision's window, curr after the admission).
///
/// Calls: one `GET`, one `SET … PX` when admitted.
pub(crate) static SLIDING: Lua = Lua::new(concat!(
    now_prologue!(),
    window_parse!(),
    r#"
local n, limit, p = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local window = math.floor(now / p)
local prev, curr = 0, 0
local v = redis.call('GET', KEYS[1])
if v then
  local w, a, b = string.match(v, SLIDING_STATE)
  if not w then return redis.error_reply('WEIRSTATE ' .. KEYS[1] .. ' does not hold a sliding window') end
  w = tonumber(w)
  if w >= window then window, prev, curr = w, tonumber(a), tonumber(b)
  elseif w == window - 1 then prev = tonumber(b) end
end
local elapsed = now - window * p
if elapsed < 0 then elapsed = 0 end
local room = limit - curr - n
if n > 0 and room >= 0 and prev * (p - elapsed) <= room * p then
  curr = curr + n
  local state = fmt('%.0f:%.0f:%.0f', window, prev, curr)
  if persist then redis.call('SET', KEYS[1], state)
  else redis.call('SET', KEYS[1], state, 'PX', fmt('%.0f', math.ceil(((window + 2) * p - now) / 1000))) end
  return {1, now, window, prev, curr}
end
return {0, now, window, prev, curr}
"#
));

/// Refund of a fixed (`ARGV[4] = 'f'`) or sliding (`'s'`) window: gives `ARGV[2]`
/// back to window `ARGV[3]` if the state still counts it. Reply: `now`.
pub(crate) static WINDOW_REFUND: Lua = Lua::new(concat!(
    now_prologue!(),
    window_parse!(),
    r#"
local n, at, kind = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local v = redis.call('GET', KEYS[1])
if not v then return now end
if kind == 'f' then
  local w, c = string.match(v, FIXED_STATE)
  if not w then return redis.error_reply('WEIRSTATE ' .. KEYS[1] .. ' does not hold a fixed window') end
  w, c = tonumber(w), tonumber(c)
  if w == at and c > 0 then
    c = c - math.min(n, c)
    if c == 0 then redis.call('DEL', KEYS[1])
    else redis.call('SET', KEYS[1], fmt('%.0f:%.0f', w, c), 'KEEPTTL') end
  end
else
  local w, a, b = string.match(v, SLIDING_STATE)
  if not w then return redis.error_reply('WEIRSTATE ' .. KEYS[1] .. ' does not hold a sliding window') end
  w, a, b = tonumber(w), tonumber(a), tonumber(b)
  if w == at then b = b - math.min(n, b) elseif w == at + 1 then a = a - math.min(n, a) else return now end
  if a == 0 and b == 0 then redis.call('DEL', KEYS[1])
  else redis.call('SET', KEYS[1], fmt('%.0f:%.0f:%.0f', w, a, b), 'KEEPTTL') end
end
return now
"#
));

/// Sliding log. `KEYS[1]`: a sorted set of admitted requests scored by their time
/// (µs). `ARGV[2]` = n (0 peeks), `ARGV[3]` = limit, `ARGV[4]` = P (µs),
/// `ARGV[5]` = a member prefix unique to this call. A request at `t` is stamped at
/// `at = max(t, newest)`; entries at or before `at − P` have left the window.
/// Reply: `{admitted, now, at, live, newest, blocking}`: `live` entries after the
/// decision, the newest one's time, and on denial the time of the entry whose
/// expiry lets the request fit.
///
/// Calls: `ZRANGE` (newest), `ZCOUNT` (live entries); then `ZREMRANGEBYSCORE` (the
/// entries that left) + `ZADD` + `PEXPIRE` when admitted, or one `ZRANGEBYSCORE …
/// LIMIT` for the blocking entry when denied. A denial or a peek writes nothing,
/// not even the removal of entries that left (an admission removes them), so the
/// set holds at most the limit and the entries that left since the last admission.
pub(crate) static LOG: Lua = Lua::new(concat!(
    now_prologue!(),
    r#"
local n, limit, p, tag = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local key = KEYS[1]
local at, newest = now, 0
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if last[2] then
  newest = tonumber(last[2])
  if newest > at then at = newest end
end
local gone = fmt('%.0f', at - p)
local live = redis.call('ZCOUNT', key, '(' .. gone, '+inf')
if n > 0 and live + n <= limit then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', gone)
  local stamp = fmt('%.0f', at)
  if n == 1 then
    redis.call('ZADD', key, stamp, tag .. ':1')
  else
    local i = 1
    while i <= n do
      local batch, j = {}, 0
      while i <= n and j < 2000 do
        batch[j + 1] = stamp
        batch[j + 2] = tag .. ':' .. i
        i, j = i + 1, j + 2
      end
      redis.call('ZADD', key, unpack(batch))
    end
  end
  if not persist then redis.call('PEXPIRE', key, fmt('%.0f', math.ceil((at + p - now) / 1000))) end
  return {1, now, at, live + n, at, 0}
end
local blocking = 0
if n > 0 and live > 0 then
  local idx = live + n - limit - 1
  if idx >= live then idx = live - 1 end
  local e = redis.call('ZRANGEBYSCORE', key, '(' .. gone, '+inf', 'WITHSCORES', 'LIMIT', idx, 1)
  if e[2] then blocking = tonumber(e[2]) end
end
if live == 0 then newest = 0 end
return {0, now, at, live, newest, blocking}
"#
));

/// Sliding-log refund: removes up to `ARGV[2]` entries stamped at `ARGV[3]` (µs).
/// Reply: `now`.
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

/// A lease of GCRA permits (one key): admits `ARGV[2]` µs worth (the lease) if it
/// fits, else `ARGV[3]` µs worth (the request alone), else nothing. `ARGV[4]` is
/// the tolerance. Reply: `{granted (2 = lease, 1 = request, 0 = denied), now,
/// used}` with `used` after the grant, or before the denial.
///
/// Calls: one `GET`, one `SET … PX` when granted.
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
  local tat = fmt('%.0f', now + used)
  if persist then redis.call('SET', KEYS[1], tat)
  else redis.call('SET', KEYS[1], tat, 'PX', fmt('%.0f', math.ceil(used / 1000))) end
end
return {granted, now, used}
"#
));
