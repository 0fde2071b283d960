-- wrk script of benchmarks/manager_load.py --client wrk: every simulated host's report,
-- paced to a fixed rate, from a file of prepared bodies (see manager_load.py's docstring).
--
--   wrk -t1 -c64 -d40s --timeout 5s -s manager_load_wrk.lua URL -- DATA THREADS RATE PERIOD FIRST CONNS
--
-- DATA: one host a line, "name token rest", rest being the report's JSON after its
-- sequence number and time; report k (from FIRST on) of a host is '{"s":k+1,"t":PERIOD*(k+1),'
-- followed by rest, so each host's s and t grow as an agent's do. Global request g goes to
-- host g mod N, so every host reports once per N / RATE seconds. Pacing: the requests of
-- each of the THREADS threads are due RATE / THREADS per second from its start; delay()
-- holds a connection until its next request is due (LuaJIT's ffi reads the monotonic
-- clock; wrk gives none); the first CONNS requests of a thread (one per connection, CONNS
-- its connections) go out at once. wrk measures each request from its sending to its
-- answer: a manager that falls behind shows as a lower rate, not a longer latency.

local ffi = require("ffi")
ffi.cdef([[
typedef struct { long tv_sec; long tv_nsec; } sova_timespec;
int clock_gettime(int clk_id, sova_timespec *tp);
]])
local ts = ffi.new("sova_timespec")
local function now()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local made = 0
function setup(thread)
  thread:set("tid", made)
  made = made + 1
end

function init(args)
  hosts = {}
  for line in io.lines(args[1]) do
    local name, token, rest = line:match("^(%S+) (%S+) (.*)$")
    hosts[#hosts + 1] = { "/v1/hosts/" .. name .. "/reports", "Bearer " .. token, rest }
  end
  threads = tonumber(args[2])
  interval = threads / tonumber(args[3]) -- seconds between this thread's requests
  period = tonumber(args[4])
  first = tonumber(args[5])
  n = #hosts
  sent = 0
  paced = tonumber(args[6]) -- the first request of each connection is not delayed
  start = now()
end

function delay()
  local due = start + paced * interval
  paced = paced + 1
  local wait = (due - now()) * 1000
  if wait < 0 then
    return 0
  end
  return math.floor(wait)
end

function request()
  local g = tid + threads * sent
  sent = sent + 1
  local h = hosts[(g % n) + 1]
  local k = first + math.floor(g / n) + 1
  local body = string.format('{"s":%d,"t":%.1f,', k, period * k) .. h[3]
  return wrk.format(
    "POST",
    h[1],
    { ["Host"] = "manager", ["Authorization"] = h[2], ["Content-Type"] = "application/json" },
    body
  )
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(
    string.format(
      "WRK requests=%d duration_us=%d connect=%d read=%d write=%d status=%d timeout=%d "
        .. "p50_us=%d p99_us=%d max_us=%d\n",
      summary.requests,
      summary.duration,
      e.connect,
      e.read,
      e.write,
      e.status,
      e.timeout,
      latency:percentile(50),
      latency:percentile(99),
      latency.max
    )
  )
end
