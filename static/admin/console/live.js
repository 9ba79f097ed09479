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

