// The overview: this instance's last minute from /stats, asked again every second — totals, the
// store and the configuration's source, requests per second, rejections by reason, the most limited
// callers, breakers, and a row per system and per interface. While the gateway does not answer, the
// figures stay on screen marked as stale, with the time they are from.
import { api } from '../api.js';
import { barList, legend, lineChart, sparkline } from '../chart.js';
import { h, replace } from '../dom.js';
import { number, reason, t } from '../i18n.js';
import {
  ident, messages, pageHead, poll, syncRows, table,
} from '../page.js';

// Rate and concurrency limits are "limited"; access checks and upstream errors are "refused".
function kindOf(code) {
  return /_rate_limited$|_concurrency_limited$/.test(code) ? 'limited' : 'refused';
}

function sum(arrays, length) {
  const out = new Array(length).fill(0);
  for (const a of arrays) a.forEach((v, i) => { out[i] += v; });
  return out;
}

// Per second: admitted, and rejected per reason, over the whole instance: /stats's total, which
// counts each request once, those refused before a system or an interface was known too.
function totals(stats) {
  const n = stats.seconds ?? 60;
  const byReason = stats.total.rejected;
  return { admitted: stats.total.admitted, rejected: sum(Object.values(byReason), n), byReason };
}

const total = (values) => values.reduce((a, b) => a + b, 0);

// What limits refused of one system's requests (access checks and upstream errors are not counted).
function limitedOf(x) {
  return Object.entries(x.rejected).filter(([code]) => kindOf(code) === 'limited').reduce((n, [, v]) => n + total(v), 0);
}

function tile(label, value, detail, cls = '') {
  return h('div', { class: `tile ${cls}` },
    h('div', { class: 'tile-label' }, label),
    h('div', { class: 'tile-value' }, value),
    h('div', { class: 'tile-detail' }, detail));
}

function entityTable(caption) {
  // The totals come before the chart, so a phone shows them without scrolling the table.
  const tbl = table([t('field.name'), { label: t('overview.admitted'), num: true }, { label: t('overview.rejected'), num: true },
    t('overview.lastMinute'), t('overview.reasons')], { 'aria-label': caption });
  const create = () => h('tr', {}, h('th', { scope: 'row' }, ident('')), h('td', { class: 'num' }), h('td', { class: 'num rejected-total' }),
    h('td'), h('td', { class: 'reasons' }));
  const update = (row, x) => {
    const name = x.key ?? x.id;
    const [head, admitted, rejected, spark, reasons] = row.children;
    row.dataset.name = name;
    row.classList.toggle('has-rejections', x.rejected_total > 0);
    head.firstChild.textContent = name;
    head.firstChild.title = name;
    const perSecond = sum(Object.values(x.rejected), x.admitted.length);
    replace(spark, sparkline(x.admitted, perSecond, t('overview.sparkLabel', { name })));
    admitted.textContent = number(x.admitted_total);
    rejected.textContent = number(x.rejected_total);
    const codes = Object.entries(x.rejected).map(([code, v]) => [code, total(v)]).filter(([, v]) => v > 0)
      .sort((a, b) => b[1] - a[1]);
    replace(reasons, codes.map(([code, v]) => h('span', { class: 'chip bad' }, `${reason(code)} ${number(v)}`)));
  };
  return { tbl, update, create };
}

