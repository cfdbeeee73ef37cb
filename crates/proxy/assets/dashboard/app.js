// rampart's live dashboard: reads /_rampart/dashboard/events (server-sent events over fetch,
// so the API key travels in a header) and draws each event. No framework, no build step.
'use strict';

const $ = (id) => document.getElementById(id);
const KEY = 'rampart-api-key';
const HISTORY = 120;
let key = sessionStorage.getItem(KEY);
let stream = null;
const rates = [];
// One entry a second: { hit, p50, p99 } (hit ratio 0–1 or null, latencies in ms or null).
const quality = [];
// The clock time (ms since the epoch) of each entry of `rates` and `quality`.
const times = [];
// The band under each chart where the time axis is labelled, in CSS pixels.
const AXIS = 18;

function authHeaders() {
  return key ? { Authorization: 'Bearer ' + key } : {};
}

function setState(state, text) {
  const el = $('state');
  el.dataset.state = state;
  el.textContent = text;
}

function fixed(n, digits) {
  return n == null ? '–' : Number(n).toFixed(digits);
}

function percent(r) {
  return r == null ? '–' : (r * 100).toFixed(1) + ' %';
}

function ms(v) {
  if (v == null) return '–';
  return v < 1 ? Math.round(v * 1000) + ' µs' : v.toFixed(v < 10 ? 2 : 0) + ' ms';
}

function count(n) {
  return Number(n).toLocaleString('en');
}

// A byte count in the unit that fits it.
function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return (i === 0 ? n : n.toFixed(n < 10 ? 1 : 0)) + ' ' + units[i];
}

// Replaces a table's rows; every cell is text (hosts and paths come from clients).
function fillRows(id, rows) {
  const body = $(id).tBodies[0];
  body.replaceChildren(...rows.map((cells) => {
    const tr = document.createElement('tr');
    for (const c of cells) {
      const td = document.createElement('td');
      if (c && typeof c === 'object') {
        td.textContent = c.text;
        td.className = c.className;
      } else {
        td.textContent = c;
      }
      tr.append(td);
    }
    return tr;
  }));
}

// Sizes a canvas's bitmap to its laid-out width (so a wide window gets a wide chart, not a
// stretched one) and returns its context scaled to CSS pixels, with the plot's width and height
// (the time axis below them).
function prepare(canvas) {
  const ratio = window.devicePixelRatio || 1;
  const cssW = Math.max(200, Math.round(canvas.clientWidth || canvas.width));
  const cssH = Math.round(canvas.clientHeight || canvas.height);
  if (canvas.width !== cssW * ratio || canvas.height !== cssH * ratio) {
    canvas.width = cssW * ratio;
    canvas.height = cssH * ratio;
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, cssW, cssH);
  return { ctx, w: cssW, h: cssH - AXIS };
}

