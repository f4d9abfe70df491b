// Systems, interfaces, upstreams and grants: a list of each (with enable/disable for systems and
// interfaces), and one form per entity to create or edit it. Every save sends the ETag it was read
// with; a 412 is reported and nothing is overwritten; a 400's problems are shown at their fields.
import { api, ApiError, path } from '../api.js';
import { h, replace } from '../dom.js';
import {
  badNumbers, checkbox, checkGroup, clearProblems, field, input, limitsEditor, numberInput, numberOf, select, showProblems,
  textOf,
} from '../forms.js';
import { limitSummary, number, t } from '../i18n.js';
import { credentials } from './credentials.js';
import {
  flash, ident, loading, messages, pageHead, table, takeFlash,
} from '../page.js';

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'];

// A number when the text is one, the text otherwise: windows are calls or a duration, statuses a
// number or a class (5xx).
function numberOrText(v) {
  const s = String(v).trim();
  return /^\d+$/.test(s) ? Number(s) : s;
}

// Statuses as the configuration writes them: a whole class as 5xx, the rest as numbers
// ([429, 500, 501, ... 599] → "429, 5xx").
function statusesText(statuses) {
  const numbers = new Set(statuses.filter((v) => typeof v === 'number'));
  const out = [];
  for (const v of statuses) {
    if (typeof v !== 'number') {
      out.push(v);
      continue;
    }
    const base = v - (v % 100);
    let whole = true;
    for (let n = base; n < base + 100 && whole; n += 1) whole = numbers.has(n);
    if (!whole) out.push(v);
    else if (v === base) out.push(`${base / 100}xx`);
  }
  return out.join(', ');
}

// What the configuration says of an upstream's breaker, for its list.
function breakerText(b) {
  if (b?.enabled === false) return t('breakers.disabled');
  if (b?.force === 'open') return t('state.forced_open');
  if (b?.force === 'closed') return t('state.forced_closed');
  return t('upstream.automatic');
}

// The values checked now, those checked before first in their order, then the new ones: a save that
// changes nothing sends the list as it was (no new revision, no audit entry for a reordering).
function keepOrder(before, now) {
  return [...(before ?? []).filter((v) => now.includes(v)), ...now.filter((v) => !(before ?? []).includes(v))];
}

// A duration as the API writes it ("500ms", "10s", "10m", "2h", "1d") in milliseconds, or NaN.
function ms(text) {
  const m = /^(\d+)(ms|s|m|h|d)$/.exec(text ?? '');
  return m ? Number(m[1]) * { ms: 1, s: 1e3, m: 6e4, h: 36e5, d: 864e5 }[m[2]] : NaN;
}

// Whether a breaker's max_open_for is what the API fills in when none is given: 10m, or open_for
// when that is longer.
function isDefaultMaxOpenFor(b) {
  return ms(b.max_open_for) === Math.max(6e5, ms(b.open_for));
}

function lines(text) {
  return text.split(/[\n,]/).map((s) => s.trim()).filter(Boolean);
}

function badge(on) {
  return h('span', { class: `badge ${on ? 'on' : 'off'}` }, t(on ? 'state.enabled' : 'state.disabled'));
}

function limitsCell(limits) {
  return limits?.length ? h('ul', { class: 'plain' }, limits.map((l) => h('li', {}, limitSummary(l)))) : h('span', { class: 'muted' }, t('limits.none'));
}

