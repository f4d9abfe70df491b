// Form pieces shared by the editing pages: labelled fields that know their place in the request body
// (data-field, the path the API's problems name, like "limits[0].period"), the limits editor with
// every algorithm's parameters, and the display of problems at their fields.
import { h, replace, uid } from './dom.js';
import { t } from './i18n.js';

// A labelled control with a slot for its error: field('limits[0].period', t('field.period'), input).
export function field(path, label, control, hint) {
  const id = control.id || uid();
  control.id = id;
  const errorId = `${id}-error`;
  const hintId = hint ? `${id}-hint` : null;
  control.dataset.field = path;
  control.setAttribute('aria-describedby', [hintId, errorId].filter(Boolean).join(' '));
  const isCheck = control.type === 'checkbox';
  return h('div', { class: `field${isCheck ? ' check' : ''}`, dataset: { fieldBox: path } },
    isCheck ? [control, h('label', { for: id }, label)] : [h('label', { for: id }, label), control],
    hint ? h('p', { id: hintId, class: 'hint' }, hint) : null,
    h('p', { id: errorId, class: 'field-error', dataset: { errorFor: path }, hidden: true }));
}

export function input(value, attrs = {}) {
  return h('input', { type: 'text', value: value ?? '', autocomplete: 'off', spellcheck: 'false', ...attrs });
}

// What numberOf gives for a field whose text is no number ("5e"). A redraw (another algorithm, a
// limit added or removed, the language switched) can only show such a field empty, as the browser
// keeps no text it cannot read as a number: numberInput marks it, so that Save still refuses it
// rather than drop the setting.
export const NOT_A_NUMBER = Symbol('not a number');

export function numberInput(value, attrs = {}) {
  const bad = value === NOT_A_NUMBER;
  const el = h('input', { type: 'number', inputmode: 'numeric', value: bad ? '' : value ?? '', min: 0, step: 1, ...attrs });
  if (bad) {
    el.dataset.bad = 'true';
    el.addEventListener('input', () => { delete el.dataset.bad; }, { once: true });
  }
  return el;
}

export function checkbox(checked, attrs = {}) {
  return h('input', { type: 'checkbox', checked: Boolean(checked), ...attrs });
}

export function select(value, options, attrs = {}) {
  return h('select', attrs, options.map(([v, label]) => h('option', { value: v, selected: v === value }, label)));
}

// A group of checkboxes with one error slot: the values checked.
export function checkGroup(path, legend, options, checked) {
  const boxes = options.map(([value, label]) => {
    const id = uid();
    return { value, el: h('span', { class: 'check' }, h('input', { type: 'checkbox', id, value, checked: checked.includes(value) }), h('label', { for: id }, label)) };
  });
  const errorId = uid('err');
  const set = h('fieldset', { class: 'group', dataset: { field: path, fieldBox: path }, 'aria-describedby': errorId },
    h('legend', {}, legend),
    h('div', { class: 'checks' }, boxes.map((b) => b.el)),
    h('p', { id: errorId, class: 'field-error', dataset: { errorFor: path }, hidden: true }));
  return {
    el: set,
    read: () => boxes.filter((b) => b.el.querySelector('input').checked).map((b) => b.value),
  };
}

// The number fields whose text is no number ("5e", "20-"): such a field's value is "", as an empty
// one's, so without this check the setting would be dropped and the save reported as done.
// → problems as the API gives them ({field, message}), one per such field.
export function badNumbers(form) {
  return [...form.querySelectorAll('input[type="number"]')].filter((el) => !el.disabled && (el.validity.badInput || el.dataset.bad))
    .map((el) => ({ field: el.dataset.field, message: t('problem.notNumber') }));
}

// Reads an input as a number when it holds one, as itself otherwise (the API says what is wrong);
// NOT_A_NUMBER for text the browser cannot read as a number.
export function numberOf(el) {
  if (el.validity?.badInput || el.dataset?.bad) return NOT_A_NUMBER;
  const v = el.value.trim();
  if (v === '') return undefined;
  return /^-?\d+$/.test(v) ? Number(v) : v;
}

export function textOf(el) {
  const v = el.value.trim();
  return v === '' ? undefined : v;
}

// --- limits ------------------------------------------------------------------------------------

export const ALGORITHMS = ['token_bucket', 'gcra', 'sliding_log', 'sliding_window', 'fixed_window', 'concurrency'];

