// Drives the admin console's admission panel in headless Chromium: a queue sale
// (its length, frontier, rate, last admitted shoppers, and the live rate form) and
// a drawn raffle (commitment, seed, entries, winners).
//   node admission.mjs BASE_URL ADMIN_TOKEN QUEUE_ID ADMITTED RAFFLE_ID COMMITMENT WINNERS SCREENSHOT
// Says RATE once the page's form set the queue's rate to 7, then OK and exit 0.
// Anything wrong: a message on stderr and exit 1.
import { chromium } from "playwright-core";

const [base, token, queue, admittedArg, raffle, commitment, winnersArg, screenshot] = process.argv.slice(2);
const admitted = Number(admittedArg);
const winners = Number(winnersArg);
if (!base || !token || !queue || !admitted || !raffle || !commitment || !winners || !screenshot) {
  console.error("usage: node admission.mjs BASE_URL ADMIN_TOKEN QUEUE_ID ADMITTED RAFFLE_ID COMMITMENT WINNERS SCREENSHOT");
  process.exit(2);
}
const WAIT_MS = 30_000;
const problems = [];

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking"],
});
try {
  const watch = async (voucher) => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on("console", (m) => {
      if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) problems.push("console: " + m.text());
    });
    page.on("pageerror", (e) => problems.push("page error: " + e.message));
    await page.goto(`${base}/admin/#token=${token}&voucher=${voucher}`);
    await page.locator(`#live[data-voucher="${voucher}"]`).waitFor({ timeout: WAIT_MS });
    await page.locator("#admission").waitFor({ state: "visible", timeout: WAIT_MS });
    return page;
  };
  const text = (page, id) => page.locator("#" + id).innerText();

  // The queue: every admitted shopper counted and listed.
  const q = await watch(queue);
  await q.locator("#queue-view").waitFor({ state: "visible", timeout: WAIT_MS });
  await q.waitForFunction(
    (n) => document.getElementById("queue-admitted").textContent === String(n) &&
      document.getElementById("admitted-list").children.length === n,
    admitted,
    { timeout: WAIT_MS },
  );
  if ((await text(q, "admission-mode")) !== "queue") throw new Error("the mode is not shown as queue");
  await q.locator("#rate-input").fill("7");
  await q.locator('#rate-form button[type="submit"]').click();
  await q.waitForFunction(() => document.getElementById("queue-rate").textContent === "7", null, { timeout: WAIT_MS });
  console.log("RATE");
  await q.screenshot({ path: screenshot, fullPage: true });

  // The raffle: its commitment, the revealed seed, the winners.
  const r = await watch(raffle);
  await r.locator("#raffle-view").waitFor({ state: "visible", timeout: WAIT_MS });
  await r.waitForFunction(
    (n) => /^[0-9a-f]{64}$/.test(document.getElementById("raffle-seed").textContent) &&
      document.getElementById("winner-list").children.length === n,
    winners,
    { timeout: WAIT_MS },
  );
  if ((await text(r, "raffle-commitment")) !== commitment) throw new Error("the commitment shown is not the sale's");
  if ((await text(r, "raffle-winners")) !== String(winners)) throw new Error("the winner count is wrong");
  // A narrow window: the hashes wrap, nothing sticks out sideways.
  await r.setViewportSize({ width: 380, height: 800 });
  const overflow = await r.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  if (overflow > 0) throw new Error(`in a 380 px window the raffle panel is ${overflow} px too wide`);
  await r.screenshot({ path: screenshot.replace(/\.png$/, "-raffle.png"), fullPage: true });

  if (problems.length) throw new Error(problems.join("\n"));
  console.log("OK");
} catch (e) {
  console.error("browser test: " + e.message + (problems.length ? "\n" + problems.join("\n") : ""));
  process.exitCode = 1;
} finally {
  await browser.close();
}
