// Shared helpers: HS256 tokens minted with k6's crypto module from the same secret
// as the server (SECKILL_JWT_SECRET), and a flash-sale voucher made through the
// admin API, so the scripts run unchanged against any deployment.
import http from 'k6/http';
import crypto from 'k6/crypto';
import encoding from 'k6/encoding';
import { check } from 'k6';
import { Counter } from 'k6/metrics';

export const BASE_URL = __ENV.BASE_URL || 'http://127.0.0.1:8080';
const SECRET = __ENV.SECKILL_JWT_SECRET || 'seckill-development-secret-do-not-use-in-production';

export function token(userId, role) {
  const header = encoding.b64encode(JSON.stringify({ alg: 'HS256', typ: 'JWT' }), 'rawurl');
  const claims = { sub: String(userId), exp: Math.floor(Date.now() / 1000) + 3600 };
  if (role) {
    claims.role = role;
  }
  const payload = encoding.b64encode(JSON.stringify(claims), 'rawurl');
  const signature = crypto.hmac('sha256', SECRET, `${header}.${payload}`, 'base64rawurl');
  return `${header}.${payload}.${signature}`;
}

export function auth(userId, role) {
  return { headers: { Authorization: `Bearer ${token(userId, role)}`, 'Content-Type': 'application/json' } };
}

// A flash sale open from now for an hour; returns its id.
export function createFlashSale(stock) {
  const now = Date.now();
  const body = JSON.stringify({
    shop_id: '1',
    title: 'k6 flash sale',
    pay_value: 100,
    actual_value: 1000,
    stock: stock,
    begin_at: new Date(now - 1000).toISOString(),
    end_at: new Date(now + 3600 * 1000).toISOString(),
  });
  const res = http.post(`${BASE_URL}/api/v1/admin/vouchers`, body, auth(1, 'admin'));
  if (res.status !== 201) {
    throw new Error(`creating the voucher failed: ${res.status} ${res.body}`);
  }
  return res.json('id');
}

export function voucherStats(voucherId) {
  return http.get(`${BASE_URL}/api/v1/admin/vouchers/${voucherId}`, auth(1, 'admin')).json('stats');
}

// A user id no other run uses: the run's start time plus the iteration number.
export function shopper(runBase, n) {
  return runBase + n;
}

// End-of-run invariants (checked once, in teardown): each that fails counts in
// `broken_invariants`, which the scenarios hold to 0. (A plain check would vanish
// in a `checks` rate over thousands of requests.)
const brokenInvariants = new Counter('broken_invariants');

export function invariants(value, named) {
  for (const [name, holds] of Object.entries(named)) {
    if (!check(value, { [name]: holds })) {
      brokenInvariants.add(1);
    }
  }
}
