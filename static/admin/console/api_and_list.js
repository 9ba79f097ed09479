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

