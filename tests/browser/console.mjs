// Drives the admin console over a running sale in headless Chromium and checks
// that its numbers move while tests/api/console.rs places orders.
//   node console.mjs BASE_URL ADMIN_TOKEN VOUCHER_ID EXPECTED_ORDERS STOCK SCREENSHOT
// Talks to the Rust test over stdout, one line each: READY (the page shows the
// sale, before any order), PAUSED (the page's Pause button took effect), then
// OK <json> (after a refused creation and a top-up through the page's forms) and
// exit 0. Anything wrong: a message on stderr and exit 1.
import { chromium } from "playwright-core";

const [base, token, voucher, expectedArg, stockArg, screenshot] = process.argv.slice(2);
const expected = Number(expectedArg);
const stock = Number(stockArg);
if (!base || !token || !voucher || !expected || !stock || !screenshot) {
  console.error("usage: node console.mjs BASE_URL ADMIN_TOKEN VOUCHER_ID EXPECTED_ORDERS STOCK SCREENSHOT");
  process.exit(2);
}
const WAIT_MS = 30_000;
const problems = [];

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  // A CSP violation or a script error shows up as a console error. The API's 4xx
  // answers are the page's business (it shows them); anything else failing is not.
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) problems.push("console: " + m.text());
  });
  page.on("response", (r) => {
    if (r.status() >= 400 && !new URL(r.url()).pathname.startsWith("/api/v1/")) problems.push(`${r.status()} ${r.url()}`);
  });
  page.on("requestfailed", (r) => problems.push("request failed: " + r.url()));
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  const text = (id) => page.locator("#" + id).innerText();
  const number = async (id) => Number((await text(id)).replace(/,/g, ""));

  const response = await page.goto(`${base}/admin/#token=${token}&voucher=${voucher}`);
  if (!response.headers()["content-security-policy"]) throw new Error("no Content-Security-Policy on /admin/");
  await page.locator(`#live[data-voucher="${voucher}"]`).waitFor({ timeout: WAIT_MS });
  await page.waitForFunction(() => document.getElementById("orders-accepted").textContent === "0", null, {
    timeout: WAIT_MS,
  });
  const hash = await page.evaluate(() => location.hash);
  if (hash !== "") throw new Error("the token stayed in the URL: " + hash);
  const kept = await page.evaluate(() => sessionStorage.getItem("seckill.admin.token"));
  if (kept !== token) throw new Error("the token was not kept in sessionStorage");
  console.log("READY");

  // Watch the numbers while the orders come in: every value "accepted" shows.
  const seen = new Set();
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const accepted = await number("orders-accepted");
    seen.add(accepted);
    const done =
      accepted === expected &&
      (await number("orders-persisted")) === expected &&
      (await number("stock-remaining")) === stock - expected &&
      (await text("audit-balanced")) === "balanced" &&
      Number(await page.locator("#rate-chart").getAttribute("data-max-rate")) > 0;
    if (done) break;
    if (Date.now() > deadline) {
      throw new Error(`the page did not reach ${expected} persisted orders; it shows accepted ${accepted}, ` +
        `persisted ${await text("orders-persisted")}, stock ${await text("stock-remaining")}, ` +
        `books ${await text("audit-balanced")}`);
    }
    await page.waitForTimeout(100);
  }
  if (seen.size < 3) throw new Error("the numbers did not move while orders came in: saw " + [...seen].join(", "));
  await page.screenshot({ path: screenshot, fullPage: true });

  // A narrow window: nothing sticks out sideways.
  await page.setViewportSize({ width: 380, height: 800 });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  if (overflow > 0) throw new Error(`in a 380 px window the page is ${overflow} px too wide`);
  await page.screenshot({ path: screenshot.replace(/\.png$/, "-narrow.png"), fullPage: true });
  await page.setViewportSize({ width: 1280, height: 900 });

  await page.locator("#pause").click();
  await page.waitForFunction(() => document.getElementById("sale-state").textContent === "paused", null, {
    timeout: WAIT_MS,
  });
  console.log("PAUSED");

  // The create form shows the API's validation message beside the field it names.
  const form = page.locator("#create-form");
  for (const [name, value] of [["shop_id", "7"], ["title", "bad"], ["pay_value", "1"], ["actual_value", "2"], ["stock", "-1"]]) {
    await form.locator(`[name="${name}"]`).fill(value);
  }
  await form.locator('button[type="submit"]').click();
  const stockError = form.locator('.err[data-for="stock"]');
  await page.waitForFunction((el) => el.textContent.startsWith("stock:"), await stockError.elementHandle(), {
    timeout: WAIT_MS,
  });
  const validation = await stockError.innerText();

  // A top-up shows in the total at once.
  await page.locator("#topup-add").fill("5");
  await page.locator('#topup-form button[type="submit"]').click();
  await page.waitForFunction((total) => document.getElementById("stock-total").textContent === total, String(stock + 5), {
    timeout: WAIT_MS,
  });
  // A link whose voucher is not an id: ignored, said so, and nothing fetched from
  // it (unchecked, "1/../../../health/ready" would have the page fetch
  // /api/v1/health/ready with the admin's token).
  const probe = await browser.newPage();
  const fetched = [];
  probe.on("request", (r) => fetched.push(new URL(r.url()).pathname));
  await probe.goto(`${base}/admin/#token=${token}&voucher=${encodeURIComponent("1/../../../health/ready")}`);
  await probe.waitForFunction(() => !document.getElementById("notice").hidden, null, { timeout: WAIT_MS });
  const said = await probe.locator("#notice").innerText();
  if (!said.includes("not a voucher id")) throw new Error("a bad #voucher= was not refused: " + said);
  // (The Redis state the page polls names no voucher.)
  const astray = fetched.filter(
    (p) => p.startsWith("/api/") && !/^\/api\/v1\/admin\/(redis|vouchers(\/[0-9]+(\/[a-z]+)?)?)$/.test(p),
  );
  if (astray.length) throw new Error("the page fetched paths made from #voucher=: " + astray.join(", "));
  await probe.close();

  if (problems.length) throw new Error(problems.join("\n"));
  console.log("OK " + JSON.stringify({ seen: [...seen].sort((a, b) => a - b), validation, screenshot }));
} catch (e) {
  console.error("browser test: " + e.message + (problems.length ? "\n" + problems.join("\n") : ""));
  process.exitCode = 1;
} finally {
  await browser.close();
}
