local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit, p = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - p)
local live = redis.call('ZCARD', KEYS[1])
if live + 1 > limit then return {0, now, live} end
redis.call('ZADD', KEYS[1], now, ARGV[5] .. ':1')
redis.call('PEXPIRE', KEYS[1], math.ceil(p / 1000))
return {1, now, live + 1}