// The parameters of each algorithm; token_bucket refills smoothly (rate per) or at intervals.
const PARAMS = {
  token_bucket: { smooth: ['capacity', 'rate', 'per'], interval: ['capacity', 'refill_tokens', 'refill_interval'] },
  gcra: ['limit', 'period', 'burst'],
  sliding_log: ['limit', 'period'],
  sliding_window: ['limit', 'period'],
  fixed_window: ['limit', 'period'],
  concurrency: ['limit', 'lease_timeout'],
};
const DURATIONS = new Set(['per', 'refill_interval', 'period', 'lease_timeout']);
const COMMON = ['name', 'algorithm', 'key_by', 'on_store_failure', 'shadow'];

function paramsOf(limit) {
  const p = PARAMS[limit.algorithm];
  if (!p) return [];
  if (Array.isArray(p)) return p;
  return limit.refill_tokens !== undefined || limit.refill_interval !== undefined ? p.interval : p.smooth;
}

// One limit's fieldset; values kept in `limit` (an object this row owns and updates).
function limitRow(limit, index, prefix, onRemove, editable) {
  const at = `${prefix}[${index}]`;
  const name = input(limit.name, { placeholder: t('limits.unnamed') });
  const algorithm = select(limit.algorithm, ALGORITHMS.map((a) => [a, t(`algorithm.${a}`)]));
  const keyBy = String(limit.key_by ?? 'owner');
  const keyKind = keyBy.includes(':') ? keyBy.slice(0, keyBy.indexOf(':')) : keyBy;
  const keyKindEl = select(keyKind, ['owner', 'client_ip', 'header', 'query'].map((k) => [k, t(`keyBy.${k}`)]));
  const keyName = input(keyBy.includes(':') ? keyBy.slice(keyBy.indexOf(':') + 1) : '', { placeholder: 'X-User-Id' });
  const keyNameField = field(`${at}.key_name`, t('field.keyName'), keyName);
  // Every value the configuration takes (docs/configuration.md), and one it does not know kept as it
  // is: a save never changes what the form was not asked to change.
  const failures = ['allow', 'deny', 'local'];
  const failure = limit.on_store_failure ?? 'allow';
  const onFailure = select(failure, [...failures, ...(failures.includes(failure) ? [] : [failure])]
    .map((f) => [f, failures.includes(f) ? t(`onFailure.${f}`) : f]));
  const shadow = checkbox(limit.shadow);
  const params = h('div', { class: 'params' });
  const refill = select(paramsOf(limit).includes('refill_tokens') ? 'interval' : 'smooth',
    [['smooth', t('refill.smooth')], ['interval', t('refill.interval')]]);
  const refillField = field(`${at}.refill`, t('field.refill'), refill);
  const paramInputs = {};

  function drawParams() {
    params.replaceChildren();
    for (const k of Object.keys(paramInputs)) delete paramInputs[k];
    refillField.hidden = limit.algorithm !== 'token_bucket';
    for (const p of paramsOf(limit)) {
      const el = DURATIONS.has(p) ? input(limit[p], { placeholder: '1s', class: 'short' }) : numberInput(limit[p], { class: 'short' });
      paramInputs[p] = el;
      params.append(field(`${at}.${p}`, t(`field.${p}`), el, DURATIONS.has(p) ? t('hint.duration') : null));
    }
  }
  function keep() {
    for (const [p, el] of Object.entries(paramInputs)) limit[p] = DURATIONS.has(p) ? textOf(el) : numberOf(el);
  }
  algorithm.addEventListener('change', () => {
    keep();
    const wanted = new Set(paramsOf({ ...limit, algorithm: algorithm.value }));
    for (const p of Object.keys(limit)) if (!COMMON.includes(p) && !wanted.has(p)) delete limit[p];
    limit.algorithm = algorithm.value;
    drawParams();
  });
  refill.addEventListener('change', () => {
    keep();
    const [from, to] = refill.value === 'interval' ? [['rate', 'per'], ['refill_tokens', 'refill_interval']] : [['refill_tokens', 'refill_interval'], ['rate', 'per']];
    limit[to[0]] = limit[from[0]] ?? limit[to[0]] ?? '';
    limit[to[1]] = limit[from[1]] ?? limit[to[1]] ?? '';
    delete limit[from[0]];
    delete limit[from[1]];
    drawParams();
  });
  const showKeyName = () => { keyNameField.hidden = !['header', 'query'].includes(keyKindEl.value); };
  keyKindEl.addEventListener('change', showKeyName);
  drawParams();
  showKeyName();

  const row = h('fieldset', { class: 'limit', dataset: { fieldBox: at }, disabled: !editable },
    h('legend', {}, t('limits.legend', { n: index + 1 })),
    h('div', { class: 'row' },
      field(`${at}.name`, t('field.name'), name),
      field(`${at}.algorithm`, t('field.algorithm'), algorithm),
      refillField),
    params,
    h('div', { class: 'row' },
      field(`${at}.key_by`, t('field.keyBy'), keyKindEl),
      keyNameField,
      field(`${at}.on_store_failure`, t('field.onStoreFailure'), onFailure),
      field(`${at}.shadow`, t('field.shadow'), shadow)),
    h('p', { class: 'field-error', dataset: { errorFor: at }, hidden: true }),
    editable ? h('div', { class: 'actions' }, h('button', { type: 'button', class: 'secondary danger', onclick: () => onRemove(index) }, t('limits.remove', { n: index + 1 }))) : null);

  return {
    el: row,
    read() {
      keep();
      const out = {};
      const n = textOf(name);
      if (n) out.name = n;
      out.algorithm = algorithm.value;
      for (const p of paramsOf(limit)) if (limit[p] !== undefined && limit[p] !== '') out[p] = limit[p];
      const kind = keyKindEl.value;
      out.key_by = kind === 'header' || kind === 'query' ? `${kind}:${keyName.value.trim()}` : kind;
      out.on_store_failure = onFailure.value;
      out.shadow = shadow.checked;
      Object.assign(limit, out);
      return out;
    },
  };
}

