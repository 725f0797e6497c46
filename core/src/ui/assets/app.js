// causeway's built-in page: incidents, routes, causes, analysed traces and pipelines,
// read from the daemon's JSON API (/api/...) every few seconds.
// Every value from the API reaches the page as a text node or an attribute
// set through the DOM, never as HTML, so span names, attribute values and
// log lines show as written.
'use strict';

const POLL_MS = 3000;
const view = document.getElementById('view');
const statusEl = document.getElementById('status');
const CAUSE_COLORS = ['#d9480f', '#1971c2', '#2b8a3e', '#ae3ec9', '#e67700', '#0c8599', '#c2255c', '#5c940d', '#5f3dc4', '#868e96', '#364fc7', '#a61e4d'];
const colorOf = {};
function causeColor(c) {
  if (!(c in colorOf)) colorOf[c] = c === 'unknown' ? '#adb5bd' : CAUSE_COLORS[Object.keys(colorOf).length % CAUSE_COLORS.length];
  return colorOf[c];
}

// h('td', {class: 'x'}, 'text', child): an element; strings become text nodes.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}
const SVG = 'http://www.w3.org/2000/svg';
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}
function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}
function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

const fmt = {
  ms(v) { if (v === null || v === undefined) return '–'; return v >= 1000 ? (v / 1000).toFixed(2) + ' s' : Math.round(v) + ' ms'; },
  n(v) { return v === null || v === undefined ? '–' : String(Math.round(v * 100) / 100); },
  pct(v) { return v === null || v === undefined ? '–' : Math.round(v * 100) + '%'; },
  time(unixMs) { return new Date(unixMs).toLocaleTimeString(); },
};

// The API, with the connection state shown in the header.
let failures = 0;
async function api(path) {
  let r;
  try {
    r = await fetch('/api/' + path, { cache: 'no-store', credentials: 'same-origin' });
  } catch (e) {
    disconnected();
    throw new Retry();
  }
  if (r.status >= 500) { disconnected(); throw new Retry(); }
  failures = 0;
  statusEl.textContent = 'live · ' + new Date().toLocaleTimeString();
  statusEl.className = 'status';
  let body;
  try { body = await r.json(); } catch (e) { body = { error: 'the answer was not JSON' }; }
  if (!r.ok) throw new ApiError(body.error || ('HTTP ' + r.status));
  return body;
}
function disconnected() {
  failures += 1;
  statusEl.textContent = 'reconnecting… (the daemon does not answer)';
  statusEl.className = 'status bad';
}
class Retry extends Error {}
class ApiError extends Error {}

function route() {
  const parts = location.hash.replace(/^#\/?/, '').split('/');
  return { name: parts[0] || 'routes', arg: parts.slice(1).join('/') };
}

let rendering = false;
async function render() {
  if (rendering) return;
  rendering = true;
  const r = route();
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.view === r.name || (r.name === 'trace' && a.dataset.view === 'traces'));
  try {
    const views = { incidents: incidentsView, routes: routesView, causes: causesView, traces: tracesView, trace: traceView, pipelines: pipelinesView };
    const f = views[r.name];
    const node = f ? await f(r.arg) : h('p', { class: 'error' }, 'No such view: ' + r.name);
    view.replaceChildren(node);
    view.dataset.view = r.name;
  } catch (e) {
    if (e instanceof ApiError) view.replaceChildren(h('div', { class: 'error', id: 'error' }, e.message));
    else if (!(e instanceof Retry)) view.replaceChildren(h('div', { class: 'error', id: 'error' }, 'The page failed: ' + e.message));
    // Retry: keep what is shown; the header says "reconnecting".
  } finally {
    rendering = false;
  }
}

