// The admin console: vanilla JS, no dependencies, only endpoints of the OpenAPI
// document. The admin token lives in sessionStorage (this tab only); a token in
// the URL fragment (#token=<jwt>) is taken from there and removed from the URL.
"use strict";

const TOKEN_KEY = "seckill.admin.token";
const POLL_MS = 1000;
const CHART_POINTS = 60;
const $ = (id) => document.getElementById(id);
const VOUCHER_ID = /^[1-9][0-9]{0,18}$/;

let token = null;
let selected = null; // voucher id (string) watched live
let pollTimer = null;
let polling = false;
let prev = null; // previous live reading, for orders per second
let rates = [];
let oldest = null; // next_before of the voucher list

// --- token ---------------------------------------------------------------------
function takeFragment() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ""));
  const t = params.get("token");
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  const v = params.get("voucher");
  if (t || v) history.replaceState(null, "", location.pathname + location.search);
  // Only an id: the value goes into the paths the page fetches with the admin's
  // token, and a link could otherwise send it elsewhere ("1/../../..").
  if (v !== null && !VOUCHER_ID.test(v)) {
    start.refused = "The link's voucher (#voucher=) is not a voucher id; ignored.";
    return null;
  }
  return v;
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  token = null;
  stopLive();
  $("app").hidden = true;
  $("sign-out").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
}

// --- API -----------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
  // validation_failed names the field first: "stock: must be >= 0".
  get field() {
    const m = this.code === "validation_failed" && /^([a-z_]+): /.exec(this.message);
    return m ? m[1] : null;
  }
}

async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + token };
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  const data = await resp.json().catch(() => null);
  if (!resp.ok) {
    const e = (data && data.error) || { code: "http_" + resp.status, message: resp.statusText };
    const err = new ApiError(resp.status, e.code, e.message);
    if (resp.status === 401) signOut("The token was refused: " + e.message);
    else if (resp.status === 403) signOut("This token does not carry the admin role.");
    throw err;
  }
  return data;
}

function notice(text) {
  $("notice").textContent = text;
  $("notice").hidden = !text;
}

// --- formatting ----------------------------------------------------------------
const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
const when = (t) => new Date(t).toLocaleString(undefined, { dateStyle: "short", timeStyle: "short" });

function saleState(v, now = Date.now()) {
  if (v.stock === undefined) return "ordinary";
  if (v.paused) return "paused";
  if (now < Date.parse(v.begin_at)) return "upcoming";
  if (now >= Date.parse(v.end_at)) return "ended";
  return "running";
}

function badge(el, text) {
  el.textContent = text;
  el.className = "badge " + text;
}

// --- voucher list --------------------------------------------------------------
async function loadList(more) {
  const q = new URLSearchParams({ limit: "20" });
  if (more && oldest) q.set("before", oldest);
  const page = await api("GET", "/api/v1/admin/vouchers?" + q);
  const body = $("vouchers").tBodies[0];
  if (!more) body.replaceChildren();
  for (const v of page.items) body.append(row(v));
  oldest = page.next_before;
  $("more").hidden = !oldest;
}

function row(v) {
  const tr = document.createElement("tr");
  tr.dataset.id = v.id;
  if (v.id === selected) tr.className = "selected";
  const cells = [
    v.id,
    v.title,
    v.stock === undefined ? "–" : fmt(v.stock),
    v.stock === undefined ? "" : when(v.begin_at) + " – " + when(v.end_at),
  ];
  for (const c of cells) {
    const td = document.createElement("td");
    td.textContent = c;
    tr.append(td);
  }
  const state = document.createElement("td");
  const b = document.createElement("span");
  badge(b, saleState(v));
  state.append(b);
  tr.append(state);
  const act = document.createElement("td");
  if (v.stock !== undefined) {
    const watch = document.createElement("button");
    watch.type = "button";
    watch.textContent = "Watch";
    watch.className = "quiet watch";
    watch.addEventListener("click", () => watchSale(v.id));
    act.append(watch);
  }
  tr.append(act);
  return tr;
}

// --- live view -----------------------------------------------------------------
function stopLive() {
  clearInterval(pollTimer);
  pollTimer = null;
}

function watchSale(id) {
  selected = String(id);
  prev = null;
  rates = [];
  drawChart();
  for (const tr of $("vouchers").tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.id === selected);
  $("live").hidden = false;
  $("live").dataset.voucher = selected;
  $("full-audit-out").hidden = true;
  stopLive();
  poll();
  pollTimer = setInterval(poll, POLL_MS);
}

