local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit, p = tonumber(ARGV[3]), tonumber(ARGV[4])
local window = math.floor(now / p)
local count = 0
local v = redis.call('GET', KEYS[1])
if v then
  local w, c = string.match(v, '^(%d+):(%d+)$')
  if tonumber(w) == window then count = tonumber(c) end
end
if count + 1 > limit then return {0, now, window, count} end
count = count + 1
redis.call('SET', KEYS[1], window .. ':' .. count, 'PX', math.ceil(((window + 1) * p - now) / 1000))
return {1, now, window, count}
