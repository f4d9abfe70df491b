// A system's credentials (API keys, signing secrets) under its form: listed with their times, and
// for an admin created (the secret shown this once), rotated and deleted; changed() after each change.
import { api, path } from '../api.js';
import { h, replace } from '../dom.js';
import { checkbox } from '../forms.js';
import { t, time } from '../i18n.js';
import { messages, table } from '../page.js';

export function credentials(system, admin, changed) {
  const msg = messages();
  const list = h('div', {});
  const route = `systems/${path(system)}/credentials`;
  const rotate = checkbox(false, { id: 'cred-rotate' });
  const create = (kind) => h('button', { type: 'button', class: 'secondary', onclick: () => make(kind) }, t(kind === 'api_key' ? 'cred.newApiKey' : 'cred.newHmac'));
  const el = h('section', { class: 'card', 'aria-labelledby': 'cred-title' },
    h('h2', { id: 'cred-title' }, t('cred.title')),
    h('p', { class: 'hint' }, t('cred.intro')),
    msg.el, list,
    admin ? h('div', { class: 'actions' }, create('api_key'), create('hmac'),
      h('span', { class: 'check' }, rotate, h('label', { for: 'cred-rotate' }, t('cred.rotate')))) : null);

  async function load() {
    const items = (await api('GET', route)).data.items;
    if (!items.length) {
      replace(list, h('p', { class: 'muted' }, t('cred.none')));
      return;
    }
    const columns = [t('cred.id'), t('cred.kind'), t('cred.created'), t('cred.expires'), t('breakers.state')];
    if (admin) columns.push(t('list.actions'));
    const tbl = table(columns, { 'aria-label': t('cred.title') });
    for (const c of items) {
      tbl.body.append(h('tr', { dataset: { id: c.id } },
        h('th', { scope: 'row' }, h('code', {}, c.id)),
        h('td', {}, t(`auth.${c.kind}`)),
        h('td', {}, c.created ? time(c.created) : ''),
        h('td', {}, c.expires ? time(c.expires) : t('cred.never')),
        h('td', {}, h('span', { class: `badge ${c.active ? 'on' : 'off'}` }, t(c.active ? 'cred.active' : 'cred.expired'))),
        admin ? h('td', { class: 'actions-cell' }, h('button', {
          type: 'button', class: 'secondary small danger', 'aria-label': `${t('edit.delete')} ${c.id}`, onclick: () => remove(c.id),
        }, t('edit.delete'))) : null));
    }
    replace(list, tbl.el);
  }

  async function make(kind) {
    try {
      const made = (await api('POST', route, { body: { kind, rotate: rotate.checked } })).data;
      await Promise.all([load(), changed()]);
      const secret = made.api_key ?? made.secret;
      msg.say('ok', t('cred.shownOnce', { id: made.id }), ' ', h('code', { class: 'secret', tabindex: '0' }, secret));
    } catch (error) {
      msg.say('error', error.message);
    }
  }

  async function remove(id) {
    // eslint-disable-next-line no-alert
    if (!window.confirm(t('edit.confirmDelete', { name: id }))) return;
    try {
      await api('DELETE', `${route}/${path(id)}`);
      await Promise.all([load(), changed()]);
      msg.say('ok', t('edit.deleted', { name: id }));
    } catch (error) {
      msg.say('error', error.message);
    }
  }

  load().catch((error) => msg.say('error', error.message));
  return el;
}