// A sortable table: columns [{key, label, num, cell(row) -> node|string}].
const sortState = {};
function table(id, columns, rows, rowAttrs) {
  const st = sortState[id];
  let sorted = rows;
  if (st) {
    const col = columns.find((c) => c.key === st.key);
    const val = col && col.sort ? col.sort : (r) => r[st.key];
    sorted = [...rows].sort((a, b) => {
      const x = val(a), y = val(b);
      const c = (x === null || x === undefined) - (y === null || y === undefined) || (x < y ? -1 : x > y ? 1 : 0);
      return st.asc ? c : -c;
    });
  }
  const head = h('tr', {}, columns.map((c) => h('th', {
    class: [c.num ? 'num' : '', st && st.key === c.key ? 'sorted' : '', st && st.key === c.key && st.asc ? 'asc' : ''].join(' ').trim() || null,
    onclick: () => { sortState[id] = { key: c.key, asc: st && st.key === c.key ? !st.asc : false }; render(); },
  }, c.label)));
  const body = sorted.map((row) => h('tr', rowAttrs ? rowAttrs(row) : {}, columns.map((c) => {
    const v = c.cell ? c.cell(row) : row[c.key];
    return h('td', { class: c.num ? 'num' : (c.cls || null) }, v === null || v === undefined ? '–' : v);
  })));
  return h('table', { id }, h('thead', {}, head), h('tbody', {}, body));
}

// A small chart of p50 and p99 per 10 s bucket.
function spark(points) {
  const w = 140, hgt = 28;
  const vals = points.flatMap((p) => [p.p50_ms, p.p99_ms]).filter((v) => v !== null && v !== undefined);
  const max = Math.max(1, ...vals);
  const line = (key, color) => {
    const pts = points.map((p, i) => p[key] === null || p[key] === undefined ? null
      : `${points.length > 1 ? (i / (points.length - 1)) * w : w / 2},${hgt - 2 - (p[key] / max) * (hgt - 4)}`).filter(Boolean);
    if (pts.length === 1) { const [x, y] = pts[0].split(','); return s('circle', { cx: x, cy: y, r: 2, fill: color }); }
    return pts.length ? s('polyline', { points: pts.join(' '), fill: 'none', stroke: color, 'stroke-width': 1.5 }) : null;
  };
  return s('svg', { class: 'spark', width: w, height: hgt, viewBox: `0 0 ${w} ${hgt}` },
    s('title', {}, `p50 / p99 per 10 s, max ${fmt.ms(max)}`),
    line('p50_ms', '#1971c2'), line('p99_ms', '#d9480f'));
}

async function routesView() {
  const d = await api('routes');
  if (!d.routes.length) return h('div', {}, h('h2', {}, 'Routes'), h('p', { class: 'muted' }, 'No gateway traffic in the last ' + d.window_s + ' s. Routes come from gateway access logs (gateway_log receiver, or OTLP logs with route_id).'));
  const cols = [
    { key: 'route', label: 'Route', cell: (r) => h('span', { class: 'route' }, r.route) },
    { key: 'requests', label: 'Requests', num: true },
    { key: 's4xx', label: '4xx', num: true },
    { key: 's5xx', label: '5xx', num: true, cell: (r) => h('span', { class: r.s5xx ? 'bad' : null }, r.s5xx) },
    { key: 's429', label: '429', num: true, cell: (r) => h('span', { class: r.s429 ? 'bad' : null }, r.s429) },
    { key: 's503', label: '503', num: true },
    { key: 's504', label: '504', num: true },
    { key: 'p50_ms', label: 'p50', num: true, cell: (r) => fmt.ms(r.p50_ms) },
    { key: 'p99_ms', label: 'p99', num: true, cell: (r) => fmt.ms(r.p99_ms) },
    { key: 'chart', label: 'p50 / p99', cell: (r) => spark(r.points) },
    { key: 'cause', label: 'Root cause', cell: (r) => r.cause ? h('span', {}, h('span', { class: 'cause' }, r.cause), ' ', h('span', { class: 'muted' }, fmt.pct(r.cause_share) + ' of ' + r.analysed)) : h('span', { class: 'muted' }, 'none analysed') },
    { key: 'circuit_state', label: 'Circuit', cell: (r) => r.circuit_state ? h('span', { class: r.circuit_state === 'CLOSED' ? 'ok' : 'bad' }, r.circuit_state) : '–' },
    { key: 'rate_limit_rule', label: 'Rate-limit rule' },
    { key: 'exemplar', label: 'Exemplar', cell: (r) => r.exemplar ? h('a', { href: '#/trace/' + r.exemplar, class: 'exemplar' }, r.exemplar.slice(0, 12) + '…') : '–' },
  ];
  return h('div', {},
    h('h2', {}, 'Routes ', h('span', { class: 'muted' }, '(last ' + d.window_s + ' s, worst first; click a column to sort)')),
    table('routes', cols, d.routes, (r) => ({ 'data-route': r.route, 'data-cause': r.cause || '' })));
}