// What differs between the four kinds: where they live, how they are named, their list's columns
// and their form's fields. form(entity, lists) → {el, read()}; lists are the other kinds it refers to.
const KINDS = {
  systems: {
    kind: 'system',
    id: (x) => x.key,
    toggles: true,
    needs: ['interfaces'],
    blank: () => ({ key: '', description: '', enabled: true, auth: 'key', interfaces: [], limits: [] }),
    columns: () => [t('field.key'), t('field.description'), t('state.enabled'), t('field.permissions'), t('limits.title')],
    cells: (x) => [x.description, badge(x.enabled), x.interfaces.includes('*') ? t('system.allInterfaces') : x.interfaces.join(', '), limitsCell(x.limits)],
    form(x, lists, isNew) {
      const key = input(x.key, { disabled: !isNew });
      const description = input(x.description);
      const enabled = checkbox(x.enabled);
      const auth = select(x.auth, ['key', 'api_key', 'hmac'].map((a) => [a, t(`auth.${a}`)]));
      const perms = checkGroup('interfaces', t('field.permissions'),
        [['*', t('system.allInterfaces')], ...lists.interfaces.map((i) => [i.id, i.id])], x.interfaces);
      const limits = limitsEditor(x.limits ?? [], true);
      return {
        el: [
          h('div', { class: 'row' }, field('key', t('field.key'), key, t('hint.systemKey')), field('description', t('field.description'), description)),
          h('div', { class: 'row' }, field('auth', t('field.auth'), auth), field('enabled', t('field.enabled'), enabled)),
          perms.el,
          limits.el,
        ],
        read: () => ({
          key: textOf(key), description: description.value, enabled: enabled.checked, auth: auth.value,
          interfaces: keepOrder(x.interfaces, perms.read()), limits: limits.read(),
        }),
      };
    },
  },
  interfaces: {
    kind: 'interface',
    id: (x) => x.id,
    toggles: true,
    needs: ['upstreams'],
    blank: () => ({ id: '', description: '', methods: [], path: '', upstream: '', enabled: true, public: false, concurrency: null, concurrency_lease_timeout: null, timeout: null, limits: [] }),
    columns: () => [t('field.id'), t('field.route'), t('field.upstream'), t('state.enabled'), t('limits.title')],
    cells: (x) => [`${x.methods?.length ? x.methods.join(',') : '*'} ${x.path}`, x.upstream, badge(x.enabled), limitsCell(x.limits)],
    form(x, lists, isNew) {
      const id = input(x.id, { disabled: !isNew });
      const description = input(x.description);
      const route = input(x.path, { placeholder: '/api/orders/*' });
      // A method the API took that the usual ones leave out (PROPFIND, TRACE) is offered too, so that
      // a save keeps it rather than widen the interface to every method.
      const choices = [...METHODS, ...(x.methods ?? []).filter((m) => !METHODS.includes(m))];
      const methods = checkGroup('methods', t('field.methods'), choices.map((m) => [m, m]), x.methods ?? []);
      const upstream = select(x.upstream, [['', t('interface.chooseUpstream')], ...lists.upstreams.map((u) => [u.name, u.name])]);
      const enabled = checkbox(x.enabled);
      const isPublic = checkbox(x.public);
      const concurrency = numberInput(x.concurrency, { class: 'short', min: 1 });
      const lease = input(x.concurrency_lease_timeout, { class: 'short', placeholder: '10m' });
      const timeout = input(x.timeout, { class: 'short', placeholder: t('interface.upstreamTimeout') });
      const limits = limitsEditor(x.limits ?? [], true);
      return {
        el: [
          h('div', { class: 'row' }, field('id', t('field.id'), id), field('description', t('field.description'), description)),
          h('div', { class: 'row' }, field('path', t('field.path'), route, t('hint.path')), field('upstream', t('field.upstream'), upstream)),
          methods.el,
          h('p', { class: 'hint' }, t('hint.methods')),
          h('div', { class: 'row' },
            field('enabled', t('field.enabled'), enabled),
            field('public', t('field.public'), isPublic, t('hint.public')),
            field('concurrency', t('field.concurrency'), concurrency, t('hint.concurrency')),
            field('concurrency_lease_timeout', t('field.concurrencyLeaseTimeout'), lease, t('hint.concurrencyLeaseTimeout')),
            field('timeout', t('field.timeout'), timeout, t('hint.duration'))),
          limits.el,
        ],
        read: () => ({
          id: textOf(id), description: description.value, path: route.value.trim(), methods: keepOrder(x.methods, methods.read()),
          upstream: upstream.value, enabled: enabled.checked, public: isPublic.checked,
          concurrency: numberOf(concurrency) ?? null, concurrency_lease_timeout: textOf(lease) ?? null,
          timeout: textOf(timeout) ?? null, limits: limits.read(),
        }),
      };
    },
  },
  upstreams: {
    kind: 'upstream',
    id: (x) => x.name,
    needs: [],
    blank: () => ({ name: '', targets: [], breaker: { enabled: true } }),
    columns: () => [t('field.name'), t('field.targets'), t('field.timeout'), t('upstream.breaker')],
    cells: (x) => [x.targets.join(', '), x.timeout, breakerText(x.breaker)],
    form(x, lists, isNew) {
      const name = input(x.name, { disabled: !isNew });
      const targets = h('textarea', { rows: 3, spellcheck: 'false' });
      targets.value = (x.targets ?? []).join('\n');
      const plain = {
        connect_timeout: input(x.connect_timeout, { class: 'short', placeholder: '1s' }),
        timeout: input(x.timeout, { class: 'short', placeholder: '30s' }),
        max_idle_connections: numberInput(x.max_idle_connections, { class: 'short' }),
      };
      // Empty: the default (5xx); "none": no status counts, only connect errors and timeouts.
      const statuses = input(x.failure_statuses?.length === 0 ? 'none' : statusesText(x.failure_statuses ?? []), { placeholder: '5xx' });
      const b = x.breaker ?? {};
      const breakerEnabled = checkbox(b.enabled ?? true);
      const numbers = ['minimum_calls', 'failure_rate', 'slow_call_rate', 'consecutive_failures', 'backoff_multiplier', 'jitter_percent', 'half_open_probes'];
      const durations = ['slow_call', 'open_for', 'max_open_for'];
      const breaker = { window: input(b.window, { class: 'short', placeholder: '100' }) };
      for (const k of numbers) breaker[k] = numberInput(b[k], { class: 'short' });
      for (const k of durations) breaker[k] = input(b[k], { class: 'short' });
      return {
        el: [
          h('div', { class: 'row' }, field('name', t('field.name'), name), field('targets', t('field.targets'), targets, t('hint.targets'))),
          h('div', { class: 'row' },
            Object.entries(plain).map(([k, el]) => field(k, t(`field.${k}`), el, k.endsWith('timeout') ? t('hint.duration') : null)),
            field('failure_statuses', t('field.failure_statuses'), statuses, t('hint.statuses'))),
          h('fieldset', { dataset: { fieldBox: 'breaker' } }, h('legend', {}, t('upstream.breaker')),
            field('breaker.enabled', t('field.enabled'), breakerEnabled),
            h('div', { class: 'params' }, Object.entries(breaker).map(([k, el]) => field(`breaker.${k}`, t(`field.${k}`), el))),
            h('p', { class: 'field-error', dataset: { errorFor: 'breaker' }, hidden: true })),
        ],
        read() {
          const out = { name: textOf(name), targets: lines(targets.value) };
          for (const [k, el] of Object.entries(plain)) {
            const v = k === 'max_idle_connections' ? numberOf(el) : textOf(el);
            if (v !== undefined) out[k] = v;
          }
          const s = lines(statuses.value);
          if (s.length === 1 && s[0].toLowerCase() === 'none') out.failure_statuses = [];
          else if (s.length) out.failure_statuses = s.map(numberOrText);
          out.breaker = { enabled: breakerEnabled.checked, force: b.force ?? 'none' };
          for (const [k, el] of Object.entries(breaker)) {
            const v = k === 'window' ? textOf(el) : numbers.includes(k) ? numberOf(el) : textOf(el);
            // max_open_for as the API showed it, when that is its default (10m, or open_for when
            // longer), stays the default: sent, it would be fixed, and a longer open_for refused.
            // (Equal to a shorter open_for it was set so: no growth.)
            if (k === 'max_open_for' && v === b.max_open_for && isDefaultMaxOpenFor(b)) continue;
            if (v !== undefined) out.breaker[k] = k === 'window' ? numberOrText(v) : v;
          }
          return out;
        },
      };
    },
  },
  grants: {
    kind: 'grant',
    // Shown with an arrow: ids may hold '/', and "a/b" → "c" is not "a" → "b/c".
    id: (x) => `${x.system} → ${x.interface}`,
    parts: 2, // the address names a grant by its system and its interface
    route: (x) => path(x.system, x.interface),
    needs: ['systems', 'interfaces'],
    blank: () => ({ system: '', interface: '', limits: [] }),
    columns: () => [t('field.grant'), t('limits.title')],
    cells: (x) => [limitsCell(x.limits)],
    form(x, lists, isNew) {
      const system = select(x.system, [['', t('grant.chooseSystem')], ...lists.systems.map((s) => [s.key, s.key])], { disabled: !isNew });
      const iface = select(x.interface, [['', t('grant.chooseInterface')], ...lists.interfaces.map((i) => [i.id, i.id])], { disabled: !isNew });
      const limits = limitsEditor(x.limits ?? [], true);
      return {
        el: [
          h('p', { class: 'hint' }, t('hint.grant')),
          h('div', { class: 'row' }, field('system', t('field.system'), system), field('interface', t('field.interface'), iface)),
          limits.el,
        ],
        read: () => ({ system: system.value, interface: iface.value, limits: limits.read() }),
      };
    },
  },
};

