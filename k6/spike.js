// Spike: from a trickle to many times the normal load in seconds and back; the
// service must answer (202, 409, 429 or 503 with Retry-After), never time out,
// never answer another 5xx, and never sell more than the stock.
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e SECKILL_JWT_SECRET=... k6/spike.js
// Size (defaults: the full run): STOCK, SPIKE_VUS, CALM, RISE, HOLD (durations),
// P99_MS (p99 bound of every answer).
import http from 'k6/http';
import exec from 'k6/execution';
import { check } from 'k6';
import { Counter } from 'k6/metrics';
import { BASE_URL, auth, createFlashSale, invariants, voucherStats, shopper } from './lib.js';

const STOCK = Number(__ENV.STOCK || 500);
const SPIKE_VUS = Number(__ENV.SPIKE_VUS || 500);
const serverErrors = new Counter('server_errors');

export const options = {
  scenarios: {
    spike: {
      executor: 'ramping-vus',
      startVUs: 1,
      stages: [
        { target: 5, duration: __ENV.CALM || '10s' },
        { target: SPIKE_VUS, duration: __ENV.RISE || '5s' },
        { target: SPIKE_VUS, duration: __ENV.HOLD || '20s' },
        { target: 5, duration: __ENV.RISE || '5s' },
      ],
    },
  },
  thresholds: {
    server_errors: ['count==0'],
    broken_invariants: ['count==0'],
    checks: ['rate>0.999'],
    http_req_duration: [`p(99)<${Number(__ENV.P99_MS || 1000)}`],
  },
};

export function setup() {
  return { voucher: createFlashSale(STOCK), runBase: Date.now() * 1000 };
}

export default function (data) {
  const user = shopper(data.runBase, exec.scenario.iterationInTest);
  const res = http.post(`${BASE_URL}/api/v1/vouchers/${data.voucher}/orders`, null, Object.assign(auth(user), { timeout: '5s' }));
  if (res.status >= 500 && res.status !== 503) {
    serverErrors.add(1);
  }
  check(res, {
    'answered with a contract status': (r) => [202, 409, 429, 503].includes(r.status),
    'shed answers carry Retry-After': (r) => ![429, 503].includes(r.status) || r.headers['Retry-After'] !== undefined,
  });
}

export function teardown(data) {
  const stats = voucherStats(data.voucher);
  invariants(stats, {
    'accepted <= stock': (s) => s.orders_accepted <= STOCK,
    'every unit sold or on sale': (s) => s.stock_remaining + s.orders_accepted === STOCK,
  });
}
