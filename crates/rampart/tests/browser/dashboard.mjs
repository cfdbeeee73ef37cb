// Drives the live dashboard in a real headless Chromium (Debian's, through playwright-core):
// the page loads with no console errors, connects by itself (the browser is in metrics_allow:
// no key, no click), its numbers move when traffic is sent, the charts have a time axis, hosts
// are shown without their port, and the purge form asks for the key and then purges. Run by
// crates/rampart/tests/dashboard.rs with the proxy's address, the API key and the host whose
// /popular the origin serves cacheably; with SCREENSHOT set, a screenshot of the page at 1,400
// px wide is written there. Prints one line: RESULT {json}; exits 1 on any failure.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [base, key, host] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
const profile = mkdtempSync(join(tmpdir(), 'rampart-chromium-'));
const errors = [];
let browser;

async function waitFor(what, check, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error('timed out waiting for ' + what);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// Requests from this process (Node's fetch), as a client other than the browser.
async function traffic(path, n) {
  for (let i = 0; i < n; i++) {
    const res = await fetch(base + path);
    await res.arrayBuffer();
  }
}

try {
  // A fresh profile each run; what this machine's Chromium needs (no sandbox as root, no GPU,
  // no QUIC, no calls home).
  browser = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const page = browser.pages()[0] || await browser.newPage();
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') errors.push(m.type() + ': ' + m.text()); });
  page.on('pageerror', (e) => errors.push('page error: ' + e.message));
  page.on('requestfailed', (r) => {
    // The event stream is cut when the page closes; anything else is a failure.
    if (!r.url().endsWith('/dashboard/events')) errors.push('request failed: ' + r.url());
  });

  const res = await page.goto(base + '/_rampart/dashboard');
  if (res.status() !== 200) throw new Error('dashboard answered ' + res.status());
  // No key typed, no button clicked: the page connects at load.
  await waitFor('the live state without a click', async () => (await page.textContent('#state')) === 'live');
  const loginShown = await page.isVisible('#login');
  const number = async (sel) => Number((await page.textContent(sel)).replace(/[^0-9.]/g, '')) || 0;
  const before = await number('#total');

  await traffic('/popular', 30);
  const rps = await waitFor('requests per second above 0', async () => {
    const v = await number('#rps');
    return v > 0 ? v : null;
  });
  const total = await waitFor('the request count to rise by 30', async () => {
    const v = await number('#total');
    return v >= before + 30 ? v : null;
  });
  const topPath = await waitFor('/popular at the top of the paths', async () => {
    const t = await page.textContent('#paths tbody tr:first-child td:first-child');
    return t && t.endsWith('/popular') ? t : null;
  });
  const hit = await page.textContent('#hit-total');
  const upstream = await page.textContent('#upstreams tbody tr:first-child td:nth-child(3)');
  // The origin's response time comes from the requests it answered (the first /popular and
  // nothing else here: no probes, no Performance routing).
  const originTime = await waitFor('the origin response time', async () => {
    const t = await page.textContent('#upstreams tbody tr:first-child td:nth-child(4)');
    return t && t !== '–' ? t : null;
  });
  // The hit-ratio and latency chart draws lines once a few seconds in a row had requests:
  // pixels below its label band.
  for (let i = 0; i < 12; i++) {
    await traffic('/popular', 5);
    await new Promise((r) => setTimeout(r, 250));
  }
  const qualityDrawn = await page.evaluate(() => {
    const c = document.getElementById('quality');
    const data = c.getContext('2d').getImageData(0, 20, c.width, c.height - 20).data;
    let painted = 0;
    for (let i = 3; i < data.length; i += 4) if (data[i] > 0) painted += 1;
    return painted;
  });

  // The time axis: clock times (hh:mm:ss) under both charts.
  const ticks = await waitFor('tick labels under the charts', async () => {
    const t = await page.evaluate(() => ['chart', 'quality'].map((id) => document.getElementById(id).dataset.ticks || ''));
    return t.every((x) => /\d{1,2}:\d{2}:\d{2}/.test(x)) ? t : null;
  });
  const topHost = await page.textContent('#hosts tbody tr:first-child td:first-child');
  // Tracing is off here: no traces panel.
  const tracesPanel = await page.isVisible('#traces-panel');
  const chartWidth = await page.evaluate(() => document.getElementById('chart').getBoundingClientRect().width);
  const mainWidth = await page.evaluate(() => document.getElementById('board').getBoundingClientRect().width);
  if (process.env.SCREENSHOT) await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });

  // The purge form: the stored /popular goes.
  await page.fill('#purge-host', host);
  await page.fill('#purge-path', '/popular');
  await page.selectOption('#purge-scope', 'exact');
  const purgeResult = async () => {
    await page.click('#purge button');
    return waitFor('the purge result', async () => {
      const t = await page.textContent('#purge-result');
      return t && t !== 'purging…' ? t : null;
    });
  };
  // Connected without a key, the purge is refused and the key is asked for; with it typed in
  // and the page connected again, the purge goes through.
  const refused = await purgeResult();
  const askedForKey = await page.isVisible('#login');
  await page.fill('#key', key);
  await page.click('#login button');
  await waitFor('live again with the key', async () => (await page.textContent('#state')) === 'live');
  const purged = await purgeResult();
  // The refusal's 401 is the one console error expected.
  const expected = errors.findIndex((e) => e.includes('401'));
  if (expected >= 0) errors.splice(expected, 1);

  // Let a few more events arrive, then look for console errors.
  await page.waitForTimeout(1500);
  const result = { loginShown, tracesPanel, rps, before, total, topPath, topHost, ticks, chartWidth, mainWidth, hit, upstream, originTime, qualityDrawn, refused, askedForKey, purged, errors };
  console.log('RESULT ' + JSON.stringify(result));
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
  process.exit(0);
} catch (e) {
  console.log('RESULT ' + JSON.stringify({ failure: String(e && e.stack || e), errors }));
  if (browser) await browser.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
  process.exit(1);
}
