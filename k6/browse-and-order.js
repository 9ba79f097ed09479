// Steady mix: shoppers browse a shop's vouchers, look at one, order it, and poll
// their order until it is persisted.
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e SECKILL_JWT_SECRET=... k6/browse-and-order.js
// Size (defaults: the full run): RATE (shoppers/s), DURATION, STOCK, P99_MS (p99
// bound of the order request), PERSIST_MS (how long an order may stay pending).
import http from 'k6/http';
import exec from 'k6/execution';
import { check, sleep } from 'k6';
import { Counter, Rate } from 'k6/metrics';
import { BASE_URL, auth, createFlashSale, invariants, voucherStats, shopper } from './lib.js';

const PERSIST_MS = Number(__ENV.PERSIST_MS || 2000);
const serverErrors = new Counter('server_errors');
const persisted = new Rate('persisted_in_time');

export const options = {
  scenarios: {
    mix: {
      executor: 'constant-arrival-rate',
      rate: Number(__ENV.RATE || 200),
      timeUnit: '1s',
      duration: __ENV.DURATION || '1m',
      preAllocatedVUs: Number(__ENV.VUS || 100),
      maxVUs: Number(__ENV.MAX_VUS || 500),
    },
  },
  thresholds: {
    server_errors: ['count==0'],
    broken_invariants: ['count==0'],
    http_req_failed: ['rate<0.01'],
    checks: ['rate>0.99'],
    persisted_in_time: ['rate>0.99'],
    'http_req_duration{name:order}': [`p(99)<${Number(__ENV.P99_MS || 50)}`],
  },
};

const STOCK = Number(__ENV.STOCK || 100000);

export function setup() {
  return { voucher: createFlashSale(STOCK), runBase: Date.now() * 1000 };
}

function note(res) {
  if (res.status >= 500) {
    serverErrors.add(1);
  }
  return res;
}

export default function (data) {
  const user = shopper(data.runBase, exec.scenario.iterationInTest);
  const list = note(http.get(`${BASE_URL}/api/v1/vouchers?shop_id=1`, { tags: { name: 'list' } }));
  check(list, { 'list 200': (r) => r.status === 200 });
  const one = note(http.get(`${BASE_URL}/api/v1/vouchers/${data.voucher}`, { tags: { name: 'voucher' } }));
  check(one, { 'voucher 200': (r) => r.status === 200 });
  const params = Object.assign(auth(user), { tags: { name: 'order' } });
  const order = note(http.post(`${BASE_URL}/api/v1/vouchers/${data.voucher}/orders`, null, params));
  check(order, { 'order 202': (r) => r.status === 202 });
  if (order.status !== 202) {
    return;
  }
  const id = order.json('order_id');
  const deadline = Date.now() + PERSIST_MS;
  for (;;) {
    const status = note(http.get(`${BASE_URL}/api/v1/orders/${id}`, Object.assign(auth(user), { tags: { name: 'poll' } })));
    if (status.status === 200 && status.json('status') === 'created') {
      persisted.add(true);
      return;
    }
    if (Date.now() >= deadline) {
      persisted.add(false);
      return;
    }
    sleep(0.1);
  }
}

export function teardown(data) {
  let stats = voucherStats(data.voucher);
  for (let i = 0; i < 100 && stats.orders_persisted < stats.orders_accepted; i++) {
    sleep(0.1);
    stats = voucherStats(data.voucher);
  }
  invariants(stats, {
    'accepted <= stock': (s) => s.orders_accepted <= STOCK,
    'every unit sold or on sale': (s) => s.stock_remaining + s.orders_accepted === STOCK,
    'every accepted order persisted within 10 s': (s) => s.orders_persisted === s.orders_accepted,
  });
}
