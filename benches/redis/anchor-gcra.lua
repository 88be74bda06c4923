local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cost, tol = tonumber(ARGV[3]), tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local used = tat - now
if used + cost > tol then return {0, now, used} end
used = used + cost
redis.call('SET', KEYS[1], string.format('%.0f', now + used), 'PX', math.ceil(used / 1000))
return {1, now, used}
