// Spike: from a trickle to many times the normal load in seconds and back; the
// service must answer (202, 409, 429 or 503 with Retry-After), never time out.
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e SECKILL_JWT_SECRET=... k6/spike.js
import http from 'k6/http';
import exec from 'k6/execution';
import { check } from 'k6';
import { BASE_URL, auth, createFlashSale, voucherStats, shopper } from './lib.js';

const STOCK = Number(__ENV.STOCK || 500);

export const options = {
  scenarios: {
    spike: {
      executor: 'ramping-vus',
      startVUs: 1,
      stages: [
        { target: 5, duration: '10s' },
        { target: Number(__ENV.SPIKE_VUS || 500), duration: '5s' },
        { target: Number(__ENV.SPIKE_VUS || 500), duration: '20s' },
        { target: 5, duration: '5s' },
      ],
    },
  },
  thresholds: {
    checks: ['rate>0.999'],
    http_req_duration: ['p(99)<1000'],
  },
};

export function setup() {
  return { voucher: createFlashSale(STOCK), runBase: Date.now() * 1000 };
}

export default function (data) {
  const user = shopper(data.runBase, exec.scenario.iterationInTest);
  const res = http.post(`${BASE_URL}/api/v1/vouchers/${data.voucher}/orders`, null, Object.assign(auth(user), { timeout: '5s' }));
  check(res, {
    'answered with a contract status': (r) => [202, 409, 429, 503].includes(r.status),
    'shed answers carry Retry-After': (r) => ![429, 503].includes(r.status) || r.headers['Retry-After'] !== undefined,
  });
}

export function teardown(data) {
  check(voucherStats(data.voucher), { 'accepted <= stock': (s) => s.orders_accepted <= STOCK });
}