// Incidents per route: open first, each with its timeline, causes,
// discriminators, what moved and exemplars (GET /api/incidents).
async function incidentsView() {
  const d = await api('incidents');
  if (d.disabled) return h('div', {}, h('h2', {}, 'Incidents'), h('p', { class: 'muted' }, 'Incident detection is off (correlate.incidents.enabled: false).'));
  if (!d.incidents.length) return h('div', {}, h('h2', {}, 'Incidents'), h('p', { class: 'muted' }, 'No incident: every route is within its normal and no SLO burns. A route has a normal once it has seen incidents.min_normal_requests requests.'));
  const when = (ms) => ms ? fmt.time(ms) : '–';
  const card = (i) => h('section', { class: 'incident ' + i.state, 'data-incident': i.id, 'data-route': i.route, 'data-state': i.state },
    h('h3', {},
      h('span', { class: i.state === 'open' ? 'bad' : 'ok' }, i.state === 'open' ? 'OPEN' : 'resolved'), ' ',
      h('span', { class: 'route' }, i.route), ' ',
      h('span', { class: 'muted' }, i.severity + ' · ' + i.reasons.join(', '))),
    h('p', { class: 'summary' }, i.summary),
    h('p', { class: 'muted timeline' },
      'started ' + when(i.started_at) + ' · opened ' + when(i.opened_at) + (i.resolved_at ? ' · resolved ' + when(i.resolved_at) : '') +
      ' · p' + Math.round(i.quantile * 100) + ' ' + fmt.ms(i.q_ms) + ' (normal ' + fmt.ms(i.normal_q_ms) + ')' +
      ' · p99 ' + fmt.ms(i.p99_ms) + ' (normal ' + fmt.ms(i.normal_p99_ms) + ')' +
      ' · failed ' + fmt.pct(i.error_share) + ' (normal ' + fmt.pct(i.normal_error_share) + ')' +
      (i.slo ? ' · SLO ' + i.slo.slo + ' burning ' + fmt.n(i.slo.burn_rate) + '×, ' + fmt.pct(i.slo.budget_left) + ' of the budget left' : '')),
    table('causes-' + i.id, [
      { key: 'cause', label: 'Cause', cell: (c) => h('span', { class: 'cause' }, c.cause) },
      { key: 'share', label: 'Share of slow/failed', num: true, cell: (c) => fmt.pct(c.share) },
      { key: 'culprit_service', label: 'Culprit' },
      { key: 'culprit_kind', label: 'Kind' },
      { key: 'at_service', label: 'In' },
    ], i.causes),
    i.discriminators.length ? table('discriminators-' + i.id, [
      { key: 'attribute', label: 'Attribute' },
      { key: 'value', label: 'Value' },
      { key: 'share_in', label: 'Slow/failed', num: true, cell: (x) => fmt.pct(x.share_in) },
      { key: 'share_out', label: 'Normal', num: true, cell: (x) => fmt.pct(x.share_out) },
      { key: 'lift', label: 'Lift', num: true, cell: (x) => fmt.n(x.lift) },
    ], i.discriminators) : h('p', { class: 'muted' }, 'No attribute sets the slow or failed requests apart.'),
    i.moved.length ? table('moved-' + i.id, [
      { key: 'series', label: 'What moved', cls: 'wrap' },
      { key: 'before', label: 'Before', num: true, cell: (x) => fmt.n(x.before) },
      { key: 'during', label: 'During', num: true, cell: (x) => fmt.n(x.during) },
    ], i.moved) : h('p', { class: 'muted' }, 'No joined evidence moved.'),
    h('p', {}, 'Exemplars: ', i.exemplars.map((t) => h('a', { href: '#/trace/' + t, class: 'exemplar' }, t.slice(0, 12) + '… ')),
      i.links.map((l) => h('a', { href: l.url, target: '_blank', rel: 'noopener' }, ' ' + l.name))));
  return h('div', {},
    h('h2', {}, 'Incidents ', h('span', { class: 'muted' }, '(open first, then the last resolved)')),
    d.incidents.map(card));
}