const routeOf = (spec, x) => (spec.route ? spec.route(x) : path(spec.id(x)));

// The form being edited when the language changed: the page is drawn again in the other language
// with these values, not the stored ones, so no edit is lost ({at: the address, entity and etag as
// read, values: the form's}).
let draft = null;

export async function render(view, ctx) {
  const spec = KINDS[ctx.page];
  if (ctx.params.length || ctx.query.get('new')) return edit(view, ctx, spec);
  return list(view, ctx, spec);
}

// Whether this page may change the configuration: an admin's, on an instance that follows no primary.
const edits = (ctx) => ctx.admin && !ctx.follows;

async function list(view, ctx, spec) {
  const msg = messages();
  const title = t(`nav.${ctx.page}`);
  const create = edits(ctx) ? h('a', { class: 'button', href: `#/${ctx.page}?new=1` }, t(`new.${spec.kind}`)) : null;
  view.append(pageHead(title, create), msg.el);
  if (ctx.follows) msg.say('info', t('edit.follower', { primary: ctx.follows }));
  takeFlash(msg);
  const box = h('section', { class: 'card' }, loading());
  view.append(box);
  let items;
  try {
    items = (await api('GET', ctx.page)).data.items;
  } catch (error) {
    msg.say('error', error.message);
    box.remove();
    return;
  }
  if (!items.length) {
    replace(box, h('p', { class: 'muted' }, t(`empty.${ctx.page}`)));
    return;
  }
  const columns = [...spec.columns()];
  if (edits(ctx) && spec.toggles) columns.push(t('list.actions'));
  const tbl = table(columns, { 'aria-label': title });
  const texts = new Map();  // row → what the filter searches: its name and cells, not its buttons
  for (const x of items) {
    const name = spec.id(x);
    const row = h('tr', { dataset: { id: name } },
      h('th', { scope: 'row' }, ident(name, `#/${ctx.page}/${routeOf(spec, x)}`)),
      spec.cells(x).map((c) => h('td', {}, c)));
    texts.set(row, row.textContent.toLowerCase());
    if (edits(ctx) && spec.toggles) {
      const verb = x.enabled ? 'disable' : 'enable';
      row.append(h('td', { class: 'actions-cell' }, h('button', {
        type: 'button',
        class: 'secondary small',
        'aria-label': `${t(`list.${verb}`)} ${name}`,
        onclick: () => toggle(ctx, spec, x, msg),
      }, t(`list.${verb}`))));
    }
    tbl.body.append(row);
  }
  replace(box, filterBox(ctx, title, texts), tbl.el);
}

