// The report page's script: draws the timeline from the embedded levels and exact records, swaps the level of
// detail on every zoom, and draws the other charts.
//
// Its data is the JSON of gpt2trace/report/payload.py, whose TypedDicts declare every key read here; the
// constants it needs (view keys, state ids) come from that data, never written here. Payload objects go by
// fixed names, which the contract test (tests/gpt2trace/report/test_payload.py) relies on to find the reads:
// DATA the page data, TL its timeline, occ the occupancy, st the steps, v and sv a view, c a category, lv a
// level, ex a view's exact records, ref any blob reference, CP the critical path, TP a task run's parallelism
// profile; `a` holds the arrays of a blob.
// Strings from the trace reach the DOM only through textContent, and plotly (which renders a subset of HTML in
// labels and hover text) only after `esc`.
(function () {
'use strict';
performance.mark('report:script');
const DATA = JSON.parse(document.getElementById('report-data').textContent);
performance.mark('report:data');
const TL = DATA.timeline;
const KEY = DATA.constants.viewKeys, RUNNING = DATA.constants.runningState;
const LINE_LIMIT = 2000;          // collective and message lines drawn at once
const OCC_EXACT_LIMIT = 200000;   // Running records for an exact occupancy curve
const CP = DATA.criticalPath, CP_COLOR = '#e6007e';
const TP = DATA.taskProfile, READY_COLOR = '#d95f02', TASKS_COLOR = '#1b6ca8';
// Overview rows are SUB sub-rows per lane and one empty sub-row between ranks: all pixels of the overview's image
// the same size, scaled with crisp edges.
const SUB = 3, GAP = 1 / SUB;
const TITLE_PX = 24, OCC_PX = 100;
// the left margin holds the row labels (rank.thread, the first of a rank's rows headed by its coordinates, and in
// the phases one row per rank: "rank 4 · dp 1 pp 1")
const LONGEST = Math.max(0, ...TL.views.map(v => Math.max(0, ...v.ticks.map(l => l.length))));
const MARGIN = {l: Math.max(70, Math.round(12 + 6.5 * LONGEST)), r: 16, t: 6, b: 46};
const state = {range: null, drawn: null, renders: 0, pending: 0, modes: {}, bars: {}, level: {}, busy: false,
               queued: null, asked: null, critical: false, criticalPoints: 0, profilePoints: 0};
window.gpt2traceReport = state;

// Plotly renders a few HTML tags in labels and decodes &amp; &lt; &gt; (not &quot;): with those three escaped no
// tag can start, and quotes show as themselves.
function esc(s) {
  return String(s).replace(/[&<>]/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;'}[c]));
}
function fmtDur(ns) {
  const a = Math.abs(ns);
  if (a >= 1e9) return (ns / 1e9).toPrecision(4) + ' s';
  if (a >= 1e6) return (ns / 1e6).toPrecision(4) + ' ms';
  if (a >= 1e3) return (ns / 1e3).toPrecision(4) + ' µs';
  return Math.round(ns) + ' ns';
}
function fmtTime(ns) { return (ns / 1e9).toFixed(9).replace(/0+$/, '').replace(/\.$/, '') + ' s'; }
function fmtBytes(b) {
  if (!(b >= 0)) return '';
  const u = ['B', 'KB', 'MB', 'GB', 'TB']; let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return (i ? b.toPrecision(3) : b) + ' ' + u[i];
}

// ---------- blobs: base64 -> deflate -> typed arrays ----------
const TYPES = {f8: Float64Array, f4: Float32Array, i4: Int32Array, u4: Uint32Array, i2: Int16Array,
               u2: Uint16Array, u1: Uint8Array, i1: Int8Array};
const blobs = new Map();
function blob(ref) {
  if (!blobs.has(ref.blob)) {
    blobs.set(ref.blob, (async () => {
      const text = document.getElementById(ref.blob).textContent;
      const bin = atob(text);
      const bytes = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('deflate'));
      const buf = await new Response(stream).arrayBuffer();
      const out = {};
      for (const [name, [t, off, n]] of Object.entries(ref.arrays)) out[name] = new TYPES[t](buf, off, n);
      return out;
    })());
  }
  return blobs.get(ref.blob);
}
// Loads something once; until it is there, callers get null and one more render is scheduled.
function need(obj, loader) {
  if (obj._data) return obj._data;
  if (!obj._loading) {
    state.pending++;
    obj._loading = loader(obj).then(d => { obj._data = d; state.pending--; rerender(); })
      .catch(err => { state.pending--; console.error(err); });
  }
  return null;
}
async function loadLevel(lv) {
  const a = await blob(lv);
  const nl = a.count.length, n = a.gap.length;
  const offsets = new Float64Array(nl + 1), start = new Float64Array(n), end = new Float64Array(n);
  let k = 0;
  for (let lane = 0; lane < nl; lane++) {
    offsets[lane] = k;
    let prev = 0;
    for (let j = 0; j < a.count[lane]; j++, k++) {
      start[k] = prev + a.gap[k];
      prev = start[k] + a.len[k];
      end[k] = prev;
    }
  }
  offsets[nl] = k;
  return {offsets, start, end, cat: a.cat};
}
async function loadExact(ex) {
  const a = await blob(ex);
  const n = ex.n, start = new Float64Array(n), end = new Float64Array(n);
  let t = 0;
  for (let i = 0; i < n; i++) { t += a.ds[i]; start[i] = t; end[i] = t + a.dur[i]; }
  const rec = Object.assign({}, a, {n, start, end});
  if (a.inst) {                         // collective instances: who entered last
    rec.lastEnter = new Map();
    for (let i = 0; i < n; i++) {
      const k = a.inst[i];
      if (k < 0) continue;
      const cur = rec.lastEnter.get(k);
      if (!cur || start[i] > cur.start) rec.lastEnter.set(k, {start: start[i], lane: a.lane[i]});
    }
  }
  return rec;
}

function rgba(color) {
  const ctx = document.createElement('canvas').getContext('2d', {willReadFrequently: true});
  ctx.fillStyle = color;
  ctx.fillRect(0, 0, 1, 1);
  const [r, g, b] = ctx.getImageData(0, 0, 1, 1).data;
  return ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
}
// ---------- geometry: panels stacked top to bottom, lanes grouped by rank ----------
const views = TL.views;
function lanePx(v) {
  if (v.key === KEY.steps) return 22;
  if (v.key === KEY.phases) return 20;
  return Math.max(12, Math.min(22, Math.round(320 / v.lanes.length)));
}
for (const v of views) {
  v.y0 = []; let y = 0;
  for (let i = 0; i < v.lanes.length; i++) {
    if (i > 0 && v.laneRank[i] !== v.laneRank[i - 1]) y += GAP;
    v.y0.push(y); y += 1;
  }
  v.units = y + (v.key === KEY.steps ? 0.7 : 0);   // the steps panel keeps a strip on top for window marks
  v.px = Math.round(v.units * lanePx(v));
  // heatmap sub-rows: SUB per lane, one empty sub-row between ranks
  v.rows = [];
  for (let i = 0; i < v.lanes.length; i++) {
    if (i > 0 && v.laneRank[i] !== v.laneRank[i - 1]) v.rows.push(-1);
    for (let k = 0; k < SUB; k++) v.rows.push(i);
  }
  // a category's colour as one RGBA pixel (little-endian: bytes R, G, B, A)
  v.rgba = Uint32Array.from(v.cats, c => rgba(c.color));
  v.hoverText = v.lanes.map(l => v.cats.map(c => esc(l + ' · ' + c.name) + '<br><i>dominant in this time bin</i>'));
}
const occ = TL.occupancy;
// occupancy: one small area chart per rank, under the views
const occPx = Math.max(30, Math.min(56, Math.round(OCC_PX * 2 / Math.max(occ.ranks.length, 1))));
const occRanks = occ.levels.length ? occ.ranks : [];          // no state records: no occupancy to draw
// a task run's parallelism profile: one chart per rank under the occupancy, on the same time axis
const tpRanks = TP ? TP.ranks : [];
const panels = views.map(v => ({px: v.px, view: v}))
  .concat(occRanks.map((r, i) => ({px: occPx, view: null, occ: i})))
  .concat(tpRanks.map((r, i) => ({px: occPx, view: null, tp: i})));
let plotH = 0;
for (const p of panels) {                  // the occupancy charts share one title, the profile's too
  p.top = plotH + (p.occ > 0 || p.tp > 0 ? 6 : TITLE_PX);
  plotH = p.top + p.px;
}
panels.forEach((p, i) => {
  p.axis = i === 0 ? 'y' : 'y' + (i + 1);
  p.layoutKey = i === 0 ? 'yaxis' : 'yaxis' + (i + 1);
});
const lastAxis = panels[panels.length - 1].axis;

function baseLayout(range) {
  // enough significant digits that neighbouring ticks differ at any zoom
  const big = Math.max(Math.abs(range[0]), Math.abs(range[1]), 1);
  const digits = Math.min(15, Math.max(3, Math.ceil(Math.log10(big / ((range[1] - range[0]) / 8))) + 1));
  const layout = {
    height: plotH + MARGIN.t + MARGIN.b, margin: MARGIN, showlegend: false, dragmode: 'zoom', hovermode: 'closest',
    barmode: 'overlay', bargap: 0, bargroupgap: 0,       // no gaps: bar edges land on whole pixels, no seams
    plot_bgcolor: '#fff', paper_bgcolor: '#fff', uniformtext: {mode: 'hide', minsize: 9},
    font: {family: 'system-ui, -apple-system, Segoe UI, Roboto, sans-serif', size: 12},
    xaxis: {range: [range[0] / 1e9, range[1] / 1e9], autorange: false, anchor: lastAxis, showgrid: true,
            gridcolor: '#e6e6e6', zeroline: false, tickformat: '.' + digits + '~s', ticksuffix: 's',
            title: {text: 'time since the start of the trace', standoff: 6}, showline: true, linecolor: '#999',
            ticklabeloverflow: 'allow', scaleanchor: false},
    annotations: [], shapes: [],
  };
  for (const p of panels) {
    const dom = [1 - (p.top + p.px) / plotH, 1 - p.top / plotH];
    if (p.view) {
      const v = p.view;
      layout[p.layoutKey] = {domain: dom, range: [v.y0[v.y0.length - 1] + 1, v.key === KEY.steps ? -0.7 : 0],
        fixedrange: true, tickvals: v.y0.map(y => y + 0.5), ticktext: v.ticks.map(esc), ticks: '',
        showgrid: false, zeroline: false, automargin: false, tickfont: {size: v.lanes.length > 24 ? 10 : 11},
        showline: true, linecolor: '#999', mirror: true, ticklabeloverflow: 'allow', scaleanchor: false};
    } else {
      const top = p.tp !== undefined ? TP.threads[p.tp] : occ.threads[p.occ];
      const rank = p.tp !== undefined ? TP.ranks[p.tp] : occ.ranks[p.occ];
      layout[p.layoutKey] = {domain: dom, range: [0, top * (p.tp !== undefined ? 2.2 : 1.12)], fixedrange: true,
        showgrid: false, zeroline: false, tickvals: [top / 2], ticktext: ['rank ' + rank], ticks: '',
        showline: true, linecolor: '#999', mirror: true, ticklabeloverflow: 'allow'};
      layout.shapes.push({type: 'line', xref: 'paper', yref: p.axis, x0: 0, x1: 1, y0: top, y1: top,
        line: {color: 'rgba(0,0,0,0.35)', width: 1, dash: 'dot'}});
    }
  }
  return layout;
}

function title(layout, p, text) {
  layout.annotations.push({xref: 'paper', yref: 'paper', x: 0, y: 1 - (p.top - 3) / plotH, xanchor: 'left',
    yanchor: 'bottom', showarrow: false, align: 'left', text: text, font: {size: 12.5, color: '#222'}});
}

// ---------- per view: overview heatmap or exact bars ----------
function pickLevel(levels, spanNs, px) {
  const target = spanNs / px;
  for (let i = 0; i < levels.length; i++) if (levels[i].binNs <= target) return i;
  return levels.length - 1;
}
function loadedLevel(levels, want) {
  const d = need(levels[want], lv => loadLevel(lv));
  if (d) return [want, d];
  for (let i = want - 1; i >= 0; i--) if (levels[i]._data) return [i, levels[i]._data];
  return [-1, null];
}
function heatmap(v, p, range, px) {
  const [li, d] = loadedLevel(v.levels, pickLevel(v.levels, range[1] - range[0], px));
  if (!d) return null;
  const lv = v.levels[li], w = lv.binNs;
  state.level[v.key] = li;
  const a = Math.max(0, Math.floor((range[0] - TL.t0Ns) / w));
  const b = Math.min(lv.bins, Math.ceil((range[1] - TL.t0Ns) / w));
  const ncol = Math.max(b - a, 1), nrow = v.rows.length;
  // one RGBA pixel per (sub-row, bin), painted from the categories' colours: plotly's heatmap would map each of
  // millions of cells through its colour scale (a second at 256 lanes); the hover text stays per lane and bin
  const pixels = new Uint32Array(ncol * nrow), laneRow = new Uint32Array(ncol), tLane = [];
  const empty = new Array(ncol).fill('');        // no category (gaps between ranks, idle bins): no hover label
  let row = 0;
  for (let lane = 0; lane < v.lanes.length; lane++) {
    laneRow.fill(0);
    const tr = empty.slice();
    let lo = d.offsets[lane], hi = d.offsets[lane + 1];
    while (lo < hi) { const mid = (lo + hi) >> 1; if (d.end[mid] <= a) lo = mid + 1; else hi = mid; }
    for (let r = lo; r < d.offsets[lane + 1] && d.start[r] < b; r++) {
      const c = d.cat[r], label = v.hoverText[lane][c];
      const c0 = Math.max(d.start[r], a) - a, c1 = Math.min(d.end[r], b) - a;
      laneRow.fill(v.rgba[c], c0, c1);
      for (let col = c0; col < c1; col++) tr[col] = label;
    }
    while (v.rows[row] !== lane) row++;            // the rank gap rows stay transparent
    for (; row < nrow && v.rows[row] === lane; row++) pixels.set(laneRow, row * ncol);
    tLane.push(tr);
  }
  const canvas = document.createElement('canvas');
  canvas.width = ncol; canvas.height = nrow;
  canvas.getContext('2d').putImageData(new ImageData(new Uint8ClampedArray(pixels.buffer), ncol, nrow), 0, 0);
  const text = v.rows.map(l => l >= 0 ? tLane[l] : empty);
  return {type: 'image', xaxis: 'x', yaxis: p.axis, source: canvas.toDataURL('image/png'),
    x0: (TL.t0Ns + (a + 0.5) * w) / 1e9, dx: w / 1e9, y0: 0.5 / SUB, dy: 1 / SUB, zsmooth: false,
    hovertext: text, hovertemplate: '%{hovertext}<extra></extra>'};
}
// Whether the part of the range inside the trace lies within span (what exact records cover).
function inside(range, span) {
  return Math.max(range[0], TL.t0Ns) >= span[0] && Math.min(range[1], TL.t1Ns) <= span[1];
}
function visible(rec, range) {
  const idx = [];
  for (let i = 0; i < rec.n; i++) if (rec.end[i] > range[0] && rec.start[i] < range[1]) idx.push(i);
  return idx;
}
function hoverFor(v, rec, i) {
  const lane = esc(v.lanes[rec.lane[i]]), name = esc(v.cats[rec.cat[i]].name);
  const dur = fmtDur(rec.end[i] - rec.start[i]), at = fmtTime(rec.start[i]);
  const step = rec.step && rec.step[i] >= 0 ? rec.step[i] : null;
  if (v.key === KEY.steps) return `<b>step ${step}</b><br>duration ${dur}<br>from ${at}`;
  const inStep = step !== null ? ` · step ${step}` : '';
  if (v.key === KEY.phases) {
    const micro = rec.microstep[i] >= 0 ? ` · micro-batch ${rec.microstep[i]}` : '';
    return `<b>${name}</b>${micro} · ${lane}${inStep}<br>duration ${dur}<br>from ${at}`;
  }
  if (v.key === KEY.states) return `<b>${name}</b><br>thread ${lane}<br>duration ${dur}<br>from ${at}`;
  if (v.key === KEY.kernels) {
    const layer = rec.layer && rec.layer[i] >= 0 ? `layer ${rec.layer[i]}` : 'no layer';
    const task = rec.task && rec.task[i] >= 0
      ? `<br>task ${rec.task[i]} · block ${rec.block[i]} · ${rec.npreds[i] >= 0 ? rec.npreds[i] : 'unknown'} `
        + `predecessor${rec.npreds[i] === 1 ? '' : 's'}` : '';
    return `<b>${name}</b><br>${layer}${inStep}${task}<br>duration ${dur}<br>thread ${lane}<br>from ${at}`;
  }
  let s = `<b>${name}</b> · thread ${lane}<br>duration ${dur}`;
  if (rec.bytes && rec.bytes[i] >= 0) s += `<br>${fmtBytes(rec.bytes[i])}`;
  if (rec.seq && rec.seq[i] >= 0) s += ` · seq ${rec.seq[i]}`;
  if (rec.peer && rec.peer[i] >= 0) s += ` · peer ${rec.peer[i]}`;
  if (rec.inst && rec.inst[i] >= 0) {
    const last = rec.lastEnter.get(rec.inst[i]);
    const waited = last.start - rec.start[i];
    s += `<br>entered last: ${esc(v.lanes[last.lane])}` + (waited > 0 ? ` (waited ${fmtDur(waited)})` : '');
  }
  return s + `<br>from ${at}${inStep}`;
}
// The longest label that fits: a step's number; a phase's name, with its micro-batch where it has one
// ("forward 3", else "F3", so that a schedule such as 1F1B reads at a glance); any other record's name.
function barLabel(v, rec, i, c, fits) {
  let options = [c.name];
  if (v.key === KEY.steps) options = ['step ' + rec.step[i], String(rec.step[i])];
  else if (v.key === KEY.phases && rec.microstep[i] >= 0) {
    const m = rec.microstep[i];
    options = [c.name + ' ' + m, c.name.charAt(0).toUpperCase() + m, String(m)];
  }
  return options.find(fits) || '';
}
// Bars are clipped to the visible range (labels then sit in the visible part); hover keeps the record's own times.
function bars(v, p, rec, idx, range, pxNs) {
  const n = idx.length, base = new Array(n), len = new Array(n), y = new Array(n), color = new Array(n),
        hover = new Array(n), text = new Array(n), tcolor = new Array(n);
  const labelled = v.key !== KEY.states;      // names inside the bars wide enough for them
  for (let j = 0; j < n; j++) {
    const i = idx[j], c = v.cats[rec.cat[i]];
    const s0 = Math.max(rec.start[i], range[0]), s1 = Math.min(rec.end[i], range[1]);
    base[j] = s0 / 1e9; len[j] = (s1 - s0) / 1e9; y[j] = v.y0[rec.lane[i]] + 0.5;
    color[j] = c.color; tcolor[j] = c.text; hover[j] = hoverFor(v, rec, i);
    if (labelled) {                    // a label only where it fits: measuring hidden labels costs plotly time
      const wide = (s1 - s0) / pxNs, fits = s => wide >= 6.5 * s.length + 8;
      text[j] = esc(barLabel(v, rec, i, c, fits));
    }
  }
  return {type: 'bar', orientation: 'h', xaxis: 'x', yaxis: p.axis, base: base, x: len, y: y, width: 1,
    marker: {color: color, line: {width: 0}}, hovertext: hover, hoverinfo: 'text', name: v.key,
    text: labelled ? text : undefined, textposition: labelled ? 'inside' : 'none', insidetextanchor: 'middle',
    textfont: {color: tcolor, size: 11}, constraintext: 'both', cliponaxis: true, showlegend: false};
}
function mpiLines(v, p, rec, idx) {
  const xs = [], ys = [];
  const groups = new Map();
  let lines = 0;
  for (const i of idx) {
    if (rec.inst[i] >= 0) {
      if (!groups.has(rec.inst[i])) groups.set(rec.inst[i], []);
      groups.get(rec.inst[i]).push(i);
    }
    if (rec.partner[i] >= 0 && lines < LINE_LIMIT) {      // a receive and its matched send
      const s = rec.partner[i];
      xs.push(rec.start[s] / 1e9, rec.end[i] / 1e9, null);
      ys.push(v.y0[rec.lane[s]] + 0.5, v.y0[rec.lane[i]] + 0.5, null);
      lines++;
    }
  }
  for (const members of groups.values()) {
    if (members.length < 2 || lines >= LINE_LIMIT) continue;
    members.sort((a, b) => v.y0[rec.lane[a]] - v.y0[rec.lane[b]]);
    for (const i of members) { xs.push(rec.end[i] / 1e9); ys.push(v.y0[rec.lane[i]] + 0.5); }
    xs.push(null); ys.push(null); lines++;
  }
  return {type: 'scatter', mode: 'lines+markers', xaxis: 'x', yaxis: p.axis, x: xs, y: ys, hoverinfo: 'skip',
          line: {color: '#111', width: 2}, marker: {size: 5, color: '#111'}, connectgaps: false, showlegend: false};
}
function viewTraces(v, p, range, px, layout) {
  const out = [];
  const covered = inside(range, v.exactSpan);
  const rec = covered && v.exact.n ? need(v.exact, loadExact) : null;
  let idx = rec ? visible(rec, range) : null;
  let mode = 'overview';
  // exact bars where they are few enough to draw fast and wide enough to tell apart (2 px each on average);
  // denser, the dominant category per pixel column is the truer picture
  if (idx && idx.length <= v.barLimit && idx.length <= v.lanes.length * px / 2) mode = 'exact';
  if (mode === 'overview') {
    const h = heatmap(v, p, range, px);
    if (h) out.push(h);
  } else {
    out.push(bars(v, p, rec, idx, range, (range[1] - range[0]) / px));
    if (v.key === KEY.mpi) out.push(mpiLines(v, p, rec, idx));
  }
  state.modes[v.key] = mode;
  state.bars[v.key] = mode === 'exact' ? idx.length : 0;
  const pxNs = (range[1] - range[0]) / px, lv = v.levels[state.level[v.key]];
  let how;
  const partial = v.exact.n && v.exactSpan[1] - v.exactSpan[0] < TL.t1Ns - TL.t0Ns;
  if (mode === 'exact') {
    how = v.key === KEY.mpi ? 'exact records; lines join the ranks of each collective and each message'
      : 'exact records (hover for details)';
  } else if (lv && lv.binNs > 1.5 * pxNs) {
    how = `each block is the dominant ${v.noun} of ${fmtDur(lv.binNs)}, the finest level stored`
      + (partial ? ' (exact records: inside the green window)' : '');
  } else {
    how = `each pixel column shows its dominant ${v.noun} (zoom in for exact records)`;
  }
  title(layout, p, `<b>${esc(v.heading)}</b> <span style="color:#666">· ${how}</span>`);
  return out;
}

// ---------- occupancy: exact from the Running records when they are at hand, else binned ----------
function occupancyTraces(range, px, layout) {
  const sv = views.find(v => v.key === KEY.states), occPanels = panels.filter(p => p.occ !== undefined);
  const out = [];
  let exact = false;
  if (sv && inside(range, sv.exactSpan) && sv.exact.n) {
    const rec = need(sv.exact, loadExact);
    if (rec) {
      const idx = [];
      for (let i = 0; i < rec.n; i++) {
        if (rec.cat[i] === RUNNING && rec.end[i] > range[0] && rec.start[i] < range[1]) idx.push(i);
      }
      if (idx.length <= OCC_EXACT_LIMIT) {
        exact = true;
        occ.ranks.forEach((rank, ri) => {
          const ev = [];
          for (const i of idx) {
            if (sv.laneRank[rec.lane[i]] !== rank) continue;
            ev.push([Math.max(rec.start[i], range[0]), 1], [Math.min(rec.end[i], range[1]), -1]);
          }
          ev.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
          const x = [range[0] / 1e9], y = [0]; let level = 0;
          for (const [t, d] of ev) { level += d; x.push(t / 1e9); y.push(level); }
          x.push(range[1] / 1e9); y.push(level);
          out.push(occLine(occPanels[ri], x, y, rank, ri, 'threads Running'));
        });
      }
    }
  }
  if (!exact && occPanels.length) {
    const want = pickLevel(occ.levels, range[1] - range[0], px);
    let li = need(occ.levels[want], lv => blob(lv)) ? want : -1;
    for (let i = want - 1; li < 0 && i >= 0; i--) if (occ.levels[i]._data) li = i;
    if (li >= 0) {
      state.occLevel = li;
      const lv = occ.levels[li], d = lv._data, w = lv.binNs;
      const a = Math.max(0, Math.floor((range[0] - TL.t0Ns) / w));
      const b = Math.min(lv.bins, Math.ceil((range[1] - TL.t0Ns) / w));
      occ.ranks.forEach((rank, ri) => {
        const x = [], y = [];
        for (let k = a; k < b; k++) {
          x.push((TL.t0Ns + k * w) / 1e9);
          y.push(d.value[ri * lv.bins + k] / occ.scale);
        }
        if (b > a) { x.push((TL.t0Ns + b * w) / 1e9); y.push(y[y.length - 1]); }
        out.push(occLine(occPanels[ri], x, y, rank, ri, 'threads Running (mean over ' + fmtDur(w) + ')'));
      });
    }
  }
  state.modes.occupancy = exact ? 'exact' : 'overview';
  const lv = occ.levels[state.occLevel], coarse = !exact && lv && lv.binNs > 1.5 * (range[1] - range[0]) / px;
  const how = exact ? 'exact' : coarse ? `mean over blocks of ${fmtDur(lv.binNs)}, the finest level stored`
    : 'mean over each pixel column';
  if (occPanels.length) {
    title(layout, occPanels[0], '<b>Occupancy: threads Running, one chart per rank</b> '
      + `<span style="color:#666">· ${how}; dotted line: all threads of the rank</span>`);
  }
  return out;
}
function occLine(p, x, y, rank, ri, what) {
  const color = DATA.rankColors[ri % DATA.rankColors.length];
  return {type: 'scatter', mode: 'lines', xaxis: 'x', yaxis: p.axis, x: x, y: y, fill: 'tozeroy',
          fillcolor: color + '55', line: {shape: 'hv', width: 1.2, color: color}, name: 'rank ' + rank,
          hovertemplate: 'rank ' + rank + ': %{y:.2f} ' + what + '<extra></extra>', showlegend: false};
}

// ---------- a task run's parallelism profile: tasks ready and running (= threads running a task) ----------
// Exact intervals (analysis.tasks.profile, the analyzed steps); the y range shows up to twice the threads, a
// ready count beyond it is cut at the top (its hover still says it).
async function loadProfile() {
  const a = await blob(TP);
  const n = TP.n, start = new Float64Array(n), end = new Float64Array(n);
  let t = 0;
  for (let i = 0; i < n; i++) { t += a.ds[i]; start[i] = t; end[i] = t + a.dur[i]; }
  return Object.assign({}, a, {n, start, end});
}
function profileTraces(range, layout) {
  const tpPanels = panels.filter(p => p.tp !== undefined);
  if (!tpPanels.length) return [];
  title(layout, tpPanels[0], '<b>Task parallelism, one chart per rank</b> <span style="color:#666">· tasks '
    + 'running (filled) and ready but not started (line), analyzed steps; dotted line: all threads</span>');
  const d = need(TP, loadProfile);
  if (!d) return [];
  const out = [];
  tpPanels.forEach(p => {
    const top = TP.threads[p.tp];
    layout.shapes.push({type: 'line', xref: 'paper', yref: p.axis, x0: 0, x1: 1, y0: top, y1: top,
      line: {color: 'rgba(0,0,0,0.35)', width: 1, dash: 'dot'}});
    const x = [], run = [], ready = [];
    let last = null;
    for (let i = 0; i < d.n; i++) {
      if (d.rank[i] !== p.tp || d.end[i] <= range[0] || d.start[i] >= range[1]) continue;
      if (last !== null && d.start[i] !== last) { x.push(null); run.push(null); ready.push(null); }
      x.push(Math.max(d.start[i], range[0]) / 1e9, Math.min(d.end[i], range[1]) / 1e9);   // clipped to the view
      run.push(d.running[i], d.running[i]);
      const r = d.ready[i] >= 0 ? d.ready[i] : null;       // -1: not known (a trace without the edges)
      ready.push(r, r);
      last = d.end[i];
    }
    const rank = 'rank ' + TP.ranks[p.tp];
    out.push({type: 'scatter', mode: 'lines', xaxis: 'x', yaxis: p.axis, x: x, y: run, fill: 'tozeroy',
              fillcolor: TASKS_COLOR + '55', line: {width: 1.2, color: TASKS_COLOR}, connectgaps: false,
              hovertemplate: rank + ': %{y} tasks running<extra></extra>', showlegend: false});
    out.push({type: 'scatter', mode: 'lines', xaxis: 'x', yaxis: p.axis, x: x, y: ready,
              line: {width: 1.5, color: READY_COLOR}, connectgaps: false,
              hovertemplate: rank + ': %{y} tasks ready<extra></extra>', showlegend: false});
  });
  state.profilePoints = out.reduce((s, t) => s + t.x.filter(v => v !== null).length, 0);
  return out;
}

// ---------- the critical path: one line over the rows it runs through, hidden until its button is pressed ----------
// Stretches shorter than a pixel column after one already drawn in that column are left out: the line joins the
// ones drawn, so it stays one connected line at any zoom.
function criticalTraces(range, px) {
  state.criticalPoints = 0;
  const p = CP && state.critical ? panels.find(q => q.view && q.view.key === CP.view) : null;
  const rec = p ? need(CP, loadExact) : null;
  if (!rec) return [];
  const v = p.view, pxNs = (range[1] - range[0]) / px, xs = [], ys = [], text = [];
  let lastCol = null;
  for (let i = 0; i < rec.n; i++) {
    if (rec.end[i] <= range[0] || rec.start[i] >= range[1]) continue;
    const col = Math.floor((rec.start[i] - range[0]) / pxNs);
    const last = i + 1 === rec.n || rec.start[i + 1] >= range[1];
    if (col === lastCol && !last) continue;
    lastCol = col;
    const y = v.y0[rec.lane[i]] + 0.5, label = esc('critical path · thread ' + v.lanes[rec.lane[i]]);
    xs.push(Math.max(rec.start[i], range[0]) / 1e9, Math.min(rec.end[i], range[1]) / 1e9);
    ys.push(y, y);
    text.push(label, label);
  }
  state.criticalPoints = xs.length;
  return [{type: 'scatter', mode: 'lines', xaxis: 'x', yaxis: p.axis, x: xs, y: ys, name: 'critical path',
           hovertext: text, hoverinfo: 'text', line: {color: CP_COLOR, width: 4}, opacity: 0.85,
           showlegend: false}];
}

// ---------- marks: step boundaries, analyzed and exact windows ----------
function marks(layout, range) {
  const st = TL.steps, stepsPanel = panels.find(p => p.view && p.view.key === KEY.steps);
  const inView = [];
  for (const t of st.startNs) if (t > range[0] && t < range[1]) inView.push(t);
  if (inView.length <= 60) {
    for (const t of inView) {
      layout.shapes.push({type: 'line', xref: 'x', yref: 'paper', x0: t / 1e9, x1: t / 1e9, y0: 0, y1: 1,
                          line: {color: 'rgba(0,0,0,0.55)', width: 1, dash: 'dot'}, layer: 'above'});
    }
  }
  if (!stepsPanel) return;
  const band = (span, y, color) => layout.shapes.push({type: 'line', xref: 'x', yref: stepsPanel.axis,
    x0: span[0] / 1e9, x1: span[1] / 1e9, y0: y, y1: y, line: {color: color, width: 4}});
  band(TL.analyzed, -0.45, '#222');
  if (TL.detail[0] > TL.t0Ns || TL.detail[1] < TL.t1Ns) band(TL.detail, -0.2, '#1a9c3c');
}

// ---------- render ----------
const gd = document.getElementById('timeline');
function plotWidth() {
  const size = gd._fullLayout && gd._fullLayout._size;
  return size ? size.w : Math.max(300, gd.clientWidth - MARGIN.l - MARGIN.r);
}
async function render(range) {
  state.range = range;
  document.body.dataset.idle = '0';   // until this range is drawn and its data loaded (tests wait on it)
  if (state.busy) { state.queued = range; return; }
  state.busy = true;
  try {
    const px = plotWidth(), layout = baseLayout(range), traces = [];
    for (const p of panels) if (p.view) traces.push(...viewTraces(p.view, p, range, px, layout));
    traces.push(...occupancyTraces(range, px, layout));
    traces.push(...profileTraces(range, layout));
    traces.push(...criticalTraces(range, px));
    marks(layout, range);
    await Plotly.react(gd, traces, layout, CONFIG);
    state.drawn = range;
    state.renders++;
    document.body.dataset.renders = String(state.renders);
  } finally {
    state.busy = false;
  }
  if (state.queued) {
    const r = state.queued;
    state.queued = null;
    return render(r);
  }
  document.body.dataset.idle = state.pending === 0 ? '1' : '0';
}
function rerender() { if (state.range) render(state.range); }
const CONFIG = {responsive: true, scrollZoom: true, displaylogo: false, doubleClick: 'autosize',
                modeBarButtonsToRemove: ['select2d', 'lasso2d', 'autoScale2d', 'toggleSpikelines']};
let timer = null;
function schedule(range) {
  clearTimeout(timer);
  state.asked = range;
  document.body.dataset.idle = '0';
  timer = setTimeout(() => render(range), 30);
}
// A zoom, a pan, a double-click (autorange: the whole trace) or a resize (same time, new pixels) draws again.
function onRelayout(ev) {
  const resized = Boolean(ev.autosize || ev.width);
  let r = null;
  if (ev['xaxis.autorange']) r = [TL.t0Ns, TL.t1Ns];
  else if (ev['xaxis.range[0]'] !== undefined) r = [ev['xaxis.range[0]'] * 1e9, ev['xaxis.range[1]'] * 1e9];
  else if (ev['xaxis.range']) r = [ev['xaxis.range'][0] * 1e9, ev['xaxis.range'][1] * 1e9];
  // the range last asked for: a resize in the 30 ms before a zoom is drawn must not put the old range back
  else if (resized && (state.asked || state.range)) r = (state.asked || state.range).slice();
  if (!r || !(r[1] > r[0])) return;
  const same = state.range && Math.abs(r[0] - state.range[0]) + Math.abs(r[1] - state.range[1]) < 1e-6 * (r[1] - r[0]);
  if (!same || resized) schedule(r);
}

// ---------- legends (DOM text only) ----------
function legend(box, entries) {
  const row = document.createElement('div'); row.className = 'legend-row';
  const h = document.createElement('span');
  h.className = 'legend-title';
  h.textContent = box;
  const items = document.createElement('span');
  items.className = 'legend-items';
  row.appendChild(h);
  row.appendChild(items);
  for (const [name, color, line] of entries) {
    const item = document.createElement('span'); item.className = 'legend-item';
    const sw = document.createElement('span');
    sw.className = line ? 'swatch line' : 'swatch';
    sw.style.background = color;
    const label = document.createElement('span'); label.textContent = name;
    item.appendChild(sw);
    item.appendChild(label);
    items.appendChild(item);
  }
  document.getElementById('legends').appendChild(row);
}
function legends() {
  for (const v of views) {
    const seen = new Set(), entries = [];
    for (const c of v.cats) {
      if (c.present && !seen.has(c.name)) entries.push([c.name, c.color, false]);
      seen.add(c.name);
    }
    if (v.key === KEY.steps) {
      entries.push(['analyzed window', '#222', true]);
      if (TL.detail[0] > TL.t0Ns || TL.detail[1] < TL.t1Ns) {
        entries.push(['window with exact records', '#1a9c3c', true]);
      }
      entries.push(['step boundary (dotted line, when 60 or fewer are in view)', 'rgba(0,0,0,0.55)', true]);
    }
    if (v.key === KEY.mpi) entries.push(['collective / message (line across the ranks)', '#111', true]);
    legend(v.title, entries);
  }
  if (CP) {
    legend('Critical path', [['the path through ranks and threads, over the kernel rows (button above the timeline)',
                              CP_COLOR, true]]);
  }
  if (tpRanks.length) {
    legend('Task parallelism', [['tasks running', TASKS_COLOR, false], ['tasks ready, not started', READY_COLOR,
                                 true]]);
  }
  if (occRanks.length) {
    legend('Occupancy', occ.ranks.map((r, i) => ['rank ' + r, DATA.rankColors[i % DATA.rankColors.length], false])
      .concat([['all threads of the rank (dotted line)', 'rgba(0,0,0,0.45)', true]]));
  }
}

// ---------- buttons, other figures, start ----------
// The data the first view needs, loaded before it is drawn (later views load theirs on demand).
async function preload(range) {
  const px = plotWidth(), jobs = [];
  const load = (obj, loader) => { if (!obj._data) jobs.push(loader(obj).then(d => { obj._data = d; })); };
  for (const v of views) {
    if (v.levels.length) load(v.levels[pickLevel(v.levels, range[1] - range[0], px)], loadLevel);
    if (v.exact.n && inside(range, v.exactSpan)) load(v.exact, loadExact);
  }
  if (occ.levels.length) load(occ.levels[pickLevel(occ.levels, range[1] - range[0], px)], lv => blob(lv));
  if (TP) load(TP, loadProfile);
  await Promise.all(jobs);
}
function button(id, range) {
  const b = document.getElementById(id);
  if (b) b.addEventListener('click', () => render(range));
}
async function start() {
  legends();
  for (const n of TL.notes) {
    const p = document.createElement('p');
    p.className = 'note';
    p.textContent = n;
    document.getElementById('legends').appendChild(p);
  }
  const whole = [TL.t0Ns, TL.t1Ns];
  const first = (TL.analyzed[1] - TL.analyzed[0]) < 0.9 * (whole[1] - whole[0]) ? TL.analyzed.slice() : whole;
  button('btn-whole', whole); button('btn-analyzed', TL.analyzed.slice()); button('btn-detail', TL.detail.slice());
  const toggle = document.getElementById('btn-critical');
  if (toggle) {
    toggle.addEventListener('click', () => {
      state.critical = !state.critical;
      toggle.setAttribute('aria-pressed', String(state.critical));
      toggle.textContent = (state.critical ? 'Hide' : 'Show') + ' the critical path';
      rerender();
    });
  }
  // One draw with the data: an empty plot first would lay out every panel's axis twice (a second per 100 axes).
  await preload(first);
  performance.mark('report:decoded');
  await render(first);
  gd.on('plotly_relayout', onRelayout);
  // the overview's empty pixels (gaps between ranks, bins with no record) have no label to show
  gd.on('plotly_hover', ev => {
    if (ev.points.length && ev.points.every(q => q.data.type === 'image' && !q.hovertext)) Plotly.Fx.unhover(gd);
  });
  // the first view is the moment the browser has painted the timeline, not only when plotly built its SVG
  await new Promise(resolve => requestAnimationFrame(() => setTimeout(resolve)));
  document.body.dataset.firstView = String(performance.now());
  lazyFigures();
  document.body.dataset.ready = '1';
}
// The charts under the timeline draw when they come near the viewport: drawn all at once they keep the page busy
// for seconds (seconds more at hundreds of lanes) in which a zoom on the timeline would wait. One at a time, in order.
function lazyFigures() {
  let drawing = Promise.resolve();
  let drawn = 0;
  document.body.dataset.figures = '0';
  const observer = new IntersectionObserver(entries => {
    for (const entry of entries) {
      if (!entry.isIntersecting) continue;
      observer.unobserve(entry.target);
      const fig = DATA.figures[entry.target.id];
      drawing = drawing.then(() => Plotly.newPlot(entry.target, fig.data,
        Object.assign({}, fig.layout, {autosize: true}), {responsive: true, displaylogo: false}))
        .then(() => { drawn++; document.body.dataset.figures = String(drawn); })
        .catch(err => { console.error(err); document.body.dataset.error = String(err); });
    }
  }, {rootMargin: '300px 0px'});
  for (const [id, fig] of Object.entries(DATA.figures)) {
    const el = document.getElementById(id);
    if (!el || !fig) continue;
    el.style.minHeight = (fig.layout.height || 450) + 'px';    // its place kept: the page does not jump as it draws
    observer.observe(el);
  }
}
start().catch(err => { console.error(err); document.body.dataset.error = String(err); });
})();
