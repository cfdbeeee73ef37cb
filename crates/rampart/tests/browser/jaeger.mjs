// Opens one of rampart's traces in the real Jaeger UI (headless Chromium through playwright-core)
// and writes a screenshot once the trace's timeline has rendered: its header, a row per span with
// its bar. Run by crates/rampart/tests/e2e/tracing.rs (`the_trace_shows_in_jaegers_ui`) with the
// query service's address, the trace id and where the PNG goes; with EXPAND set, the first span's
// details (its attributes and events) are opened first. Prints one line: RESULT {json}; exits 1
// on any failure.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [base, traceId, out] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
const profile = mkdtempSync(join(tmpdir(), 'rampart-jaeger-chromium-'));
const errors = [];
let browser;
try {
  // What this machine's Chromium needs: no sandbox as root, no GPU, no QUIC, no calls home.
  browser = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    viewport: { width: 1400, height: process.env.EXPAND ? 1240 : 520 },
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const page = browser.pages()[0] || await browser.newPage();
  page.on('pageerror', (e) => errors.push('page error: ' + e.message));
  page.on('console', (m) => { if (m.type() === 'error') errors.push('console: ' + m.text()); });
  const res = await page.goto(`${base}/trace/${traceId}`);
  if (res.status() !== 200) throw new Error('the trace page answered ' + res.status());
  await page.waitForSelector('.TracePageHeader', { timeout: 20000 });
  await page.waitForSelector('.span-row .span-name', { timeout: 20000 });
  await page.waitForSelector('.span-row .SpanBar--bar', { timeout: 20000 });
  const rows = await page.$$eval('.span-row .span-name', (els) => els.map((e) => e.textContent.trim()));
  if (process.env.EXPAND) {
    // The span in row EXPAND (0 = the first): its attributes and each of its events open.
    await page.locator('.span-row .span-name').nth(Number(process.env.EXPAND)).click();
    await page.waitForSelector('.detail-row', { timeout: 10000 });
    await page.locator('.AccordianKeyValues--header', { hasText: 'Tags' }).first().click();
    const events = page.locator('.AccordianLogs .AccordianKeyValues--header');
    for (let i = 0; i < await events.count(); i++) await events.nth(i).click();
  }
  const title = (await page.textContent('.TracePageHeader--titleRow')).trim();
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: out });
  console.log('RESULT ' + JSON.stringify({ title, rows, errors }));
  if (errors.length) process.exitCode = 1;
} catch (e) {
  console.log('RESULT ' + JSON.stringify({ failed: String(e), errors }));
  process.exitCode = 1;
} finally {
  if (browser) await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