function clock(t) {
  return new Date(t).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

// The time axis under a chart: a tick and the clock time every 20 seconds (at whole multiples
// of 20 s, so the labels stay put as the chart scrolls). The labels are also written to the
// canvas's data-ticks attribute, for tests and assistive tools.
function drawAxis(canvas, ctx, w, h) {
  const step = w / HISTORY;
  const style = getComputedStyle(document.body);
  ctx.strokeStyle = getComputedStyle(document.documentElement).getPropertyValue('--line').trim() || '#d0d5dd';
  ctx.fillStyle = style.color;
  ctx.font = '11px system-ui, sans-serif';
  ctx.lineWidth = 1;
  ctx.beginPath();
  ctx.moveTo(0, h + 0.5);
  ctx.lineTo(w, h + 0.5);
  ctx.stroke();
  const labels = [];
  times.forEach((t, i) => {
    if (Math.floor(t / 1000) % 20 !== 0) return;
    const x = w - (times.length - i) * step + step / 2;
    const text = clock(t);
    const tw = ctx.measureText(text).width;
    ctx.beginPath();
    ctx.moveTo(x + 0.5, h);
    ctx.lineTo(x + 0.5, h + 4);
    ctx.stroke();
    ctx.fillText(text, Math.min(Math.max(0, x - tw / 2), w - tw), h + AXIS - 3);
    labels.push(text);
  });
  // Until the first whole 20 s arrives, the oldest and newest seconds are labelled instead.
  if (labels.length === 0 && times.length > 0) {
    const text = clock(times[times.length - 1]);
    ctx.fillText(text, w - ctx.measureText(text).width, h + AXIS - 3);
    labels.push(text);
  }
  canvas.dataset.ticks = labels.join(' ');
}

function drawChart() {
  const canvas = $('chart');
  const { ctx, w, h } = prepare(canvas);
  const max = Math.max(1, ...rates);
  const step = w / HISTORY;
  ctx.fillStyle = getComputedStyle(document.documentElement).getPropertyValue('--accent').trim() || '#2e6bd1';
  rates.forEach((r, i) => {
    const bar = (r / max) * (h - 18);
    const x = w - (rates.length - i) * step;
    ctx.fillRect(x, h - bar, Math.max(1, step - 1), bar);
  });
  ctx.fillStyle = getComputedStyle(document.body).color;
  ctx.font = '12px system-ui, sans-serif';
  ctx.fillText('max ' + max.toFixed(1) + '/s', 6, 14);
  drawAxis(canvas, ctx, w, h);
}

// The hit ratio (left scale, 0–100 %) and the p50 and p99 latencies (right scale, up to the
// highest p99 shown) of the last two minutes, as lines; a second without lookups or requests
// leaves a gap.
function drawQuality() {
  const canvas = $('quality');
  const { ctx, w, h } = prepare(canvas);
  const style = getComputedStyle(document.documentElement);
  const color = (name, fallback) => style.getPropertyValue(name).trim() || fallback;
  const top = 18;
  const plot = h - top - 2;
  const step = w / HISTORY;
  const maxMs = Math.max(1, ...quality.map((q) => q.p99 || 0));
  const line = (value, scale, stroke) => {
    ctx.strokeStyle = stroke;
    ctx.lineWidth = 2;
    ctx.beginPath();
    let drawing = false;
    quality.forEach((q, i) => {
      const v = value(q);
      const x = w - (quality.length - i) * step + step / 2;
      if (v == null) { drawing = false; return; }
      const y = h - 2 - (v / scale) * plot;
      if (drawing) ctx.lineTo(x, y); else ctx.moveTo(x, y);
      drawing = true;
    });
    ctx.stroke();
  };
  line((q) => q.hit, 1, color('--accent', '#2e6bd1'));
  line((q) => q.p50, maxMs, color('--p50', '#2f9e44'));
  line((q) => q.p99, maxMs, color('--p99', '#d9480f'));
  ctx.fillStyle = getComputedStyle(document.body).color;
  ctx.font = '12px system-ui, sans-serif';
  ctx.fillText('100 %', 6, 14);
  const label = 'max ' + ms(maxMs);
  ctx.fillText(label, w - 6 - ctx.measureText(label).width, 14);
  drawAxis(canvas, ctx, w, h);
}

function render(d) {
  $('rps').textContent = fixed(d.requests_per_second, 1);
  $('hit').textContent = percent(d.hit_ratio);
  $('hit-total').textContent = 'since start ' + percent(d.hit_ratio_since_start);
  const l = d.latency_ms;
  $('latency').textContent = [l.p50, l.p90, l.p99].map(ms).join(' · ');
  $('connections').textContent = count(d.connections_open);
  $('total').textContent = count(d.totals.requests);
  $('blocked').textContent = count(d.totals.blocked);
  times.push(Date.now());
  if (times.length > HISTORY) times.shift();
  rates.push(d.requests_per_second);
  if (rates.length > HISTORY) rates.shift();
  drawChart();
  quality.push({ hit: d.hit_ratio, p50: l.p50, p99: l.p99 });
  if (quality.length > HISTORY) quality.shift();
  drawQuality();
  fillRows('status', Object.entries(d.status).map(([k, v]) => [k, count(v)]));
  fillRows('outcomes', Object.entries(d.cache_outcomes).filter(([, v]) => v > 0).map(([k, v]) => [k, count(v)]));
  const c = d.cache;
  fillRows('cache', c == null ? [['caching is off', '']] : [
    ['entries', count(c.entries)],
    ['size', bytes(c.size_bytes) + ' of ' + bytes(c.capacity_bytes)],
    ['evictions', count(c.evictions)],
  ].concat(c.disk == null ? [] : [
    ['disk', bytes(c.disk.used_bytes) + ' of ' + bytes(c.disk.capacity_bytes) + ' (' + c.disk.state + ')'],
    ['disk objects', count(c.disk.objects)],
    ['disk hits', count(c.disk.hits) + ' of ' + count(c.disk.hits + c.disk.misses) + ' memory misses'],
    ['disk errors', count(c.disk.errors)],
  ]));
  // Spans since start: sent to the collector, dropped (queue full), failed exports, waiting.
  const t = d.traces;
  $('traces-panel').hidden = t == null;
  if (t != null) {
    fillRows('traces', [
      ['spans exported', count(t.exported)],
      ['spans dropped', count(t.dropped)],
      ['spans failed', count(t.failed)],
      ['spans queued', count(t.queued)],
    ]);
  }
  fillRows('upstreams', d.upstreams.map((u) => [
    u.rule,
    u.origin,
    { text: u.up ? 'up' : 'down', className: u.up ? 'up' : 'down' },
    u.latency_ms == null ? '–' : ms(u.latency_ms),
    fixed(u.requests_per_second, 1),
  ]));
  // The fleet's members: this instance, and each peer with whether it is asked.
  const peers = d.peers || [];
  $('peers-panel').hidden = peers.length === 0;
  fillRows('peers', peers.map((p) => [
    p.address + (p.self ? ' (this instance)' : ''),
    { text: p.up ? 'up' : 'down', className: p.up ? 'up' : 'down' },
    p.self ? '–' : count(p.answers),
    p.latency_ms == null ? '–' : ms(p.latency_ms),
  ]));
  fillRows('hosts', d.top_hosts.map(([k, v]) => [k, count(v)]));
  fillRows('paths', d.top_paths.map(([k, v]) => [k, count(v)]));
  fillRows('recent', d.recent_blocked.map((b) => [
    new Date(b.time).toLocaleTimeString(), b.client, b.host, b.path, b.reason,
  ]));
}

function showBoard(on) {
  $('board').hidden = !on;
  $('login').hidden = on;
}

async function connect() {
  if (stream) stream.abort();
  const mine = new AbortController();
  stream = mine;
  setState('connecting', 'connecting…');
  try {
    const res = await fetch('/_rampart/dashboard/events', {
      headers: authHeaders(), signal: mine.signal, cache: 'no-store',
    });
    if (res.status === 401 || res.status === 403) {
      // Without a key this is the first try at load (not from a metrics_allow address): ask
      // for the key, no error. With one, the key was wrong.
      showBoard(false);
      if (key) {
        sessionStorage.removeItem(KEY);
        key = null;
        setState('error', 'the key was refused');
      } else {
        setState('idle', 'API key needed');
        $('key').focus();
      }
      return;
    }
    if (!res.ok || !res.body) throw new Error('HTTP ' + res.status);
    showBoard(true);
    setState('live', 'live');
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffered = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffered.indexOf('\n\n')) >= 0) {
        const event = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        for (const line of event.split('\n')) {
          if (line.startsWith('data: ')) render(JSON.parse(line.slice(6)));
        }
      }
    }
  } catch (e) {
    if (mine.signal.aborted) return;
  }
  if (stream !== mine) return;
  // The server restarted, reloaded its binary or went away: try again.
  setState('error', 'disconnected; retrying');
  setTimeout(connect, 2000);
}

async function purge(event) {
  event.preventDefault();
  const out = $('purge-result');
  const params = new URLSearchParams({
    host: $('purge-host').value.trim(),
    scope: $('purge-scope').value,
    path: $('purge-path').value || '/',
  });
  if ($('purge-soft').checked) params.set('soft', 'true');
  out.textContent = 'purging…';
  try {
    const res = await fetch('/_rampart/purge?' + params, { method: 'POST', headers: authHeaders() });
    const body = await res.json();
    // Connected without a key (metrics_allow) but purging needs one: ask for it.
    if (res.status === 401) {
      $('login').hidden = false;
      $('key').focus();
    }
    out.textContent = res.ok
      ? 'purged ' + body.purged + (body.soft ? ' (soft)' : '')
      : 'refused: ' + (body.error || res.status);
  } catch (e) {
    out.textContent = 'failed: ' + e.message;
  }
}

$('login').addEventListener('submit', (event) => {
  event.preventDefault();
  key = $('key').value.trim() || null;
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
  connect();
});
$('purge').addEventListener('submit', purge);
// Connect at once: with the key this tab kept, or without one (an address in metrics_allow
// needs none); only a refusal shows the key field.
connect();
window.addEventListener('resize', () => { drawChart(); drawQuality(); });