async function causesView() {
  const d = await api('causes');
  if (!d.causes.length) return h('div', {}, h('h2', {}, 'Causes'), h('p', { class: 'muted' }, 'No trace analysed in the last ' + d.window_s + ' s.'));
  // Stacked bars: kept traces per cause per 10 s.
  const w = 900, hgt = 160, pad = 24;
  const totals = d.buckets.map((b) => Object.values(b.causes).reduce((a, x) => a + x, 0));
  const max = Math.max(1, ...totals);
  const bw = Math.max(2, (w - pad) / Math.max(1, d.buckets.length) - 2);
  // Causes at the bottom of each bar, `unknown` (mostly healthy traffic) on top.
  const order = d.causes.map((c) => c.cause).sort((a, b) => (a === 'unknown') - (b === 'unknown'));
  const bars = d.buckets.map((b, i) => {
    let y = hgt - pad;
    return order.filter((c) => b.causes[c]).map((c) => {
      const bh = (b.causes[c] / max) * (hgt - pad - 8);
      y -= bh;
      return s('rect', { x: pad + i * (bw + 2), y, width: bw, height: bh, fill: causeColor(c) },
        s('title', {}, `${fmt.time(b.t * 1000)}: ${c} ${b.causes[c]}`));
    });
  });
  const chart = s('svg', { width: w, height: hgt, viewBox: `0 0 ${w} ${hgt}`, id: 'causes-chart' },
    s('text', { x: 0, y: 12, 'font-size': 10, fill: '#6b7480' }, String(max)),
    s('line', { x1: pad, x2: w, y1: hgt - pad, y2: hgt - pad, stroke: '#e3e6ea' }),
    bars,
    d.buckets.length ? s('text', { x: pad, y: hgt - 8, 'font-size': 10, fill: '#6b7480' }, fmt.time(d.buckets[0].t * 1000)) : null,
    d.buckets.length ? s('text', { x: w - 60, y: hgt - 8, 'font-size': 10, fill: '#6b7480' }, fmt.time(d.buckets[d.buckets.length - 1].t * 1000)) : null);
  const legend = h('div', { class: 'legend' }, order.map((c) => h('span', {}, h('span', { class: 'swatch', style: null, 'data-color': causeColor(c) }), c)));
  for (const sw of legend.querySelectorAll('.swatch')) sw.style.background = sw.dataset.color;
  const names = (xs) => xs.map((x) => x.name + ' (' + x.traces + ')').join(', ');
  const cols = [
    { key: 'cause', label: 'Cause', cell: (r) => h('span', { class: 'cause' }, r.cause) },
    { key: 'traces', label: 'Kept traces', num: true },
    { key: 'services', label: 'Top culprit services', cls: 'wrap', cell: (r) => names(r.services), sort: (r) => names(r.services) },
    { key: 'routes', label: 'Top routes', cls: 'wrap', cell: (r) => names(r.routes), sort: (r) => names(r.routes) },
  ];
  return h('div', {},
    h('h2', {}, 'Kept traces per cause ', h('span', { class: 'muted' }, '(last ' + d.window_s + ' s, 10 s bars)')),
    chart, legend,
    h('h3', {}, 'Top culprit services: ', h('span', { class: 'muted' }, names(d.top_services))),
    table('causes', cols, d.causes, (r) => ({ 'data-cause': r.cause })));
}

async function tracesView() {
  const d = await api('traces');
  const cols = [
    { key: 'start_unix_ms', label: 'Time', cell: (r) => fmt.time(r.start_unix_ms) },
    { key: 'route', label: 'Route' },
    { key: 'duration_ms', label: 'Duration', num: true, cell: (r) => fmt.ms(r.duration_ms) },
    { key: 'final_status', label: 'Status', num: true },
    { key: 'cause', label: 'Cause', cell: (r) => h('span', { class: 'cause' }, r.cause) },
    { key: 'culprit_service', label: 'Culprit' },
    { key: 'summary', label: 'Summary', cls: 'wrap' },
    { key: 'trace_id', label: 'Trace', cell: (r) => h('a', { href: '#/trace/' + r.trace_id }, r.trace_id.slice(0, 12) + '…') },
  ];
  return h('div', {},
    h('h2', {}, 'Analysed traces ', h('span', { class: 'muted' }, '(newest first; ' + d.kept + ' kept)')),
    d.traces.length ? table('traces', cols, d.traces, (r) => ({ 'data-trace': r.trace_id })) : h('p', { class: 'muted' }, 'No trace analysed yet.'));
}