// A search box over a list's rows (its text kept in the address, #/systems?q=crm, so that a reload,
// a link or the list shown again after a change keeps it), and how many rows it leaves.
function filterBox(ctx, title, texts) {
  const input = h('input', {
    type: 'search', class: 'filter', value: ctx.query.get('q') ?? '',
    placeholder: t('list.filter'), 'aria-label': t('list.filterLabel', { list: title }),
  });
  const count = h('p', { class: 'muted filter-count', role: 'status' });
  const apply = () => {
    const q = input.value.trim();
    const wanted = q.toLowerCase();
    let shown = 0;
    for (const [row, text] of texts) {
      row.hidden = !text.includes(wanted);
      if (!row.hidden) shown += 1;
    }
    if (!q) count.textContent = '';
    else if (!shown) count.textContent = t('list.noMatch', { q });
    else count.textContent = t('list.shown', { shown: number(shown), total: number(texts.size) });
    history.replaceState(null, '', `#/${ctx.page}${q ? `?q=${encodeURIComponent(q)}` : ''}`);
  };
  input.addEventListener('input', apply);
  if (input.value) apply();
  return h('div', { class: 'filter-bar' }, input, count);
}

// Enables or disables one entity, as its button says (the list's state flipped): read it with its
// ETag and write it back so, unless it is so already (someone else did it since the list was read).
async function toggle(ctx, spec, x, msg) {
  const name = spec.id(x);
  const enabled = !x.enabled;
  try {
    const current = await api('GET', `${ctx.page}/${routeOf(spec, x)}`);
    if (current.data.enabled !== enabled) {
      await api('PUT', `${ctx.page}/${routeOf(spec, x)}`, { body: { ...current.data, enabled }, ifMatch: current.etag });
    }
    flash(t(enabled ? 'list.enabledOne' : 'list.disabledOne', { name }));
    ctx.navigate(location.hash);  // the list again, filtered as it was
  } catch (error) {
    msg.say('error', error.message);
  }
}

