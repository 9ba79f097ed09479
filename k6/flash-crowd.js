// Flash crowd: distinct shoppers ramp up on one voucher, then hold at the peak.
// Checks that no more orders were accepted than the stock (the server's own count).
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e SECKILL_JWT_SECRET=... -e STOCK=1000 -e PEAK=2000 k6/flash-crowd.js
import http from 'k6/http';
import exec from 'k6/execution';
import { check } from 'k6';
import { Counter } from 'k6/metrics';
import { BASE_URL, auth, createFlashSale, voucherStats, shopper } from './lib.js';

const STOCK = Number(__ENV.STOCK || 1000);
const PEAK = Number(__ENV.PEAK || 2000);
const accepted = new Counter('orders_accepted');
const refused = new Counter('orders_refused');

export const options = {
  scenarios: {
    crowd: {
      executor: 'ramping-arrival-rate',
      startRate: 10,
      timeUnit: '1s',
      preAllocatedVUs: 100,
      maxVUs: 1000,
      stages: [
        { target: PEAK, duration: '10s' },
        { target: PEAK, duration: '20s' },
        { target: 0, duration: '5s' },
      ],
    },
  },
  thresholds: {
    // Refusals are 4xx by design; any 5xx other than shedding fails the run.
    'http_req_duration{expected_response:true}': ['p(99)<50'],
    checks: ['rate==1'],
  },
};

export function setup() {
  return { voucher: createFlashSale(STOCK), runBase: Date.now() * 1000 };
}

export default function (data) {
  const user = shopper(data.runBase, exec.scenario.iterationInTest);
  const res = http.post(`${BASE_URL}/api/v1/vouchers/${data.voucher}/orders`, null, auth(user));
  if (res.status === 202) {
    accepted.add(1);
  } else {
    refused.add(1);
  }
  check(res, {
    'answered 202, 409, 429 or 503': (r) => [202, 409, 429, 503].includes(r.status),
  });
}

export function teardown(data) {
  const stats = voucherStats(data.voucher);
  check(stats, {
    'accepted <= stock': (s) => s.orders_accepted <= STOCK,
    'stock never negative': (s) => s.stock_remaining >= 0,
  });
}