async function traceView(id) {
  const t = await api('traces/' + encodeURIComponent(id));
  // Depth of each span for the indentation.
  const byId = {};
  for (const sp of t.spans) byId[sp.span_id] = sp;
  const depth = (sp) => { let d = 0, p = byId[sp.parent_id]; while (p && d < 50) { d += 1; p = byId[p.parent_id]; } return d; };
  const dur = Math.max(t.duration_ms, 0.001);
  const rows = t.spans.map((sp) => {
    const bar = h('div', { class: 'track-bar', title: `${fmt.ms(sp.start_ms)} + ${fmt.ms(sp.duration_ms)}` });
    bar.style.left = (100 * Math.max(0, sp.start_ms) / dur) + '%';
    bar.style.width = Math.max(0.2, 100 * sp.duration_ms / dur) + '%';
    const name = h('td', { class: 'name' }, sp.name);
    name.style.paddingLeft = (8 + 14 * depth(sp)) + 'px';
    return h('tr', {
      class: [sp.critical ? 'critical' : '', sp.span_id === t.culprit_span_id ? 'culprit' : ''].join(' ').trim() || null,
      'data-span': sp.span_id,
    },
    h('td', {}, sp.service), name,
    h('td', { class: 'muted' }, sp.kind),
    h('td', { class: sp.status === 'error' ? 'bad' : 'muted' }, sp.status),
    h('td', { class: 'num' }, fmt.ms(sp.duration_ms)),
    h('td', { class: 'num' }, sp.critical ? fmt.ms(sp.self_ms) : ''),
    h('td', { class: 'track' }, h('div', { class: 'track-bg' }, bar)));
  });
  const ev = t.evidence || {};
  const alts = (ev.alternatives || []).map((a) => h('li', {}, h('span', { class: 'cause' }, a.cause), ` (${fmt.n(a.confidence)}, explains ${fmt.ms(a.explained_ms)}): `, a.summary));
  const logs = (t.logs || []).map((l) => h('tr', { class: l.gateway ? 'gateway-log' : 'app-log' },
    h('td', { class: 'num muted' }, (l.at_ms >= 0 ? '+' : '') + fmt.ms(l.at_ms)),
    h('td', {}, l.gateway ? 'gateway' : l.service),
    h('td', { class: 'wrap' }, h('pre', { class: 'log' }, l.body))));
  const rel = (ns) => ns ? (ns / 1e6 - t.start_unix_ms) : null;
  const metricRows = (ev.metrics || []).map((m) => {
    const fields = Object.entries(m).filter(([k, v]) => !['kind', 'time_unix_nano'].includes(k) && v !== null && v !== false && v !== '');
    const at = rel(m.time_unix_nano);
    return h('tr', { class: 'metric', 'data-kind': m.kind },
      h('td', {}, m.kind),
      h('td', { class: 'num muted' }, at === null ? '–' : (at >= 0 ? '+' : '') + fmt.ms(at)),
      h('td', { class: 'wrap' }, fields.map(([k, v]) => h('span', { class: 'pill' }, k + '=' + (typeof v === 'number' ? fmt.n(v) : (typeof v === 'object' ? JSON.stringify(v) : v)))).flatMap((x) => [x, ' '])));
  });
  const links = (t.links || []).map((l) => h('a', { href: l.url, target: '_blank', rel: 'noopener', class: 'out' }, l.name));
  const code = ev.code && ev.code.flame ? codeView(ev.code) : null;
  return h('div', { id: 'trace', 'data-trace': t.trace_id },
    h('h2', {}, 'Trace ', h('code', {}, t.trace_id), ' ', h('span', { class: 'muted' }, (t.route || '') + ' · ' + fmt.ms(t.duration_ms) + (t.final_status ? ' · ' + t.final_status : '') + ' · ' + fmt.time(t.start_unix_ms))),
    h('div', { class: 'verdict' },
      h('div', {}, 'Cause: ', h('span', { class: 'cause', id: 'cause' }, t.cause), h('span', { class: 'muted' }, '  confidence ' + fmt.n(t.confidence) + ' · rule ' + t.rule + (ev.explained_ms !== undefined ? ' · explains ' + fmt.ms(ev.explained_ms) : '') + (ev.explains_failure ? ' and the failure' : ''))),
      h('div', { class: 'summary', id: 'summary' }, t.summary),
      ev.detail ? h('div', { class: 'muted' }, ev.detail) : null,
      alts.length ? h('div', {}, 'Alternatives:', h('ul', {}, alts)) : null,
      links.length ? h('div', {}, 'Open in: ', links.flatMap((a) => [a, ' '])) : null),
    h('h3', {}, 'Waterfall ', h('span', { class: 'muted' }, '(critical path in orange, self time on it; ' + t.spans.length + ' spans' + (t.spans_left_out ? ', ' + t.spans_left_out + ' left out' : '') + ')')),
    h('table', { class: 'waterfall', id: 'waterfall' },
      h('thead', {}, h('tr', {}, ['Service', 'Span', 'Kind', 'Status', 'Duration', 'Self (critical)', ''].map((x) => h('th', {}, x)))),
      h('tbody', {}, rows)),
    code,
    h('div', { class: 'panel evidence', id: 'evidence' },
      h('div', {}, h('h3', {}, 'Log lines (time from the trace start)'), logs.length ? h('table', { id: 'logs' }, h('tbody', {}, logs)) : h('p', { class: 'muted' }, 'No log record of this trace.')),
      h('div', {}, h('h3', {}, 'Metrics joined (time of the point from the trace start)'), metricRows.length ? h('table', { id: 'metrics' }, h('tbody', {}, metricRows)) : h('p', { class: 'muted' }, 'No metric joined.'))));
}

