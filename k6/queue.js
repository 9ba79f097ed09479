// A queued sale (admission "queue"): a crowd of distinct shoppers joins the waiting
// room before the sale begins (their places are drawn at the start), polls its
// place with the ticket it was given, and orders with the admission token once
// admitted. Fails the run (thresholds) on a server error (5xx but shedding), an
// order before admission that is not refused with 403, a slow p99 of the poll, an
// admitted shopper's order answered anything but 202 or 409, more orders than the
// stock, a unit neither sold nor on sale, the stock not sold out through the
// queue, or accepted orders that do not reach Postgres.
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e SECKILL_JWT_SECRET=... -e SHOPPERS=2000 -e STOCK=500 k6/queue.js
// Size (defaults: the full run): SHOPPERS (one VU each), STOCK, RATE (admitted a
// second), BEGIN_IN (seconds from setup to begin_at), WAIT (seconds a shopper
// polls after begin_at before giving up), P99_MS (p99 bound of the polls).
import http from 'k6/http';
import exec from 'k6/execution';
import { check, sleep } from 'k6';
import { Counter } from 'k6/metrics';
import { BASE_URL, auth, invariants, voucherStats, shopper } from './lib.js';

const SHOPPERS = Number(__ENV.SHOPPERS || 2000);
const STOCK = Number(__ENV.STOCK || 500);
const RATE = Number(__ENV.RATE || 200);
const BEGIN_IN = Number(__ENV.BEGIN_IN || 5);
const WAIT = Number(__ENV.WAIT || 30);
const accepted = new Counter('orders_accepted');
const admitted = new Counter('shoppers_admitted');
const serverErrors = new Counter('server_errors');
const badAdmittedOrders = new Counter('admitted_orders_refused_otherwise');
const unrefused = new Counter('orders_without_token_not_refused');

export const options = {
  scenarios: {
    waiting_room: {
      executor: 'per-vu-iterations',
      vus: SHOPPERS,
      iterations: 1,
      maxDuration: `${BEGIN_IN + WAIT + 30}s`,
    },
  },
  thresholds: {
    server_errors: ['count==0'],
    broken_invariants: ['count==0'],
    admitted_orders_refused_otherwise: ['count==0'],
    orders_without_token_not_refused: ['count==0'],
    'http_req_duration{name:queue_me}': [`p(99)<${Number(__ENV.P99_MS || 200)}`],
    checks: ['rate==1'],
  },
};

export function setup() {
  const now = Date.now();
  const begin = now + BEGIN_IN * 1000;
  const body = JSON.stringify({
    shop_id: '1',
    title: 'k6 queued sale',
    pay_value: 100,
    actual_value: 1000,
    stock: STOCK,
    begin_at: new Date(begin).toISOString(),
    end_at: new Date(begin + 3600 * 1000).toISOString(),
    admission: 'queue',
    admit_rate: RATE,
    turn_secs: 60,
  });
  const res = http.post(`${BASE_URL}/api/v1/admin/vouchers`, body, auth(1, 'admin'));
  if (res.status !== 201) {
    throw new Error(`creating the queued sale failed: ${res.status} ${res.body}`);
  }
  return { voucher: res.json('id'), runBase: now * 1000, begin: begin };
}

function counted(res) {
  if (res.status >= 500 && res.status !== 503) {
    serverErrors.add(1);
  }
  return res;
}

export default function (data) {
  const user = shopper(data.runBase, exec.vu.idInTest);
  const params = auth(user);
  const base = `${BASE_URL}/api/v1/vouchers/${data.voucher}`;
  const joined = counted(http.post(`${base}/queue`, null, params));
  check(joined, { 'joined: 201': (r) => r.status === 201 });
  if (joined.status !== 201) {
    return;
  }
  let tried = exec.vu.idInTest % 10 !== 0;
  let ticket = joined.json('ticket');
  const deadline = data.begin + WAIT * 1000;
  while (Date.now() < deadline) {
    const wait = Math.max(0, (data.begin - Date.now()) / 1000);
    sleep(Math.min(Math.max(wait, 0.2), 1));
    const poll = counted(
      http.get(`${base}/queue/me`, {
        headers: { ...params.headers, 'X-Queue-Ticket': ticket },
        tags: { name: 'queue_me' },
      }),
    );
    if (poll.status !== 200) {
      continue;
    }
    ticket = poll.json('ticket');
    const state = poll.json('state');
    if (state === 'admitted') {
      admitted.add(1);
      const order = counted(
        http.post(`${base}/orders`, null, {
          headers: { ...params.headers, 'X-Admission-Token': poll.json('admission_token') },
        }),
      );
      if (order.status === 202) {
        accepted.add(1);
      } else if (order.status !== 409) {
        badAdmittedOrders.add(1);
      }
      return;
    }
    if (state === 'turn_ended' || state === 'closed') {
      return;
    }
    if (state === 'waiting' && !tried) {
      // One shopper in ten tries to order while still waiting: 403 (or sold out).
      tried = true;
      const early = counted(http.post(`${base}/orders`, null, params));
      const soldOut = early.status === 409 && early.json('error.code') === 'sold_out';
      if (early.status !== 403 && !soldOut) {
        unrefused.add(1);
      }
    }
    // Waiting: poll again after about the estimated wait (between 0.2 and 1 s).
    const estimate = Number(poll.json('estimated_wait_secs') || 0);
    sleep(Math.min(Math.max(estimate - 0.2, 0), 0.8));
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
    'sold out through the queue (shoppers >= stock)': (s) => SHOPPERS < STOCK || s.orders_accepted === STOCK,
    'every accepted order persisted within 10 s': (s) => s.orders_persisted === s.orders_accepted,
  });
}
