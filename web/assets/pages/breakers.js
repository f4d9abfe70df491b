// Breakers: each upstream's breaker as this instance sees it, asked again every two seconds; an admin
// forces one open or closed (kept in the configuration, so every instance applies it), returns it to
// automatic, or resets this instance's breaker. After an action its row shows the state the action
// made, as the API then reports it, before the action is said to be done.
import { api, path } from '../api.js';
import { h, replace } from '../dom.js';
import { duration, number, t } from '../i18n.js';
import {
  ident, messages, pageHead, poll, syncRows, table,
} from '../page.js';

// The breaker as this instance reports it once it applies a force just written (it applies the
// configuration within a second): asked again until it does, for at most a few seconds.
async function forced(upstream, force) {
  const deadline = Date.now() + 3000;
  for (;;) {
    const b = (await api('GET', `breakers/${path(upstream)}`)).data;
    if ((b.force ?? 'none') === force || Date.now() > deadline) return b;
    await new Promise((resolve) => { setTimeout(resolve, 100); });
  }
}

// The actions that make sense in a state: force what it is not forced to (not on an instance that
// follows a primary: a force is configuration), reset when it is judged.
function actionsFor(b, follows) {
  if (!b.enabled) return [];
  const out = follows ? [] : ['open', 'closed', 'none'].filter((f) => f !== (b.force ?? 'none'));
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

  let epoch = 0; // counts actions done: a list asked for before the last one shows the state before it
  async function act(b, action) {
    try {
      let now;
      if (action === 'reset') {
        now = (await api('POST', `breakers/${path(b.upstream)}/reset`)).data;
      } else {
        await api('POST', `breakers/${path(b.upstream)}/force`, { body: { force: action } });
        now = await forced(b.upstream, action);
      }
      epoch += 1;
      const row = [...tbl.body.children].find((r) => r.dataset.key === now.upstream);
      if (row) update(row, now);
      msg.say('ok', t(`breakers.done.${action}`, { name: b.upstream }));
    } catch (error) {
      msg.say('error', error.message);
    }
  }

  const create = () => h('tr', {}, h('th', { scope: 'row' }, ident('')), h('td'), h('td'), h('td', { class: 'num' }), h('td'),
    ctx.admin ? h('td', { class: 'actions-cell' }) : null);
  const update = (row, b) => {
    const [name, state, window, slow, openFor, actions] = row.children;
    row.dataset.upstream = b.upstream;
    name.firstChild.textContent = b.upstream;
    name.firstChild.title = b.upstream;
    replace(state, h('span', { class: `state state-${b.state}` }, t(`state.${b.state}`)));
    window.textContent = b.enabled ? t('breakers.window', { calls: number(b.calls), failures: number(b.failures) }) : t('breakers.disabled');
    slow.textContent = b.enabled ? number(b.slow_calls) : '';
    openFor.textContent = b.open_remaining_ms > 0 ? duration(b.open_remaining_ms) : '';
    if (!actions) return;
    // The buttons are redrawn only when what they can do changes, so the focus stays where it was.
    const wanted = actionsFor(b, ctx.follows);
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
  // An error of the polling (no answer) is said, and the table dimmed, until an answer comes.
  let failing = false;
  async function refresh() {
    const asked = epoch;
    const items = (await api('GET', 'breakers')).data.items;
    if (failing) {
      failing = false;
      msg.clear();
      view.classList.remove('stale');
    }
    if (asked !== epoch) return;
    empty.hidden = items.length > 0;
    tbl.el.hidden = !empty.hidden;
    syncRows(tbl.body, items, (b) => b.upstream, create, update);
  }
  return poll(refresh, 2000, (error) => {
    if (!failing) msg.say('error', error.message);
    failing = true;
    view.classList.add('stale');
  });
}
