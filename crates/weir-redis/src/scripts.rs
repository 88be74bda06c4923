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

/// One GCRA key's state, read for a decision. In: `key`, `now`, and `seen` (nil,
/// or a batch's states that earlier items would write, by key: see [`BATCH`]).
/// Out: `used`, the capacity in use (µs) at `now`.
macro_rules! gcra_used {
    () => {
        r#"
local tat = now
local v = seen and seen[key] or redis.call('GET', key)
if v then
  tat = tonumber(v)
  if not tat then
    return redis.error_reply('WEIRSTATE ' .. key .. ' does not hold a GCRA state')
  end
  if tat < now then tat = now end
end
local used = tat - now
"#
    };
}

/// Writes one GCRA key in debt by `debt` µs (in: `key`, `debt`, `now`,
/// `persist`): its TAT, expiring when the debt is repaid; nothing for no debt.
macro_rules! gcra_write {
    () => {
        r#"
if debt > 0 then
  local tat = fmt('%.0f', now + debt)
  if persist then redis.call('SET', key, tat)
  else redis.call('SET', key, tat, 'PX', fmt('%.0f', math.ceil(debt / 1000))) end
end
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
local seen = nil
local k = #KEYS
local reply = {0, now}
local fits = true
for i = 1, k do
  local key = KEYS[i]
"#,
    gcra_used!(),
    r#"
  reply[i + 2] = used
  if used + tonumber(ARGV[2 * i + 1]) > tonumber(ARGV[2 * i + 2]) then fits = false end
end
if fits and ARGV[2] == '1' then
  reply[1] = 1
  for i = 1, k do
    local key, debt = KEYS[i], reply[i + 2] + tonumber(ARGV[2 * i + 1])
    reply[i + 2] = debt
"#,
    gcra_write!(),
    r#"
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

/// One fixed window's state, read and decided. In: `key`, `n`, `limit`, `p`,
/// `now`, `seen` (as for `gcra_used!`). Out: `window` and `count` (the view in
/// the decision's window, before the admission), and `fits` (declared by the
/// caller): whether `n` (> 0) fit.
macro_rules! fixed_decide {
    () => {
        r#"
local window, count = math.floor(now / p), 0
local v = seen and seen[key] or redis.call('GET', key)
if v then
  local w, c = string.match(v, FIXED_STATE)
  if not w then return redis.error_reply('WEIRSTATE ' .. key .. ' does not hold a fixed window') end
  w = tonumber(w)
  if w >= window then window, count = w, tonumber(c) end
end
fits = n > 0 and count + n <= limit
"#
    };
}

/// A fixed window's state as written: `"<window>:<count>"`.
macro_rules! fixed_state {
    () => {
        "fmt('%.0f:%.0f', window, count)"
    };
}

/// Writes a fixed window's state (in: `key`, `window`, `count`, `p`, `now`,
/// `persist`), expiring at the window's end.
macro_rules! fixed_write {
    () => {
        concat!(
            "\nlocal state = ",
            fixed_state!(),
            r#"
if persist then redis.call('SET', key, state)
else redis.call('SET', key, state, 'PX', fmt('%.0f', math.ceil(((window + 1) * p - now) / 1000))) end
"#
        )
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
local seen, fits = nil, false
local key, n, limit, p = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
"#,
    fixed_decide!(),
    r#"
if fits then
  count = count + n
"#,
    fixed_write!(),
    r#"
  return {1, now, window, count}
end
return {0, now, window, count}
"#
));

/// One sliding window's state, read and decided (in and out as for
/// `fixed_decide!`, with `prev` and `curr` for `count`). The estimate is
/// `prev·(P − e)/P + curr` with `e` the time into the current window; `n` fit iff
/// `prev·(P − e) ≤ (limit − curr − n)·P`, compared in doubles (exact while
/// `limit × P < 2⁵³`).
macro_rules! sliding_decide {
    () => {
        r#"
local window = math.floor(now / p)
local prev, curr = 0, 0
local v = seen and seen[key] or redis.call('GET', key)
if v then
  local w, a, b = string.match(v, SLIDING_STATE)
  if not w then return redis.error_reply('WEIRSTATE ' .. key .. ' does not hold a sliding window') end
  w = tonumber(w)
  if w >= window then window, prev, curr = w, tonumber(a), tonumber(b)
  elseif w == window - 1 then prev = tonumber(b) end
end
local elapsed = now - window * p
if elapsed < 0 then elapsed = 0 end
local room = limit - curr - n
fits = n > 0 and room >= 0 and prev * (p - elapsed) <= room * p
"#
    };
}

/// A sliding window's state as written: `"<window>:<prev>:<curr>"`.
macro_rules! sliding_state {
    () => {
        "fmt('%.0f:%.0f:%.0f', window, prev, curr)"
    };
}

/// Writes a sliding window's state (in: `key`, `window`, `prev`, `curr`, `p`,
/// `now`, `persist`), expiring when the next window ends.
macro_rules! sliding_write {
    () => {
        concat!(
            "\nlocal state = ",
            sliding_state!(),
            r#"
if persist then redis.call('SET', key, state)
else redis.call('SET', key, state, 'PX', fmt('%.0f', math.ceil(((window + 2) * p - now) / 1000))) end
"#
        )
    };
}

/// Sliding window counter. `KEYS[1]`: `"<window>:<prev>:<curr>"`. Arguments as
/// for [`FIXED`]; the decision as `sliding_decide!` says. Reply: `{admitted,
/// now, window, prev, curr}` (the view in the decision's window, curr after the
/// admission).
///
/// Calls: one `GET`, one `SET … PX` when admitted.
pub(crate) static SLIDING: Lua = Lua::new(concat!(
    now_prologue!(),
    window_parse!(),
    r#"
local seen, fits = nil, false
local key, n, limit, p = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
"#,
    sliding_decide!(),
    r#"
if fits then
  curr = curr + n
"#,
    sliding_write!(),
    r#"
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

/// One sliding log, read and decided. In: `key`, `n`, `limit`, `p`, `now`,
/// `seen` (nil, or a batch's entries that earlier items would add, by key:
/// `{at, count}`). A request at `now` is stamped at `at = max(now, newest)`;
/// entries at or before `at − P` have left the window. Out: `at`, `newest` (the
/// newest entry's time, 0 for none), `live` (entries in the window before the
/// admission), `pending` (the batch's entries, or nil), and `fits` (declared
/// by the caller).
macro_rules! log_decide {
    () => {
        r#"
local at, newest = now, 0
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if last[2] then
  newest = tonumber(last[2])
  if newest > at then at = newest end
end
local pending = seen and seen[key]
if pending then
  newest = pending[1]
  if newest > at then at = newest end
end
local gone = fmt('%.0f', at - p)
local live = redis.call('ZCOUNT', key, '(' .. gone, '+inf')
if pending then live = live + pending[2] end
fits = n > 0 and live + n <= limit
"#
    };
}

/// On a log's denial (in: as `log_decide!` left them): `blocking`, the time of
/// the entry whose leaving lets `n` fit (a batch's pending entries are the
/// newest, all at `pending[1]`); `newest` is 0 when none is live.
macro_rules! log_blocking {
    () => {
        r#"
local blocking = 0
if n > 0 and live > 0 then
  local idx = live + n - limit - 1
  if idx >= live then idx = live - 1 end
  if pending and idx >= live - pending[2] then blocking = pending[1]
  else
    local e = redis.call('ZRANGEBYSCORE', key, '(' .. gone, '+inf', 'WITHSCORES', 'LIMIT', idx, 1)
    if e[2] then blocking = tonumber(e[2]) end
  end
end
if live == 0 then newest = 0 end
"#
    };
}

/// Admits `n` entries at `at` (in: `key`, `at`, `n`, `p`, `tag`, `now`,
/// `persist`): removes the entries that left, adds `n` members `<tag>:<i>`
/// scored `at`, and expires the set when its newest entry leaves.
macro_rules! log_write {
    () => {
        r#"
redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%.0f', at - p))
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
"#
    };
}

/// Sliding log. `KEYS[1]`: a sorted set of admitted requests scored by their time
/// (µs). `ARGV[2]` = n (0 peeks), `ARGV[3]` = limit, `ARGV[4]` = P (µs),
/// `ARGV[5]` = a member prefix unique to this call. Decided as `log_decide!`
/// says. Reply: `{admitted, now, at, live, newest, blocking}`: `live` entries
/// after the decision, the newest one's time, and on denial the time of the
/// entry whose expiry lets the request fit.
///
/// Calls: `ZRANGE` (newest), `ZCOUNT` (live entries); then `ZREMRANGEBYSCORE` (the
/// entries that left) + `ZADD` + `PEXPIRE` when admitted, or one `ZRANGEBYSCORE …
/// LIMIT` for the blocking entry when denied. A denial or a peek writes nothing,
/// not even the removal of entries that left (an admission removes them), so the
/// set holds at most the limit and the entries that left since the last admission.
pub(crate) static LOG: Lua = Lua::new(concat!(
    now_prologue!(),
    r#"
local seen, fits = nil, false
local key, n, limit, p, tag = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
"#,
    log_decide!(),
    r#"
if fits then
"#,
    log_write!(),
    r#"
  return {1, now, at, live + n, at, 0}
end
"#,
    log_blocking!(),
    r#"
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
local seen, key = nil, KEYS[1]
local lease, request, tolerance = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
"#,
    gcra_used!(),
    r#"
local granted, cost = 0, 0
if used + lease <= tolerance then granted, cost = 2, lease
elseif used + request <= tolerance then granted, cost = 1, request end
if granted > 0 and cost > 0 then
  used = used + cost
  local debt = used
"#,
    gcra_write!(),
    r#"
end
return {granted, now, used}
"#
));

/// Several decisions, of any algorithms and keys, in one script: all or nothing.
///
/// `ARGV[2]`: `1` to admit (write) if every item fits, `0` to decide only (a
/// preview: nothing written whatever the decisions). `ARGV[3]`: `1` if a key
/// appears in more than one item (then each item is decided on the state the
/// items before it would leave, kept in the table `seen`; built only then), else
/// `0`. From `ARGV[4]`, one record per item, its keys the next ones in `KEYS`:
///
/// | item | record | keys |
/// |---|---|---|
/// | GCRA tier of `k` quotas | `g`, flags, n, k, then cost and tolerance (µs) per quota | `k` TATs |
/// | fixed window | `f`, flags, n, limit, P (µs) | its state |
/// | sliding window | `s`, flags, n, limit, P (µs) | its state |
/// | sliding log | `l`, flags, n, limit, P (µs), a member prefix unique to the item | its set |
///
/// `flags`: 1 (persist: written without an expiry, as `p` in `ARGV[1]` would for
/// one script) + 2 (shadow: its denial refuses nothing). `n` = 0 peeks (never
/// written, never refusing).
///
/// Phase 1 reads and decides every item in order, by the same code as its own
/// script ([`GCRA`], [`FIXED`], [`SLIDING`], [`LOG`]). The batch fits when every
/// item of `n` > 0 not in shadow mode fits; then (and if `ARGV[2]` is `1`) phase
/// 2 writes every such item that fits, shadow ones included, in order.
///
/// Reply: `{admitted (1: written), now, …}`, then per item `fits` (1/0) and what
/// its own script replies after `now`: `used_1, …, used_k` (GCRA); `window,
/// count` (fixed); `window, prev, curr` (sliding); `at, live, newest, blocking`
/// (log); after the admission for an item that fits (what it takes when the batch
/// is admitted), before it for one that does not.
///
/// Calls: the reads of every item's script, then, when admitted, the writes of
/// every item that fits.
pub(crate) static BATCH: Lua = Lua::new(concat!(
    now_prologue!(),
    window_parse!(),
    r#"
local commit, seen = ARGV[2] == '1', nil
if ARGV[3] == '1' then seen = {} end
local reply, r, a, k = {0, now}, 3, 4, 1
local fits_all = true
while ARGV[a] do
  local kind, flags, n = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local fits = false
  if kind == 'g' then
    local quotas = tonumber(ARGV[a + 3])
    fits = true
    for j = 0, quotas - 1 do
      local key = KEYS[k + j]
"#,
    gcra_used!(),
    r#"
      reply[r + 1 + j] = used
      if used + tonumber(ARGV[a + 4 + 2 * j]) > tonumber(ARGV[a + 5 + 2 * j]) then fits = false end
    end
    if fits and n > 0 then
      for j = 0, quotas - 1 do
        local debt = reply[r + 1 + j] + tonumber(ARGV[a + 4 + 2 * j])
        reply[r + 1 + j] = debt
        if seen and debt > 0 then seen[KEYS[k + j]] = now + debt end
      end
    end
    reply[r] = fits and 1 or 0
    r, k, a = r + 1 + quotas, k + quotas, a + 4 + 2 * quotas
  else
    local key, limit, p = KEYS[k], tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    if kind == 'f' then
"#,
    fixed_decide!(),
    r#"
      if fits then
        count = count + n
        if seen then seen[key] = "#,
    fixed_state!(),
    r#" end
      end
      reply[r], reply[r + 1], reply[r + 2] = fits and 1 or 0, window, count
      r, a = r + 3, a + 5
    elseif kind == 's' then
"#,
    sliding_decide!(),
    r#"
      if fits then
        curr = curr + n
        if seen then seen[key] = "#,
    sliding_state!(),
    r#" end
      end
      reply[r], reply[r + 1], reply[r + 2], reply[r + 3] = fits and 1 or 0, window, prev, curr
      r, a = r + 4, a + 5
    elseif kind == 'l' then
"#,
    log_decide!(),
    r#"
      if fits then
        reply[r], reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = 1, at, live + n, at, 0
        if seen then
          if pending then pending[2] = pending[2] + n else seen[key] = {at, n} end
        end
      else
"#,
    log_blocking!(),
    r#"
        reply[r], reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = 0, at, live, newest, blocking
      end
      r, a = r + 5, a + 6
    else
      return redis.error_reply('WEIRBATCH item ' .. kind .. ' is no algorithm of this script')
    end
    k = k + 1
  end
  if n > 0 and not fits and flags < 2 then fits_all = false end
end
if commit and fits_all then
  reply[1] = 1
  r, a, k = 3, 4, 1
  while ARGV[a] do
    local kind, n = ARGV[a], tonumber(ARGV[a + 2])
    persist = tonumber(ARGV[a + 1]) % 2 == 1
    local write = n > 0 and reply[r] == 1
    if kind == 'g' then
      local quotas = tonumber(ARGV[a + 3])
      if write then
        for j = 0, quotas - 1 do
          local key, debt = KEYS[k + j], reply[r + 1 + j]
"#,
    gcra_write!(),
    r#"
        end
      end
      r, k, a = r + 1 + quotas, k + quotas, a + 4 + 2 * quotas
    else
      local key, p = KEYS[k], tonumber(ARGV[a + 4])
      if kind == 'f' then
        if write then
          local window, count = reply[r + 1], reply[r + 2]
"#,
    fixed_write!(),
    r#"
        end
        r, a = r + 3, a + 5
      elseif kind == 's' then
        if write then
          local window, prev, curr = reply[r + 1], reply[r + 2], reply[r + 3]
"#,
    sliding_write!(),
    r#"
        end
        r, a = r + 4, a + 5
      else
        if write then
          local at, tag = reply[r + 1], ARGV[a + 5]
"#,
    log_write!(),
    r#"
        end
        r, a = r + 5, a + 6
      end
      k = k + 1
    end
  end
end
return reply
"#
));
