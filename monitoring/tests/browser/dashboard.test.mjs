// Browser test of the Basalt monitoring dashboard: starts the `serve_fixtures` example with the
// shared smartctl fixtures and the synthetic nvme-cli/hwmon recordings, loads `/` in headless
// Chromium (no network beyond 127.0.0.1), checks cards, status classes, charts and engine stats,
// and keeps a screenshot in artifacts/dashboard.png.
//
// Env: SERVE_FIXTURES_BIN (path to the built example, required), CHROMIUM (default
// /usr/bin/chromium).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const crate = join(here, "..", "..");
const sharedFixtures = join(crate, "..", "..", "shared", "fixtures", "smart");
const nvmeCli = join(crate, "testdata", "nvme-cli");
const hwmon = join(crate, "testdata", "hwmon");
const artifacts = join(here, "artifacts");

let server, baseUrl, context, profileDir;
const external = [];
const consoleErrors = [];

function startServer() {
  const bin = process.env.SERVE_FIXTURES_BIN;
  assert.ok(bin, "SERVE_FIXTURES_BIN must point to the built serve_fixtures example");
  const child = spawn(bin, ["--listen", "127.0.0.1:0", "--fixtures", sharedFixtures, "--fixtures", nvmeCli,
    "--fixtures", hwmon, "--engine-stats", join(crate, "testdata", "engine_stats.json")],
    { stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((resolve, reject) => {
    let buf = "";
    const timer = setTimeout(() => reject(new Error("server did not print its address")), 60000);
    child.stdout.on("data", (d) => {
      buf += d;
      const m = buf.match(/listening on (http:\/\/\S+)/);
      if (m) { clearTimeout(timer); resolve({ child, url: m[1] }); }
    });
    child.on("exit", (code) => reject(new Error("server exited with " + code)));
  });
}

before(async () => {
  ({ child: server, url: baseUrl } = await startServer());
  profileDir = mkdtempSync(join(tmpdir(), "basalt-chromium-"));
  context = await chromium.launchPersistentContext(profileDir, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  await context.route("**/*", (route) => {
    const u = new URL(route.request().url());
    if (u.hostname === "127.0.0.1") return route.continue();
    external.push(u.href);
    return route.abort();
  });
});

after(async () => {
  if (context) await context.close();
  if (server) server.kill();
  if (profileDir) rmSync(profileDir, { recursive: true, force: true });
});

async function openDashboard() {
  const page = await context.newPage();
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  await page.goto(baseUrl + "/");
  await page.waitForSelector("body[data-ready='1']", { timeout: 30000 });
  return page;
}

async function chartStats(page, id) {
  return page.$eval("#" + id, (svg) => {
    const lines = [...svg.querySelectorAll("polyline.series")];
    const coords = lines.flatMap((l) => l.getAttribute("points").trim().split(/\s+/));
    return {
      series: lines.length,
      points: coords.length,
      allNumeric: coords.every((c) => /^-?\d+(\.\d+)?,-?\d+(\.\d+)?$/.test(c)),
      labels: [...svg.querySelectorAll(".axis text")].map((t) => t.textContent),
    };
  });
}

test("one card per replayed device with status colours", async () => {
  const page = await openDashboard();
  const shared = readdirSync(sharedFixtures).filter((f) => f.endsWith(".json")).length;
  const nvmeDevices = new Set(readdirSync(nvmeCli).map((f) => f.split(".")[0])).size;
  const cards = await page.$$eval(".card", (cs) => cs.map((c) => ({ device: c.dataset.device, cls: c.className })));
  assert.equal(cards.length, shared + nvmeDevices);
  const cls = (dev) => cards.find((c) => c.device === dev)?.cls;
  // Synthetic nvme-cli devices: hot + temperature bit set → crit; 86% used → warn; healthy → ok.
  assert.match(cls("/dev/nvme5"), /status-crit/);
  assert.match(cls("/dev/nvme7"), /status-warn/);
  assert.match(cls("/dev/nvme3"), /status-ok/);
  const crit = await page.$eval(".card[data-device='/dev/nvme5']", (c) => c.textContent);
  assert.match(crit, /76 °C/);
  assert.match(crit, /critical_warning 2/);
  const summary = await page.textContent("#summary");
  assert.match(summary, new RegExp(`${shared + nvmeDevices} devices`));
  await page.close();
});

test("temperature, wear and CPU charts draw lines for every range; engine stats shown", async () => {
  const page = await openDashboard();
  for (const id of ["chart-temperature", "chart-wear", "chart-cpu"]) {
    const s = await chartStats(page, id);
    assert.ok(s.series > 0, id + " has no series");
    assert.ok(s.points > s.series * 10, id + " has too few points");
    assert.ok(s.allNumeric, id + " has malformed points");
  }
  const cpu = await chartStats(page, "chart-cpu");
  assert.equal(cpu.series, 4); // k10temp Tctl/Tccd1, coretemp Package/Core 0
  const engine = await page.$$eval("#engine-stats dt", (d) => d.map((x) => x.textContent));
  assert.ok(engine.includes("keys") && engine.includes("gc.runs"), JSON.stringify(engine));
  assert.equal(await page.isHidden("#engine-panel"), false);

  mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: join(artifacts, "dashboard.png"), fullPage: true });

  for (const range of ["1h", "30d"]) {
    await page.click(`#ranges button[data-range='${range}']`);
    await page.waitForSelector("body[data-ready='1']", { timeout: 30000 });
    const s = await chartStats(page, "chart-temperature");
    assert.ok(s.series > 0 && s.allNumeric, range);
    if (range === "30d") assert.ok(s.labels.some((l) => /[A-Za-z]/.test(l)), "30d axis shows dates: " + s.labels);
  }
  await page.locator(".charts").screenshot({ path: join(artifacts, "charts-30d.png") });
  await page.close();
});

test("the page loads nothing from outside and logs no errors", async () => {
  const page = await openDashboard();
  await page.close();
  assert.deepEqual(external, []);
  assert.deepEqual(consoleErrors, []);
});