async function edit(view, ctx, spec) {
  const msg = messages();
  const here = location.hash;
  const isNew = ctx.params.length === 0;
  const listTitle = t(`nav.${ctx.page}`);
  const back = h('a', { href: `#/${ctx.page}` }, t('edit.back', { list: listTitle }));
  const heading = isNew ? t(`new.${spec.kind}`) : `${t(`kind.${spec.kind}`)} ${ctx.params.join('/')}`;
  view.append(h('p', {}, back), pageHead(heading), msg.el);
  takeFlash(msg);
  // An address with more parts than the kind's ids have (#/systems/crm/credentials) names nothing.
  if (!isNew && ctx.params.length !== (spec.parts ?? 1)) {
    msg.say('error', t('edit.notFound'));
    return null;
  }
  const box = h('div', {}, loading());
  view.append(box);

  const kept = ctx.keep && draft?.at === here ? draft : null;
  draft = null;
  let entity;
  let etag = null;
  const lists = {};
  try {
    const [one, ...others] = await Promise.all([
      kept ? { data: kept.entity, etag: kept.etag }
        : isNew ? Promise.resolve({ data: spec.blank(), etag: null }) : api('GET', `${ctx.page}/${path(...ctx.params)}`),
      ...spec.needs.map((kind) => api('GET', kind)),
    ]);
    entity = one.data;
    etag = one.etag;
    spec.needs.forEach((kind, i) => { lists[kind] = others[i].data.items; });
  } catch (error) {
    box.remove();
    msg.say('error', error instanceof ApiError && error.status === 404 ? t('edit.notFound') : error.message);
    return null;
  }

  const parts = spec.form(kept ? kept.values : entity, lists, isNew);
  const keep = () => { draft = { at: here, entity, etag, values: parts.read() }; };
  const save = h('button', { type: 'submit' }, t(isNew ? 'edit.create' : 'edit.save'));
  const remove = !isNew ? h('button', { type: 'button', class: 'secondary danger' }, t('edit.delete')) : null;
  const form = h('form', { class: 'card edit', novalidate: true },
    parts.el,
    edits(ctx) ? h('div', { class: 'actions' }, save, remove) : null);
  replace(box, form);
  if (spec.kind === 'system' && !isNew) box.append(credentials(entity.key, edits(ctx), adoptCredentials));

  // A credential made or deleted here changes the system's ETag: take the new one when nothing but
  // the credentials changed, so saving the form is not refused as stale; someone else's edit still is.
  async function adoptCredentials() {
    const fresh = await api('GET', `${ctx.page}/${path(...ctx.params)}`);
    const rest = (x) => JSON.stringify({ ...x, credentials: undefined });
    if (rest(fresh.data) === rest(entity)) {
      entity = fresh.data;
      etag = fresh.etag;
    }
  }

  if (!edits(ctx)) {
    msg.say('info', ctx.follows ? t('edit.follower', { primary: ctx.follows }) : t('edit.readOnly'));
    for (const el of form.querySelectorAll('input, select, textarea, fieldset')) el.disabled = true;
    for (const el of form.querySelectorAll('button')) el.remove();
    return null;
  }

  const name = () => spec.id(entity);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    clearProblems(form);
    msg.clear();
    const bad = badNumbers(form);
    if (bad.length) {
      refused(bad);
      return;
    }
    const body = parts.read();
    save.disabled = true;
    try {
      if (isNew) {
        const created = await api('POST', ctx.page, { body });
        entity = created.data;
        flash(t('edit.created', { name: name() }));
        ctx.navigate(`#/${ctx.page}/${routeOf(spec, entity)}`);
      } else {
        const saved = await api('PUT', `${ctx.page}/${path(...ctx.params)}`, { body, ifMatch: etag });
        entity = saved.data;
        etag = saved.etag;
        msg.tell('ok', t('edit.saved', { name: name() }));
      }
    } catch (error) {
      failed(error);
    } finally {
      save.disabled = false;
    }
  });
  remove?.addEventListener('click', async () => {
    // eslint-disable-next-line no-alert
    if (!window.confirm(t(spec.toggles ? 'edit.confirmDeleteGrants' : 'edit.confirmDelete', { name: name() }))) return;
    msg.clear();
    try {
      await api('DELETE', `${ctx.page}/${path(...ctx.params)}`, { ifMatch: etag });
      flash(t('edit.deleted', { name: name() }));
      ctx.navigate(`#/${ctx.page}`);
    } catch (error) {
      failed(error);
    }
  });

  // Problems at their fields, the first of which takes the focus (the rest listed above the form).
  function refused(problems) {
    const rest = showProblems(form, problems);
    const marked = rest.length < problems.length;
    const say = marked ? msg.say : msg.tell;
    say('error', t(marked ? 'edit.refused' : 'edit.refusedElsewhere'), rest.length
      ? h('ul', {}, rest.map((p) => h('li', {}, `${p.path ?? p.field}: ${p.message}`)))
      : null);
  }

  // A refused change: problems at their fields; a stale one: said, with the way to see the other
  // change; nothing on screen is lost either way.
  function failed(error) {
    if (!(error instanceof ApiError)) {
      msg.tell('error', error.message);
    } else if (error.status === 412) {
      msg.tell('error', t('edit.stale'), ' ', t('edit.staleHelp'),
        h('button', { type: 'button', class: 'secondary small', onclick: () => ctx.navigate(location.hash) }, t('edit.reload')));
    } else if (error.problems.length) {
      refused(error.problems);
    } else {
      msg.tell('error', error.message);
    }
  }
  return keep;
}