export function render(view) {
  const msg = messages();
  let paused = false;
  const pause = h('button', { type: 'button', class: 'secondary', 'aria-pressed': 'false' }, t('overview.pause'));
  pause.addEventListener('click', () => {
    paused = !paused;
    pause.textContent = t(paused ? 'overview.resume' : 'overview.pause');
    pause.setAttribute('aria-pressed', String(paused));
  });
  const updated = h('p', { class: 'live muted' });
  let drawnAt = ''; // the time of the figures on screen
  let said = ''; // the error shown, said again only when it changes
  const tiles = h('div', { class: 'tiles' });
  const traffic = h('div');
  const reasons = h('div', { id: 'reasons' });
  const limited = h('div', { id: 'top-limited' });
  const breakers = h('div', { id: 'breaker-states' });
  const systems = entityTable(t('overview.systems'));
  const interfaces = entityTable(t('overview.interfaces'));
  const noSystems = h('p', { class: 'muted' }, t('overview.noSystems'));
  const noInterfaces = h('p', { class: 'muted' }, t('overview.noInterfaces'));

  view.classList.add('overview');
  view.append(
    pageHead(t('nav.overview'), pause),
    updated, msg.el, tiles,
    h('div', { class: 'grid' },
      h('section', { class: 'card' }, h('h2', {}, t('overview.traffic')), traffic),
      h('section', { class: 'card' }, h('h2', {}, t('overview.byReason')), reasons)),
    h('div', { class: 'grid' },
      h('section', { class: 'card' }, h('h2', {}, t('overview.topLimited')), limited),
      h('section', { class: 'card' }, h('h2', {}, t('overview.breakers')), breakers)),
    h('section', { class: 'card' }, h('h2', {}, t('overview.systems')), noSystems, systems.tbl.el),
    h('section', { class: 'card' }, h('h2', {}, t('overview.interfaces')), noInterfaces, interfaces.tbl.el));

  function draw(stats) {
    const sums = totals(stats);
    const admitted = total(sums.admitted);
    const rejected = total(sums.rejected);
    const share = admitted + rejected ? Math.round((100 * rejected) / (admitted + rejected)) : 0;
    const config = stats.config ?? {};
    replace(tiles,
      tile(t('overview.admittedMinute'), number(admitted), '', 'good'),
      tile(t('overview.rejectedMinute'), number(rejected), t('overview.share', { percent: share }), rejected ? 'bad' : ''),
      tile(t('overview.store'), stats.store?.kind ?? '?', t('overview.storeErrors', { n: number(stats.store?.errors_total ?? 0) }),
        stats.store?.errors_total ? 'bad' : 'good'),
      tile(t('overview.config'), t('overview.revision', { r: config.revision ?? '?' }),
        config.ok === false ? `${t('overview.sourceDown')}: ${config.error ?? ''}` : t(`overview.source.${config.source}`),
        config.ok === false ? 'bad' : 'good'));

    const series = [
      { label: t('overview.admitted'), values: sums.admitted, cls: 'admitted' },
      { label: t('overview.rejected'), values: sums.rejected, cls: 'rejected' },
    ];
    replace(traffic, legend(series), lineChart({
      series,
      label: t('overview.trafficLabel', { admitted: number(admitted), rejected: number(rejected) }),
      labels: { start: t('overview.minuteAgo'), end: t('overview.now') },
    }));
    replace(reasons, barList(Object.entries(sums.byReason).map(([code, v]) => ({ label: reason(code), value: total(v), cls: kindOf(code) }))
      .filter((x) => x.value > 0).sort((a, b) => b.value - a.value), t('overview.noRejections')));
    replace(limited, barList(stats.systems.map((x) => ({ label: x.key, value: limitedOf(x), cls: 'limited' }))
      .filter((x) => x.value > 0).sort((a, b) => b.value - a.value).slice(0, 8), t('overview.noneLimited')));
    replace(breakers, stats.breakers.length
      ? h('ul', { class: 'breaker-list' }, stats.breakers.map((b) => h('li', { dataset: { upstream: b.upstream } },
        ident(b.upstream), ' ', h('span', { class: `state state-${b.state}` }, t(`state.${b.state}`)))))
      : h('p', { class: 'muted' }, t('overview.noBreakers')));

    noSystems.hidden = stats.systems.length > 0;
    systems.tbl.el.hidden = !noSystems.hidden;
    syncRows(systems.tbl.body, stats.systems, (x) => x.key, systems.create, systems.update);
    noInterfaces.hidden = stats.interfaces.length > 0;
    interfaces.tbl.el.hidden = !noInterfaces.hidden;
    syncRows(interfaces.tbl.body, stats.interfaces, (x) => x.id, interfaces.create, interfaces.update);
    drawnAt = new Date().toLocaleTimeString(document.documentElement.lang);
    updated.textContent = t('overview.updated', { time: drawnAt });
  }

  // No answer (or an error): what is on screen is the last minute as it was, not as it is.
  function stale(error) {
    const text = !error.unreachable ? error.message
      : drawnAt ? t('overview.unreachable', { time: drawnAt }) : t('app.unreachable');
    if (text !== said) msg.say('error', text);
    said = text;
    if (!drawnAt) return;
    view.classList.add('stale');
    updated.textContent = t('overview.stale', { time: drawnAt });
  }

  return poll(async () => {
    if (paused) return;
    draw((await api('GET', 'stats')).data);
    view.classList.remove('stale');
    msg.clear();
    said = '';
  }, 1000, stale);
}