// Every limit of an owner, editable: el, and read() → the limits as the API takes them.
export function limitsEditor(limits, editable, prefix = 'limits') {
  const items = limits.map((l) => ({ ...l }));
  const list = h('div', { class: 'limits' });
  let rows = [];
  const errorSlot = h('p', { class: 'field-error', dataset: { errorFor: prefix }, hidden: true });
  function draw() {
    rows = items.map((l, i) => limitRow(l, i, prefix, remove, editable));
    replace(list, rows.length ? rows.map((r) => r.el) : h('p', { class: 'muted' }, t('limits.none')));
  }
  function readAll() {
    return rows.map((r) => r.read());
  }
  function remove(index) {
    readAll();
    items.splice(index, 1);
    draw();
    (list.querySelector('fieldset:last-of-type select, fieldset:last-of-type input') ?? add).focus();
  }
  const add = h('button', { type: 'button', class: 'secondary' }, t('limits.add'));
  add.addEventListener('click', () => {
    readAll();
    items.push({ algorithm: 'fixed_window', limit: 100, period: '1m', key_by: 'owner', on_store_failure: 'allow', shadow: false });
    draw();
    list.querySelector('fieldset:last-of-type input')?.focus();
  });
  draw();
  return {
    el: h('section', { class: 'limits-editor', dataset: { fieldBox: prefix } }, h('h2', {}, t('limits.title')), errorSlot, list, editable ? add : null),
    read: readAll,
  };
}

// --- problems ----------------------------------------------------------------------------------

export function clearProblems(form) {
  for (const el of form.querySelectorAll('.field-error')) {
    el.hidden = true;
    el.textContent = '';
  }
  for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
}

// The error slot for a problem's field, or the nearest enclosing one ("limits[0].x" → "limits[0]" →
// "limits"); null when the form has none.
function slotFor(form, path) {
  for (let at = path; at;) {
    const slot = form.querySelector(`[data-error-for="${CSS.escape(at)}"]`);
    if (slot) return { slot, at };
    const shorter = at.replace(/(\.[^.[\]]*|\[\d+\])$/, '');
    if (shorter === at) break;
    at = shorter;
  }
  return null;
}

// Shows each problem at its field and focuses the first; returns those that belong to no field of
// this form (a problem elsewhere in the configuration).
export function showProblems(form, problems) {
  clearProblems(form);
  const rest = [];
  let first = null;
  for (const p of problems) {
    const found = typeof p.field === 'string' ? slotFor(form, p.field) : null;
    if (!found) {
      rest.push(p);
      continue;
    }
    found.slot.hidden = false;
    // A problem with one entry of a list field (targets[1]) says which: "#2: ...".
    const entry = p.field.slice(found.at.length).match(/^\[(\d+)\]/);
    const text = entry ? `#${Number(entry[1]) + 1}: ${p.message}` : p.message;
    found.slot.append(h('span', {}, text)); // one line each, when a field has several
    const control = form.querySelector(`[data-field="${CSS.escape(found.at)}"]`);
    control?.setAttribute('aria-invalid', 'true');
    first ??= control?.matches('input, select, textarea') ? control : control?.querySelector('input, select');
  }
  first?.focus();
  return rest;
}
