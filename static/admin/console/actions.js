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