// The code that held the culprit span's time: its top functions and the
// flame graph of its joined samples (an icicle: the root on top, each
// frame as wide as its share, the function named in orange).
const FLAME_ROW = 18;
function codeView(c) {
  const W = 1200;
  const rects = [];
  let depth = 0;
  const walk = (n, x, d) => {
    depth = Math.max(depth, d + 1);
    const w = n.v * W;
    const named = n.f === c.function;
    rects.push(s('g', { class: named ? 'frame named' : 'frame' },
      s('title', {}, n.f + ' · ' + fmt.n(100 * n.v) + '%'),
      s('rect', { x: x.toFixed(1), y: d * FLAME_ROW, width: Math.max(0.5, w - 1).toFixed(1), height: FLAME_ROW - 2, rx: 2 }),
      w > 60 ? s('text', { x: (x + 4).toFixed(1), y: d * FLAME_ROW + 12 }, n.f.length * 6.5 > w - 8 ? n.f.slice(0, Math.max(1, Math.floor((w - 8) / 6.5) - 1)) + '…' : n.f) : null));
    let cx = x;
    for (const k of n.c || []) { walk(k, cx, d + 1); cx += k.v * W; }
  };
  walk(c.flame, 0, 0);
  const top = (c.top_own || []).map((f) => h('tr', {}, h('td', {}, f.function), h('td', { class: 'muted' }, f.location), h('td', { class: 'num' }, fmt.n(100 * f.share) + '%')));
  return h('div', { id: 'code' },
    h('h3', {}, 'Code of the culprit span ', h('span', { class: 'muted' }, '(' + c.kind + ' profile, ' + c.join + ' join, ' + c.samples + ' samples' + (c.time_ms ? ', ' + fmt.ms(c.time_ms) : '') + (c.mean_wait_ms ? ', contentions waited ' + fmt.ms(c.mean_wait_ms) + ' on average' : '') + ')')),
    h('table', { id: 'code-top' }, h('thead', {}, h('tr', {}, ['Function of the service\'s code', 'Location', 'Share'].map((x) => h('th', {}, x)))), h('tbody', {}, top)),
    s('svg', { class: 'flame', id: 'flame', viewBox: `0 0 ${W} ${depth * FLAME_ROW}`, width: '100%' }, rects));
}

