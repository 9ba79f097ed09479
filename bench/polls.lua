-- wrk script: owners polling their orders. PAIRS names a file of lines
-- "token<TAB>path" (a shopper's token and the path they poll); the threads go
-- round the lines, thread t of THREADS from line t on, one request per line, again
-- and again until wrk's -d is up. Each non-200 status is counted.
local threads = {}
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("tid", counter)
  table.insert(threads, thread)
end

function init(args)
  local nthreads = tonumber(os.getenv("THREADS"))
  pairs_ = {}
  local n = 0
  for line in io.lines(os.getenv("PAIRS")) do
    n = n + 1
    if (n - tid) % nthreads == 0 then
      local token, path = line:match("^(%S+)\t(%S+)$")
      pairs_[#pairs_ + 1] = { token = token, path = path }
    end
  end
  next_ = 0
  statuses = {}
end

function request()
  next_ = next_ % #pairs_ + 1
  local p = pairs_[next_]
  return wrk.format("GET", p.path, { ["Authorization"] = "Bearer " .. p.token })
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
  io.write(string.format("p50_ms %.3f\n", latency:percentile(50) / 1000))
  io.write(string.format("p99_ms %.3f\n", latency:percentile(99) / 1000))
end
