package redis

import goredis "github.com/redis/go-redis/v9"

// Every script gets KEYS[1] = the controller's base ("{prefix}") and builds
// its keys from it. All keys of one controller carry the same hash tag, so
// they live in one cluster slot and a script may touch any of them.
//
// Keys (B = base):
//
//	B:r:<run>   string  owner token of the live binding, PX BindingTTL
//	B:s:<scope> zset    run id -> binding expiry (ms, Redis clock), PX BindingTTL
//	B:i:<scope> string  pending intent (cause JSON), PX IntentTTL
//	B:c:<run>   string  cancel mark of a bound run (cause JSON), PX IntentTTL
//	B:cancel    channel "run \t owner \t cause" lines, one message per Cancel
//
// Redis runs a script atomically, so each operation below is one critical
// section: no Bind can run between a Cancel's look-up of bindings and its
// write of the intent, and vice versa.
const prelude = `
local b = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function touch(sk, run, ttl)
  redis.call('ZADD', sk, now + ttl, run)
  if redis.call('PTTL', sk) < ttl then redis.call('PEXPIRE', sk, ttl) end
end

-- bind writes the binding of run under scopes, then consumes the pending
-- intents of those scopes. It returns the run's cancel mark (the first
-- consumed intent, or a mark left for the run id) or false.
local function bind(run, owner, ttl, ittl, scopes)
  redis.call('SET', b..':r:'..run, owner, 'PX', ttl)
  local ck = b..':c:'..run
  for _, sc in ipairs(scopes) do
    touch(b..':s:'..sc, run, ttl)
    local ik = b..':i:'..sc
    local c = redis.call('GET', ik)
    if c then
      redis.call('DEL', ik)
      redis.call('SET', ck, c, 'PX', ittl, 'NX')
    end
  end
  return redis.call('GET', ck)
end
`

// bindScript: ARGV run, owner, bindingTTL, intentTTL, heir, self,
// scopes... Returns {"ok"}, {"cancelled", cause} or {"bound"} (another
// owner). A binding whose owner starts with heir (non-empty: the same
// instance) but not with self (this process) is an earlier process's of
// the same instance: it is taken over, its cancel mark kept.
var bindScript = goredis.NewScript(prelude + `
local run, owner = ARGV[1], ARGV[2]
local ttl, ittl = tonumber(ARGV[3]), tonumber(ARGV[4])
local heir, self = ARGV[5], ARGV[6]
local cur = redis.call('GET', b..':r:'..run)
if cur and cur ~= owner then
  local earlier = heir ~= '' and string.sub(cur, 1, #heir) == heir and string.sub(cur, 1, #self) ~= self
  if not earlier then return {'bound'} end
end
local scopes = {}
for i = 7, #ARGV do scopes[#scopes + 1] = ARGV[i] end
local cause = bind(run, owner, ttl, ittl, scopes)
if cause then return {'cancelled', cause} end
return {'ok'}
`)

// cancelScript: ARGV scope, discard ("1": keep no intent, a run scope's
// Cancel; "0": keep it), cause, intentTTL. Returns {"cancelled", run...},
// {"pending"} or {"not_found"}.
var cancelScript = goredis.NewScript(prelude + `
local sc, cause, ittl = ARGV[1], ARGV[3], tonumber(ARGV[4])
local sk = b..':s:'..sc
redis.call('ZREMRANGEBYSCORE', sk, '-inf', now)
local runs = redis.call('ZRANGE', sk, 0, -1)
if #runs > 0 then
  local out, lines = {'cancelled'}, {}
  for _, r in ipairs(runs) do
    local ck = b..':c:'..r
    redis.call('SET', ck, cause, 'PX', ittl, 'NX')
    local owner = redis.call('GET', b..':r:'..r) or ''
    lines[#lines + 1] = r..'\t'..owner..'\t'..redis.call('GET', ck)
    out[#out + 1] = r
  end
  redis.call('PUBLISH', b..':cancel', table.concat(lines, '\n'))
  return out
end
if ARGV[2] == '1' then return {'not_found'} end
redis.call('SET', b..':i:'..sc, cause, 'PX', ittl)
return {'pending'}
`)

// releaseScript: ARGV run, owner, scopes... Removes the binding and its
// cancel mark unless another owner holds the run id now.
var releaseScript = goredis.NewScript(`
local b, run = KEYS[1], ARGV[1]
local rk = b..':r:'..run
local cur = redis.call('GET', rk)
if cur and cur ~= ARGV[2] then return 0 end
redis.call('DEL', rk, b..':c:'..run)
for i = 3, #ARGV do redis.call('ZREM', b..':s:'..ARGV[i], run) end
return 1
`)

// refreshScript: ARGV bindingTTL, intentTTL, then per run: run, owner,
// n, n scopes. Extends live bindings; re-creates (and re-checks intents
// for) bindings Redis lost; returns {run, cause, ...} for every run with a
// cancel mark and {run, ""} for a run id another owner holds now.
var refreshScript = goredis.NewScript(prelude + `
local ttl, ittl = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
local i = 3
while i <= #ARGV do
  local run, owner, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local scopes = {}
  for j = 1, n do scopes[j] = ARGV[i + 2 + j] end
  i = i + 3 + n
  local rk = b..':r:'..run
  local cur = redis.call('GET', rk)
  local cause = false
  if cur == owner then
    redis.call('PEXPIRE', rk, ttl)
    for _, sc in ipairs(scopes) do touch(b..':s:'..sc, run, ttl) end
    cause = redis.call('GET', b..':c:'..run)
  elseif not cur then
    cause = bind(run, owner, ttl, ittl, scopes)
  else
    out[#out + 1] = run
    out[#out + 1] = ''
  end
  if cause then
    out[#out + 1] = run
    out[#out + 1] = cause
  end
end
return out
`)

// activeScript: ARGV scope. Run ids whose binding has not expired.
var activeScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1]..':s:'..ARGV[1], '('..now, '+inf')
`)