async function poll() {
  if (polling || !selected) return;
  polling = true;
  const id = selected;
  try {
    const live = await api("GET", "/api/v1/admin/vouchers/" + id + "/live");
    const gated = live.admission === "queue" || live.admission === "raffle";
    const admission = gated ? await api("GET", "/api/v1/admin/vouchers/" + id + "/admission") : null;
    if (id === selected) {
      show(live);
      showAdmission(admission);
      notice("");
    }
  } catch (e) {
    if (e.status === 404 || e.status === 409) stopLive();
    notice("Live numbers: " + e.message);
  } finally {
    polling = false;
  }
}

function show(live) {
  const o = live.orders;
  const s = live.stats;
  $("live-title").textContent = live.title;
  $("live-id").textContent = "#" + live.id;
  badge($("sale-state"), saleState(live, Date.parse(live.read_at)));
  $("pause").disabled = live.paused;
  $("resume").disabled = !live.paused;
  $("live-updated").textContent = "updated " + new Date(live.read_at).toLocaleTimeString();
  $("stock-remaining").textContent = fmt(s.stock_remaining);
  $("stock-total").textContent = fmt(live.stock);
  $("orders-accepted").textContent = fmt(o.accepted);
  $("orders-persisted").textContent = fmt(o.persisted);
  $("orders-failed").textContent = fmt(o.failed);
  $("orders-awaiting").textContent = fmt(o.awaiting_payment);
  $("orders-paid").textContent = fmt(o.paid);
  $("orders-cancelled").textContent = fmt(o.cancelled);
  $("orders-timed-out").textContent = fmt(o.timed_out);
  $("outbox-backlog").textContent = fmt(live.relay.outbox_backlog);
  $("relay-lag").textContent = live.relay.lag_ms < 1000 ? live.relay.lag_ms + " ms" : (live.relay.lag_ms / 1000).toFixed(1) + " s";
  showShards(s.shards, live.relay.shards);
  showAudit(live.audit);
  const t = Date.parse(live.read_at);
  if (prev && t > prev.t) {
    const rate = Math.max(0, (o.accepted - prev.accepted) / ((t - prev.t) / 1000));
    rates.push(rate);
    if (rates.length > CHART_POINTS) rates.shift();
    $("rate-now").textContent = "now " + rate.toFixed(1) + "/s";
    drawChart();
  }
  prev = { t, accepted: o.accepted };
}

// stats.shards: [{shard, stock_remaining}], and relay.shards: [{shard,
// outbox_backlog, lag_ms}], for a sale spread over several slots.
function showShards(shards, relay) {
  const list = $("shard-list");
  $("shards").hidden = !Array.isArray(shards) || shards.length === 0;
  if ($("shards").hidden) return;
  const backlog = new Map((relay || []).map((r) => [r.shard, r.outbox_backlog]));
  list.replaceChildren(
    ...shards.map((sh) => {
      const li = document.createElement("li");
      const b = backlog.get(sh.shard);
      li.textContent = "#" + sh.shard + ": " + fmt(sh.stock_remaining) + (b === undefined ? "" : " · backlog " + fmt(b));
      return li;
    }),
  );
}

// A queue's or a raffle's state (GET .../admission), or null for a first-come sale.
function showAdmission(a) {
  $("admission").hidden = !a;
  if (!a) return;
  badge($("admission-mode"), a.admission);
  $("admission-mode").textContent = a.admission;
  $("pow").textContent = a.pow_difficulty > 0 ? "proof of work: maxnumber " + fmt(a.pow_difficulty) : "";
  const q = a.queue;
  $("queue-view").hidden = !q;
  if (q) {
    $("queue-length").textContent = fmt(q.length);
    $("queue-admitted").textContent = fmt(q.admitted);
    $("queue-rate").textContent = fmt(q.admit_rate);
    $("queue-held").textContent = q.held ? "yes" : "no";
    $("queue-turn").textContent = "(a turn lasts " + fmt(q.turn_secs) + " s)";
    const input = $("rate-input");
    if (document.activeElement !== input) input.placeholder = String(q.admit_rate);
    $("admitted-list").replaceChildren(
      ...q.recent_admitted.map((p) => {
        const li = document.createElement("li");
        li.textContent = "place " + fmt(p.place) + ": shopper " + p.user_id + (p.admitted_at ? " at " + when(p.admitted_at) : "");
        return li;
      }),
    );
  }
  const r = a.raffle;
  $("raffle-view").hidden = !r;
  if (r) {
    const status = {
      open: "entries open",
      closing: "closing the entries",
      awaiting_beacon: "undrawn: waiting for beacon round " + (r.beacon ? r.beacon.round : "") +
        " (anyone may submit it: POST …/raffle/beacon)",
      drawing: "drawing",
      drawn: "drawn",
    };
    $("raffle-status").textContent = status[r.status] || r.status;
    $("raffle-beacon").textContent = r.beacon
      ? (r.beacon_is_quicknet ? "quicknet" : "chain " + r.beacon.public_key.slice(0, 16) + "… (not quicknet)") +
        ", round " + r.beacon.round + " at " + when(r.beacon.round_at)
      : "none (drawn by the seed alone)";
    $("raffle-commitment").textContent = r.commitment;
    $("raffle-draw-at").textContent = when(r.draw_at);
    $("raffle-drawn-at").textContent = r.drawn_at ? when(r.drawn_at) : "not yet";
    $("raffle-seed").textContent = r.seed || "secret until the draw";
    $("raffle-list-hash").textContent = r.list_hash || "–";
    $("raffle-entries").textContent = fmt(r.entries);
    $("raffle-winners").textContent = r.winners === null ? "–" : fmt(r.winners);
    $("winner-list").replaceChildren(
      ...r.winners_listed.map((w) => {
        const li = document.createElement("li");
        li.textContent = "shopper " + w.user_id + ": " + w.entry.slice(0, 16) + "…";
        return li;
      }),
    );
  }
}

