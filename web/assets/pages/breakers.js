// Breakers: each upstream's breaker as this instance sees it, asked again every two seconds; an admin
// forces one open or closed (kept in the configuration, so every instance applies it), returns it to
// automatic, or resets this instance's breaker.
import { api, path } from '../api.js';
import { h, replace } from '../dom.js';
import { duration, number, t } from '../i18n.js';
import { messages, pageHead, poll, syncRows, table } from '../page.js';

// The actions that make sense in a state: force what it is not forced to, reset when it is judged.
function actionsFor(b) {
  if (!b.enabled) return [];
  const out = ['open', 'closed', 'none'].filter((f) => f !== (b.force ?? 'none'));
  if ((b.force ?? 'none') === 'none') out.push('reset');
  return out;
}

export function render(view, ctx) {
  const msg = messages();
  const columns = [t('field.upstream'), t('breakers.state'), t('breakers.calls'), { label: t('breakers.slow'), num: true }, t('breakers.openFor')];
  if (ctx.admin) columns.push(t('list.actions'));
  const tbl = table(columns, { 'aria-label': t('nav.breakers') });
  const empty = h('p', { class: 'muted', hidden: true }, t('overview.noBreakers'));
  view.append(pageHead(t('nav.breakers')), h('p', { class: 'hint' }, t('breakers.intro')), msg.el,
    h('section', { class: 'card' }, empty, tbl.el));

  async function act(b, action) {
    try {
      if (action === 'reset') await api('POST', `breakers/${path(b.upstream)}/reset`);
      else await api('POST', `breakers/${path(b.upstream)}/force`, { body: { force: action } });
      msg.say('ok', t(`breakers.done.${action}`, { name: b.upstream }));
      await refresh();
    } catch (error) {
      msg.say('error', error.message);
    }
  }

  const create = () => h('tr', {}, h('th', { scope: 'row' }), h('td'), h('td'), h('td', { class: 'num' }), h('td'),
    ctx.admin ? h('td', { class: 'actions-cell' }) : null);
  const update = (row, b) => {
    const [name, state, window, slow, openFor, actions] = row.children;
    row.dataset.upstream = b.upstream;
    name.textContent = b.upstream;
    replace(state, h('span', { class: `state state-${b.state}` }, t(`state.${b.state}`)));
    window.textContent = b.enabled ? t('breakers.window', { calls: number(b.calls), failures: number(b.failures) }) : t('breakers.disabled');
    slow.textContent = b.enabled ? number(b.slow_calls) : '';
    openFor.textContent = b.open_remaining_ms > 0 ? duration(b.open_remaining_ms) : '';
    if (!actions) return;
    // The buttons are redrawn only when what they can do changes, so the focus stays where it was.
    const wanted = actionsFor(b);
    if (actions.dataset.actions === wanted.join()) return;
    const focused = actions.contains(document.activeElement);
    actions.dataset.actions = wanted.join();
    replace(actions, wanted.map((a) => h('button', {
      type: 'button',
      class: `secondary small${a === 'open' ? ' danger' : ''}`,
      'aria-label': `${t(`breakers.action.${a}`)} ${b.upstream}`,
      onclick: () => act(b, a),
    }, t(`breakers.action.${a}`))));
    if (focused) actions.querySelector('button')?.focus();
  };
  async function refresh() {
    const items = (await api('GET', 'breakers')).data.items;
    empty.hidden = items.length > 0;
    tbl.el.hidden = !empty.hidden;
    syncRows(tbl.body, items, (b) => b.upstream, create, update);
  }
  return poll(refresh, 2000, (error) => msg.say('error', error.message));
}
