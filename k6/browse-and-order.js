// Steady mix: shoppers browse a shop's vouchers, look at one, order it, and poll
// their order until it is persisted.
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e SECKILL_JWT_SECRET=... k6/browse-and-order.js
import http from 'k6/http';
import exec from 'k6/execution';
import { check, sleep } from 'k6';
import { BASE_URL, auth, createFlashSale, shopper } from './lib.js';

export const options = {
  scenarios: {
    mix: { executor: 'constant-arrival-rate', rate: Number(__ENV.RATE || 200), timeUnit: '1s', duration: '1m', preAllocatedVUs: 100, maxVUs: 500 },
  },
  thresholds: {
    http_req_failed: ['rate<0.01'],
    'http_req_duration{name:order}': ['p(99)<50'],
  },
};

export function setup() {
  return { voucher: createFlashSale(Number(__ENV.STOCK || 100000)), runBase: Date.now() * 1000 };
}

export default function (data) {
  const user = shopper(data.runBase, exec.scenario.iterationInTest);
  const list = http.get(`${BASE_URL}/api/v1/vouchers?shop_id=1`, { tags: { name: 'list' } });
  check(list, { 'list 200': (r) => r.status === 200 });
  const one = http.get(`${BASE_URL}/api/v1/vouchers/${data.voucher}`, { tags: { name: 'voucher' } });
  check(one, { 'voucher 200': (r) => r.status === 200 });
  const params = Object.assign(auth(user), { tags: { name: 'order' } });
  const order = http.post(`${BASE_URL}/api/v1/vouchers/${data.voucher}/orders`, null, params);
  check(order, { 'order 202': (r) => r.status === 202 });
  if (order.status !== 202) {
    return;
  }
  const id = order.json('order_id');
  for (let i = 0; i < 20; i++) {
    const status = http.get(`${BASE_URL}/api/v1/orders/${id}`, Object.assign(auth(user), { tags: { name: 'poll' } }));
    if (status.json('status') === 'created') {
      return;
    }
    sleep(0.1);
  }
  check(null, { 'persisted within 2 s': () => false });
}
