// The audit log: every change, newest first, fifty at a time; "Before and after" shows the entity on
// both sides of one change.
import { api } from '../api.js';
import { h } from '../dom.js';
import { t, time } from '../i18n.js';
import { messages, pageHead, table } from '../page.js';

function pretty(value) {
  return value === null || value === undefined ? '—' : JSON.stringify(value, null, 2);
}

export async function render(view) {
  const msg = messages();
  const tbl = table([t('audit.at'), t('audit.actor'), t('audit.action'), t('audit.target'), { label: t('audit.revision'), num: true }, t('audit.details')],
    { 'aria-label': t('nav.audit') });
  const older = h('button', { type: 'button', class: 'secondary', hidden: true }, t('audit.older'));
  const empty = h('p', { class: 'muted', hidden: true }, t('audit.empty'));
  view.append(pageHead(t('nav.audit')), msg.el, h('section', { class: 'card' }, empty, tbl.el, h('div', { class: 'actions' }, older)));

  function row(entry) {
    const detailId = `audit-${entry.id}`;
    const toggle = h('button', {
      type: 'button', class: 'secondary small', 'aria-expanded': 'false', 'aria-controls': detailId,
      'aria-label': `${t('audit.show')}: ${entry.action} ${entry.target}`,
    }, t('audit.show'));
    const main = h('tr', { dataset: { id: entry.id } },
      h('td', {}, h('time', { datetime: entry.at }, time(entry.at))),
      h('td', {}, entry.actor),
      h('td', {}, h('code', {}, entry.action)),
      h('td', {}, entry.target),
      h('td', { class: 'num' }, entry.revision ?? ''),
      h('td', {}, toggle));
    let detail = null; // made on first opening: the JSON of both sides can be long
    toggle.addEventListener('click', () => {
      if (!detail) {
        detail = h('tr', { class: 'detail', id: detailId },
          h('td', { colspan: 6 }, h('div', { class: 'diff' },
            h('div', {}, h('h3', {}, t('audit.before')), h('pre', {}, pretty(entry.before))),
            h('div', {}, h('h3', {}, t('audit.after')), h('pre', {}, pretty(entry.after))))));
        detail.hidden = true;
        main.after(detail);
      }
      detail.hidden = !detail.hidden;
      toggle.setAttribute('aria-expanded', String(!detail.hidden));
    });
    return main;
  }

  let before;
  let loading = false; // a second click while a page loads would load that page twice
  async function more() {
    if (loading) return;
    loading = true;
    older.disabled = true;
    try {
      const answer = (await api('GET', 'audit', { query: { limit: 50, before } })).data;
      for (const entry of answer.items) tbl.body.append(row(entry));
      before = answer.next_before ?? undefined;
      older.hidden = before === undefined;
      empty.hidden = tbl.body.children.length > 0;
      tbl.el.hidden = !empty.hidden;
    } catch (error) {
      msg.say('error', error.message);
    } finally {
      loading = false;
      older.disabled = false;
    }
  }
  older.addEventListener('click', more);
  await more();
}
