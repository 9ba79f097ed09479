-- wrk script: every token once. TOKENS names a file of tokens, one per line
-- (`seckill token --user N --count M`); PATH_ is the endpoint (POST). Thread t of
-- THREADS sends tokens t, t+THREADS, t+2*THREADS, ... and stops once it has sent
-- its last one, so a run places at most one request per token (the answers still in
-- flight then are not read; the server's own counters tell what it answered). wrk
-- itself runs for its -d: each thread writes DONE.<thread> when it stops, and
-- scripts/bench_cost.py then ends wrk with SIGINT (wrk reports on SIGINT).
local path = os.getenv("PATH_")
local threads = {}
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("tid", counter)
  table.insert(threads, thread)
end

function init(args)
  local nthreads = tonumber(os.getenv("THREADS"))
  tokens = {}
  local n = 0
  for line in io.lines(os.getenv("TOKENS")) do
    n = n + 1
    if (n - tid) % nthreads == 0 then tokens[#tokens + 1] = line end
  end
  sent = 0
  stopped = false
  statuses = {}
end

function request()
  sent = sent + 1
  local token = tokens[sent]
  if token == nil then
    if not stopped then
      stopped = true
      local f = io.open(os.getenv("DONE") .. "." .. tid, "w")
      f:close()
      wrk.thread:stop()
    end
    -- wrk wants a request; one that costs the server next to nothing.
    return wrk.format("GET", "/health/live")
  end
  return wrk.format("POST", path, { ["Authorization"] = "Bearer " .. token }, "")
end

function response(status, headers, body)
  -- The order endpoint never answers 200; /health/live always does.
  if status == 200 then return end
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for status, n in pairs(t:get("statuses")) do total[status] = (total[status] or 0) + n end
  end
  for status, n in pairs(total) do io.write(string.format("status %d: %d\n", status, n)) end
  io.write(string.format("p50_ms %.3f\n", latency:percentile(50) / 1000))
  io.write(string.format("p99_ms %.3f\n", latency:percentile(99) / 1000))
end
