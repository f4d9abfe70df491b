// The limit inspector: an owner's limits with their live state (remaining, when full again), and for
// an admin a reset of one or all. The address keeps the lookup
// (#/limits?key=system:crm&value=...), so a lookup can be shared and reloaded. "value=" left empty
// is the one count of requests without the header or parameter a limit is keyed by; no value at
// all shows a keyed limit without a state (it has one per value), and offers no reset of it.
import { api } from '../api.js';
import { h, replace } from '../dom.js';
import { checkbox, field, input, select } from '../forms.js';
import { duration, limitSummary, number, t } from '../i18n.js';
import { messages, pageHead, table } from '../page.js';

const KINDS = ['system', 'interface', 'grant'];

export function render(view, ctx) {
  const msg = messages();
  const key = ctx.query.get('key') ?? '';
  // null: none given; '': the requests without one.
  const value = ctx.query.get('value');
  const colon = key.indexOf(':');
  const kind = select(colon > 0 ? key.slice(0, colon) : 'system', KINDS.map((k) => [k, t(`scope.${k}`)]));
  const owner = input(colon > 0 ? key.slice(colon + 1) : '', { required: true });
  const valueInput = input(value ?? '', { disabled: value === '' });
  const without = checkbox(value === '');
  without.addEventListener('change', () => { valueInput.disabled = without.checked; });
  const system = ctx.query.get('system') ?? '';
  const systemInput = input(system);
  const form = h('form', { class: 'card inspector', role: 'search' },
    h('p', { class: 'hint' }, t('inspector.intro')),
    h('div', { class: 'row' },
      field('kind', t('inspector.kind'), kind),
      field('owner', t('inspector.owner'), owner, t('inspector.ownerHint')),
      field('value', t('inspector.value'), valueInput, t('inspector.valueHint')),
      field('without', t('inspector.without'), without, t('inspector.withoutHint')),
      field('system', t('inspector.system'), systemInput, t('inspector.systemHint'))),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, t('inspector.lookUp'))));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams({ key: `${kind.value}:${owner.value.trim()}` });
    if (without.checked) q.set('value', '');
    else if (valueInput.value.trim()) q.set('value', valueInput.value.trim());
    if (kind.value === 'grant' && systemInput.value.trim()) q.set('system', systemInput.value.trim());
    ctx.navigate(`#/limits?${q}`);
  });
  const results = h('section', { class: 'card', hidden: true });
  view.append(pageHead(t('nav.limits')), msg.el, form, results);
  if (!key) return;

  // system= says which grant a grant:a/b/c means when ids hold slashes (the API asks for it then).
  const query = { key, value: value ?? undefined, system: system || undefined };
  function draw(answer) {
    results.hidden = false;
    if (!answer.items.length) {
      replace(results, h('h2', {}, t('inspector.results')), h('p', { class: 'muted' }, t('inspector.noLimits')));
      return;
    }
    const columns = [t('inspector.limit'), t('inspector.scope'), t('inspector.remaining'), t('inspector.resetIn')];
    if (ctx.admin) columns.push(t('list.actions'));
    const tbl = table(columns, { 'aria-label': t('inspector.results') });
    for (const item of answer.items) {
      const s = item.state;
      const row = h('tr', { dataset: { name: item.name } },
        h('th', { scope: 'row' }, limitSummary(item.limit)),
        h('td', {}, t(`scope.${item.scope}`)),
        h('td', { class: 'remaining' }, s ? t('inspector.remainingOf', { r: number(s.remaining), l: number(s.limit) }) : t(value === null ? 'inspector.needValue' : 'inspector.notAddress')),
        h('td', {}, s ? duration(s.reset_after_ms) : ''));
      if (ctx.admin) {
        // Without a state (a keyed limit without a value it can count) there is no one count to reset.
        row.append(h('td', { class: 'actions-cell' }, !s ? null : h('button', {
          type: 'button',
          class: 'secondary small',
          'aria-label': `${t('inspector.reset')} ${item.name}`,
          onclick: () => reset(item.name),
        }, t('inspector.reset'))));
      }
      tbl.body.append(row);
    }
    const all = ctx.admin && answer.items.every((item) => item.state)
      ? h('button', { type: 'button', class: 'secondary', onclick: () => reset() }, t('inspector.resetAllButton')) : null;
    replace(results, h('div', { class: 'page-head' }, h('h2', {}, t('inspector.results')), all), tbl.el);
  }

  // Resets one limit (by name) or all of them, then shows the state after.
  async function reset(name) {
    try {
      const answer = (await api('POST', 'limits/reset', { query: { ...query, limit: name } })).data;
      draw(answer);
      msg.say('ok', name ? t('inspector.resetOne', { name }) : t('inspector.resetAll'));
      results.querySelector(name ? `button[aria-label="${CSS.escape(`${t('inspector.reset')} ${name}`)}"]` : 'button')?.focus();
    } catch (error) {
      msg.say('error', error.message);
    }
  }

  return (async () => {
    try {
      draw((await api('GET', 'limits', { query })).data);
    } catch (error) {
      msg.say('error', error.message);
    }
  })();
}
