-- wrk script: each request as a different shopper.
-- TOKENS names a file of tokens, one per line (`seckill token --user N --count M`);
-- PATH_ is the endpoint, METHOD its method (POST by default). Thread t sends tokens
-- t, t+threads, t+2*threads, ... Every phase of scripts/bench-wrk.sh goes through
-- this script, so the client does the same work for each endpoint it compares.
local tokens = {}
for line in io.lines(os.getenv("TOKENS")) do tokens[#tokens + 1] = line end
local path = os.getenv("PATH_")
local method = os.getenv("METHOD") or "POST"
local threads = {}
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("tid", counter)
  table.insert(threads, thread)
end

function init(args)
  nthreads = tonumber(os.getenv("THREADS"))
  i = tid
  statuses = {}
end

function request()
  local token = tokens[((i - 1) % #tokens) + 1]
  i = i + nthreads
  return wrk.format(method, path, { ["Authorization"] = "Bearer " .. token }, "")
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for status, n in pairs(t:get("statuses")) do total[status] = (total[status] or 0) + n end
  end
  for status, n in pairs(total) do io.write(string.format("status %d: %d\n", status, n)) end
  io.write(string.format("p99_ms %.3f\n", latency:percentile(99) / 1000))
end