// Counters to rates between two polls.
let lastPoll = null;
async function pipelinesView() {
  const [p, sources] = await Promise.all([api('pipelines'), api('sources').catch(() => [])]);
  // Each evidence source's table, as the source describes it (GET /api/sources).
  const rowsOf = await Promise.all(sources.map((t) => api(t.path).catch(() => [])));
  const now = p.uptime_s;
  const prev = lastPoll;
  const key = (x) => x.name + JSON.stringify(x.labels);
  lastPoll = { t: now, values: Object.fromEntries(p.samples.map((x) => [key(x), x.value])) };
  // Over the last poll when it is at least a second old, else the average
  // since the daemon started.
  const rate = (x) => {
    const before = prev && now - prev.t >= 1 ? prev.values[key(x)] : undefined;
    if (before !== undefined) return Math.max(0, (x.value - before) / (now - prev.t));
    return now > 0 ? x.value / now : null;
  };
  // Per component: counters as their total and their rate, gauges as their value.
  const comps = {};
  const add = (comp, what, x, counter) => {
    const m = (comps[comp] = comps[comp] || {});
    const e = (m[what] = m[what] || { value: 0, rate: counter ? 0 : undefined });
    e.value += x.value;
    if (counter) { const r = rate(x); e.rate = r === null || e.rate === null ? null : e.rate + r; }
  };
  let refused = 0;
  for (const x of p.samples) {
    const c = x.labels.component;
    switch (x.name) {
      case 'causeway_receiver_accepted_items_total': add(c, 'accepted', x, true); break;
      case 'causeway_receiver_refused_items_total': add(c, 'refused', x, true); break;
      case 'causeway_processor_received_items_total': add(c, 'in', x, true); break;
      case 'causeway_processor_sent_items_total': add(c, 'out', x, true); break;
      case 'causeway_processor_dropped_items_total': add(c, 'dropped', x, true); break;
      case 'causeway_exporter_sent_items_total': add(c, 'sent', x, true); break;
      case 'causeway_exporter_send_failed_items_total': add(c, 'failed', x, true); break;
      case 'causeway_exporter_queue_size': add(c, 'queue', x, false); break;
      case 'causeway_exporter_queue_capacity': add(c, 'capacity', x, false); break;
      case 'causeway_tail_sampling_pending_traces': add(c, 'pending traces', x, false); break;
      case 'causeway_tail_sampling_traces_total': add(c, 'decided', x, true); break;
      case 'causeway_correlate_analysed_traces_total': add(c, 'analysed', x, true); break;
      case 'causeway_memory_limiter_refused_requests_total': refused += x.value; break;
      default: break;
    }
  }
  const cards = Object.entries(comps).filter(([c]) => c && c !== 'undefined').sort().map(([c, m]) => {
    const lines = Object.entries(m).filter(([k]) => k !== 'capacity').map(([k, e]) => {
      let text = fmt.n(e.value);
      if (e.rate !== undefined) text += ' · ' + (e.rate === null ? '…' : fmt.n(e.rate)) + '/s';
      if (k === 'queue' && m.capacity && m.capacity.value) text += ' (' + fmt.pct(e.value / m.capacity.value) + ' full)';
      return h('div', { 'data-stat': k }, h('span', { class: 'muted' }, k + ': '), text);
    });
    return h('div', { class: 'card', 'data-component': c }, h('div', { class: 'cause' }, c), lines);
  });
  const memory = (p.resident_bytes ? Math.round(p.resident_bytes / 1048576) + ' MiB resident' : 'memory –') +
    (refused ? ', ' + refused + ' requests refused by the memory limiter' : ', memory limiter refused none');
  const cell = (c) => {
    switch (c.kind) {
      case 'num': return (r) => fmt.n(r[c.key]);
      case 'status': return (r) => h('span', { class: !r[c.key] ? 'muted' : r[c.key] === 'OK' ? 'ok' : 'bad' }, r[c.key] || '–');
      case 'flag': return (r) => r[c.key] ? h('span', { class: 'bad' }, 'on') : 'off';
      default: return undefined;
    }
  };
  const sourceTables = sources.flatMap((t, i) => {
    const cols = t.columns.map((c) => ({ key: c.key, label: c.label, num: c.kind === 'num', cell: cell(c) }));
    const rows = Array.isArray(rowsOf[i]) ? rowsOf[i] : [];
    return [h('h3', {}, t.title), rows.length ? table(t.path, cols, rows) : h('p', { class: 'muted' }, t.empty)];
  });
  return h('div', {},
    h('h2', {}, 'Pipelines ', h('span', { class: 'muted' }, '(totals, and rates over the last poll; ' + memory + ')')),
    h('div', { class: 'cards', id: 'components' }, cards),
    sourceTables);
}

window.addEventListener('hashchange', render);
render();
setInterval(render, POLL_MS);