async function setRate(ev) {
  ev.preventDefault();
  const form = ev.target;
  clearErrors(form);
  const rate = form.elements.admit_rate.value.trim();
  try {
    await api("POST", "/api/v1/admin/vouchers/" + selected + "/admission", { admit_rate: rate === "" ? null : Number(rate) });
    form.reset();
    await poll();
  } catch (e) {
    showError(form, e, form.querySelector('.err[data-for="admit_rate"]'));
  }
}

const CHECKS = {
  units_accounted_for: "every unit accounted for (on sale + in flight + live orders = stock)",
  postgres_stock: "Postgres stock = stock − live orders",
  no_returns_pending: "no stock return pending",
  orders_known_to_redis: "every order in Postgres was admitted by Redis",
  no_failed_orders: "no failed order",
};

function showAudit(a) {
  badge($("audit-balanced"), a.balanced ? "yes" : "no");
  $("audit-balanced").textContent = a.balanced ? "balanced" : "not balanced";
  $("audit-checks").replaceChildren(
    ...Object.entries(CHECKS).map(([k, text]) => {
      const li = document.createElement("li");
      li.textContent = (a.checks[k] ? "✓ " : "✗ ") + text;
      li.className = a.checks[k] ? "yes" : "no";
      return li;
    }),
  );
  $("audit-numbers").textContent =
    "stock " + fmt(a.stock) + " = on sale " + fmt(a.redis.stock_remaining) + " + in flight " + fmt(a.in_flight.orders) +
    " + live " + fmt(a.postgres.created + a.postgres.paid) + "; units returned " + fmt(a.redis.units_returned);
}

function drawChart() {
  const c = $("rate-chart");
  const dpr = window.devicePixelRatio || 1;
  const w = c.clientWidth || 600;
  const h = c.clientHeight || 160;
  c.width = Math.round(w * dpr);
  c.height = Math.round(h * dpr);
  const g = c.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const max = Math.max(1, ...rates);
  c.dataset.maxRate = String(Math.max(0, ...rates));
  const pad = { l: 36, r: 8, t: 10, b: 18 };
  const x = (i) => pad.l + (i * (w - pad.l - pad.r)) / (CHART_POINTS - 1);
  const y = (r) => h - pad.b - (r / max) * (h - pad.t - pad.b);
  g.strokeStyle = "#dde1e8";
  g.fillStyle = "#6b7385";
  g.font = "11px system-ui, sans-serif";
  for (const f of [0, 0.5, 1]) {
    g.beginPath();
    g.moveTo(pad.l, y(max * f));
    g.lineTo(w - pad.r, y(max * f));
    g.stroke();
    g.fillText((max * f).toFixed(max * f < 10 && f ? 1 : 0), 4, y(max * f) + 4);
  }
  g.fillText(CHART_POINTS + " s", w - pad.r - 28, h - 4);
  if (rates.length === 0) return;
  const first = CHART_POINTS - rates.length;
  g.beginPath();
  rates.forEach((r, i) => (i ? g.lineTo(x(first + i), y(r)) : g.moveTo(x(first + i), y(r))));
  g.strokeStyle = "#d9363e";
  g.lineWidth = 2;
  g.stroke();
  g.lineTo(x(CHART_POINTS - 1), y(0));
  g.lineTo(x(first), y(0));
  g.closePath();
  g.fillStyle = "rgba(217, 54, 62, 0.12)";
  g.fill();
}

// --- actions -------------------------------------------------------------------
async function setPaused(paused) {
  if (!selected) return;
  try {
    await api("POST", "/api/v1/admin/vouchers/" + selected + (paused ? "/pause" : "/resume"));
    await poll();
    await loadList(false);
  } catch (e) {
    notice((paused ? "Pause" : "Resume") + " failed: " + e.message);
  }
}

function clearErrors(form) {
  for (const el of form.querySelectorAll(".err")) el.textContent = "";
}

