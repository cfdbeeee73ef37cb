// Chromium's own QUIC and HTTP/3 stack (Debian's chromium, through playwright-core) against
// rampart's HTTP/3 socket: an implementation rampart's (quinn + h3) shares no code with. Run by
// crates/rampart/tests/http3_browser.rs with the site's name, rampart's UDP address and the
// base64 SHA-256 of the site certificate's public key (Chromium accepts a private CA over QUIC
// only for keys named this way). The page is loaded over HTTP/3, then the page's own script
// fetches a page twice (the second from rampart's cache) and posts a body.
// Prints one line: RESULT {json}; exits 1 on any failure.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [site, udp, spki] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
const profile = mkdtempSync(join(tmpdir(), 'rampart-chromium-'));
let browser;

try {
  browser = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync',
      // QUIC straight away for this origin (no TCP first), the name mapped to rampart's socket.
      '--enable-quic', `--origin-to-force-quic-on=${site}:443`,
      `--host-resolver-rules=MAP ${site}:443 ${udp}`,
      `--ignore-certificate-errors-spki-list=${spki}`],
  });
  const page = browser.pages()[0] || await browser.newPage();
  const res = await page.goto(`https://${site}/page`);
  const navigation = await page.evaluate(() => {
    const n = performance.getEntriesByType('navigation')[0];
    return { protocol: n.nextHopProtocol, text: document.body.innerText };
  });
  // /shared is fresh for shared caches only (s-maxage): the browser asks again each time
  // (without no-cache, which would bypass rampart's cache too), rampart answers from its own.
  const again = await page.evaluate(async () => {
    await (await fetch('/shared')).text();
    const r = await fetch('/shared');
    const t = await r.text();
    const e = performance.getEntriesByType('resource').pop();
    return { status: r.status, cache: r.headers.get('x-arc2-cache'), text: t, protocol: e.nextHopProtocol };
  });
  const posted = await page.evaluate(async () => {
    const r = await fetch('/upload', { method: 'POST', body: 'x'.repeat(100000) });
    return { status: r.status, text: await r.text() };
  });
  const result = { status: res.status(), navigation, again, posted };
  console.log('RESULT ' + JSON.stringify(result));
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
  process.exit(0);
} catch (e) {
  console.log('RESULT ' + JSON.stringify({ failure: String(e && e.stack || e) }));
  if (browser) await browser.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
  process.exit(1);
}
