// Flash crowd: distinct shoppers ramp up on one voucher, then hold at the peak.
// Fails the run (thresholds) on any answer outside the contract, any server error
// but shedding (503, allowed up to MAX_SHED_RATE), a slow p99, more orders
// accepted than the stock, a unit neither sold nor on sale, or accepted orders
// that do not reach Postgres. Each shopper told 202 then waits for their order as
// a client would, with one long poll (`GET /api/v1/orders/{id}?wait=10`, again
// while it answers `pending`), and fails the run unless it reads `created`.
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e SECKILL_JWT_SECRET=... -e STOCK=1000 -e PEAK=2000 k6/flash-crowd.js
// Size (defaults: the full run): STOCK, PEAK (requests/s), RAMP, HOLD (durations),
// P99_MS (p99 bound of the 2xx answers), MAX_SHED_RATE (share of 503s tolerated).
import http from 'k6/http';
import exec from 'k6/execution';
import { check, sleep } from 'k6';
import { Counter, Rate } from 'k6/metrics';
import { BASE_URL, auth, createFlashSale, invariants, voucherStats, shopper } from './lib.js';

const STOCK = Number(__ENV.STOCK || 1000);
const PEAK = Number(__ENV.PEAK || 2000);
const accepted = new Counter('orders_accepted');
const refused = new Counter('orders_refused');
const serverErrors = new Counter('server_errors');
const shed = new Rate('shed');
const waitedOut = new Counter('orders_not_created_after_waiting');

export const options = {
  scenarios: {
    crowd: {
      executor: 'ramping-arrival-rate',
      startRate: 10,
      timeUnit: '1s',
      preAllocatedVUs: Number(__ENV.VUS || 100),
      maxVUs: Number(__ENV.MAX_VUS || 1000),
      stages: [
        { target: PEAK, duration: __ENV.RAMP || '10s' },
        { target: PEAK, duration: __ENV.HOLD || '20s' },
        { target: 0, duration: '5s' },
      ],
    },
  },
  thresholds: {
    // Refusals are 4xx by design; a 5xx other than shedding fails the run.
    server_errors: ['count==0'],
    broken_invariants: ['count==0'],
    shed: [`rate<=${Number(__ENV.MAX_SHED_RATE || 0.01)}`],
    // The orders' answers; a long poll is meant to take its time.
    'http_req_duration{kind:order,expected_response:true}': [`p(99)<${Number(__ENV.P99_MS || 50)}`],
    orders_not_created_after_waiting: ['count==0'],
    checks: ['rate==1'],
  },
};

export function setup() {
  return { voucher: createFlashSale(STOCK), runBase: Date.now() * 1000 };
}

export default function (data) {
  const user = shopper(data.runBase, exec.scenario.iterationInTest);
  const params = auth(user);
  const res = http.post(`${BASE_URL}/api/v1/vouchers/${data.voucher}/orders`, null, {
    ...params,
    tags: { kind: 'order' },
  });
  if (res.status === 202) {
    accepted.add(1);
    waitFor(res.json('order_id'), params);
  } else {
    refused.add(1);
  }
  shed.add(res.status === 503);
  if (res.status >= 500 && res.status !== 503) {
    serverErrors.add(1);
  }
  check(res, {
    'answered 202, 409, 429 or 503': (r) => [202, 409, 429, 503].includes(r.status),
  });
}

// Long polls until the order is no longer pending (at most three, 30 s): the
// status it reads must be `created`.
function waitFor(orderId, params) {
  let status = 'pending';
  for (let i = 0; i < 3 && status === 'pending'; i++) {
    const r = http.get(`${BASE_URL}/api/v1/orders/${orderId}?wait=10`, {
      ...params,
      tags: { kind: 'wait' },
      timeout: '15s',
    });
    if (r.status >= 500 && r.status !== 503) {
      serverErrors.add(1);
    }
    status = r.status === 200 ? r.json('status') : 'pending';
    if (r.status === 503) {
      sleep(Number(r.headers['Retry-After'] || 1));
    }
  }
  if (status !== 'created') {
    waitedOut.add(1);
  }
}

export function teardown(data) {
  let stats = voucherStats(data.voucher);
  // Every accepted order reaches Postgres (the worker persists in batches).
  for (let i = 0; i < 100 && stats.orders_persisted < stats.orders_accepted; i++) {
    sleep(0.1);
    stats = voucherStats(data.voucher);
  }
  invariants(stats, {
    'accepted <= stock': (s) => s.orders_accepted <= STOCK,
    'stock never negative': (s) => s.stock_remaining >= 0,
    'every unit sold or on sale': (s) => s.stock_remaining + s.orders_accepted === STOCK,
    'every accepted order persisted within 10 s': (s) => s.orders_persisted === s.orders_accepted,
  });
}