// Shows an API error next to the field it names, or under the form.
function showError(form, e, fallback) {
  const slot = e.field && form.querySelector('.err[data-for="' + e.field + '"]');
  (slot || fallback).textContent = e.message;
  if (slot) {
    const input = form.elements[e.field];
    if (input) input.focus();
  }
}

async function topUp(ev) {
  ev.preventDefault();
  const form = ev.target;
  clearErrors(form);
  const add = form.elements.add.value.trim();
  try {
    await api("POST", "/api/v1/admin/vouchers/" + selected + "/stock", { add: add === "" ? null : Number(add) });
    form.reset();
    await poll();
    await loadList(false);
  } catch (e) {
    showError(form, e, form.querySelector('.err[data-for="add"]'));
  }
}

async function create(ev) {
  ev.preventDefault();
  const form = ev.target;
  clearErrors(form);
  $("create-error").textContent = "";
  const body = {};
  for (const el of form.elements) {
    if (!el.name || el.value.trim() === "") continue;
    // First come is the default, and an ordinary voucher takes no admission.
    if (el.name === "admission" && el.value === "first_come") continue;
    if (el.type === "number") body[el.name] = Number(el.value);
    else if (el.type === "datetime-local") body[el.name] = new Date(el.value).toISOString();
    else body[el.name] = el.value;
  }
  try {
    const v = await api("POST", "/api/v1/admin/vouchers", body);
    form.reset();
    await loadList(false);
    if (v.stock !== undefined) watchSale(v.id);
  } catch (e) {
    showError(form, e, $("create-error"));
  }
}

function defaultWindow() {
  const local = (d) => new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
  const now = new Date();
  const form = $("create-form");
  form.elements.begin_at.value = local(now);
  form.elements.end_at.value = local(new Date(now.getTime() + 3600 * 1000));
}

// A sale closed for a repair (a shard of it lost state or went back in time): say
// which, since when and why; and how long repairs have kept the watched sale
// closed in all (GET /api/v1/admin/redis, per sale).
async function pollRedis() {
  if (!token) return;
  try {
    const r = await api("GET", "/api/v1/admin/redis");
    const sales = r.sales || [];
    const closed = sales.filter((s) => s.closed);
    const el = $("repair");
    if (closed.length) {
      el.textContent = "Closed for a Redis repair: " + closed.map((s) =>
        "sale " + s.voucher_id + (s.closed_since ? " since " + when(s.closed_since) : "") +
        (s.last_reason ? " (" + s.last_reason + ")" : "")).join("; ");
    }
    el.hidden = !closed.length;
    const watched = sales.find((s) => s.voucher_id === selected);
    $("closed-time").textContent = watched ? seconds(watched.closed_ms) : "0 s";
    $("repairs").textContent = watched ? "closed by " + fmt(watched.repairs) + " repair(s)" : "closed by repairs";
  } catch (e) {
    // The notice line reports the other calls' failures; this one stays quiet.
  }
}

function seconds(ms) {
  return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s";
}

async function start() {
  token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) return signOut("");
  $("login").hidden = true;
  $("app").hidden = false;
  $("sign-out").hidden = false;
  try {
    await loadList(false);
  } catch (e) {
    if (token) notice("Vouchers: " + e.message);
    return;
  }
  pollRedis();
  if (!start.redisTimer) start.redisTimer = setInterval(pollRedis, 2000);
  const wanted = start.voucher;
  start.voucher = null;
  if (start.refused) notice(start.refused);
  start.refused = null;
  if (wanted) watchSale(wanted);
}

document.addEventListener("DOMContentLoaded", () => {
  start.voucher = takeFragment();
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = $("token-input").value.trim();
    if (!t) return;
    sessionStorage.setItem(TOKEN_KEY, t);
    $("token-input").value = "";
    start();
  });
  $("sign-out").addEventListener("click", () => signOut(""));
  $("pause").addEventListener("click", () => setPaused(true));
  $("resume").addEventListener("click", () => setPaused(false));
  $("topup-form").addEventListener("submit", topUp);
  $("rate-form").addEventListener("submit", setRate);
  $("create-form").addEventListener("submit", create);
  $("refresh-list").addEventListener("click", () => loadList(false).catch((e) => notice(e.message)));
  $("more").addEventListener("click", () => loadList(true).catch((e) => notice(e.message)));
  $("full-audit").addEventListener("click", async () => {
    try {
      const a = await api("GET", "/api/v1/admin/vouchers/" + selected + "/audit");
      $("full-audit-out").textContent = JSON.stringify(a, null, 2);
      $("full-audit-out").hidden = false;
    } catch (e) {
      notice("Audit: " + e.message);
    }
  });
  window.addEventListener("resize", drawChart);
  defaultWindow();
  start();
});
