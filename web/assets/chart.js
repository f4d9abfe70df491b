// Charts drawn as SVG (lines over the last minute, sparklines) and as HTML (bars), small enough to
// read whole. Colours come from app.css classes, so the charts follow the page's palette.
import { h, s } from './dom.js';

function top(values) {
  return Math.max(1, ...values);
}

// A "nice" axis maximum: 1, 2 or 5 times a power of ten, at least max.
function niceMax(max) {
  const p = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 5, 10]) if (m * p >= max) return m * p;
  return 10 * p;
}

function points(values, width, height, max, pad) {
  const step = values.length > 1 ? width / (values.length - 1) : 0;
  return values.map((v, i) => `${(pad + i * step).toFixed(1)},${(height - (v / max) * height + 4).toFixed(1)}`).join(' ');
}

// Lines of per-second values (oldest first) on one scale: series = [{label, values, cls}].
// label is the chart's accessible name; labels = {start, end} name the ends of the time axis.
export function lineChart({ series, label, labels }) {
  const width = 600;
  const height = 150;
  const pad = 36;
  const max = niceMax(top(series.flatMap((x) => x.values)));
  const plotWidth = width - pad - 6;
  const svg = s('svg', { viewBox: `0 0 ${width} ${height + 26}`, class: 'chart line', role: 'img', 'aria-label': label });
  svg.append(s('title', {}, label));
  for (const f of [0, 0.5, 1]) {
    const y = height - f * height + 4;
    svg.append(s('line', { x1: pad, x2: width - 6, y1: y, y2: y, class: 'grid' }));
    svg.append(s('text', { x: pad - 6, y: y + 4, class: 'tick', 'text-anchor': 'end' }, String(Number((max * f).toFixed(1)))));
  }
  svg.append(s('text', { x: pad, y: height + 22, class: 'tick' }, labels.start));
  svg.append(s('text', { x: width - 6, y: height + 22, class: 'tick', 'text-anchor': 'end' }, labels.end));
  for (const x of series) {
    svg.append(s('polyline', { points: points(x.values, plotWidth, height, max, pad), class: `series ${x.cls}` }));
  }
  return svg;
}

// A word-sized chart of one row: admitted and rejected per second.
export function sparkline(admitted, rejected, label) {
  const width = 120;
  const height = 24;
  const max = top([...admitted, ...rejected]);
  const svg = s('svg', { viewBox: `0 0 ${width} ${height + 6}`, class: 'chart spark', role: 'img', 'aria-label': label });
  svg.append(s('polyline', { points: points(admitted, width, height, max, 0), class: 'series admitted' }));
  svg.append(s('polyline', { points: points(rejected, width, height, max, 0), class: 'series rejected' }));
  return svg;
}

// Horizontal bars, longest first: items = [{label, value, cls}]; empty says so.
export function barList(items, empty) {
  if (!items.length) return h('p', { class: 'muted' }, empty);
  const max = top(items.map((i) => i.value));
  return h('ul', { class: 'bars' }, items.map((item) => {
    const bar = h('span', { class: `bar ${item.cls ?? ''}` });
    bar.style.width = `${Math.max(2, (item.value / max) * 100)}%`;
    return h('li', {},
      h('span', { class: 'bar-label', title: item.label }, item.label),
      h('span', { class: 'bar-track' }, bar),
      h('span', { class: 'bar-value' }, String(item.value)));
  }));
}

// A legend for lineChart's series.
export function legend(series) {
  return h('ul', { class: 'legend' }, series.map((x) => h('li', {}, h('span', { class: `swatch ${x.cls}` }), x.label)));
}
