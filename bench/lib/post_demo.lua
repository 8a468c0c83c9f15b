-- wrk script: POST /commands/demo with a JSON body and the access token, on keep-alive
-- connections. Only wrk.method/body/headers are set (no request()/response() callbacks), so wrk
-- builds the request once and the client costs as little as it can.
-- done() prints one machine-readable line; wrk keeps latency in whole microseconds.
wrk.method = "POST"
wrk.body = os.getenv("BENCH_BODY") or '{"x":42,"y":"world"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-Access-Token"] = os.getenv("BENCH_TOKEN") or "secret"

-- Paced load (BENCH_DELAY_MS set): each connection waits that many milliseconds after an answer
-- before its next call, so 64 connections offer at most 64000 / BENCH_DELAY_MS calls/s and the
-- server is not saturated. wrk only calls delay() when the script defines it, and its latency
-- clock starts when a call is sent, so the wait is not counted.
local pace = tonumber(os.getenv("BENCH_DELAY_MS") or "")
if pace and pace > 0 then
  function delay()
    return pace
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"min":%d,"mean":%.2f,"stdev":%.2f,"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.stdev,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max))
end
