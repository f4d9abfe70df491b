// Pieces every page uses: its heading, one message area (a status, or an alert for errors), a
// message kept across a navigation ("shop was created."), tables, rows updated in place (so a live
// page does not take the keyboard's focus away), and polling that stops with the page.
import { h, replace } from './dom.js';
import { t } from './i18n.js';

export function pageHead(title, ...actions) {
  return h('div', { class: 'page-head' }, h('h1', {}, title), actions.length ? h('div', { class: 'actions' }, actions) : null);
}

// The page's message area: say('ok' | 'info' | 'error', text, ...more). Errors are alerts (read out
// at once), the rest a polite status. One area per page, so one alert at a time. tell() says it and
// moves the focus to it, which scrolls it into view: the answer to a button at the foot of a long
// form (a button disabled while it works, so its focus is lost) is seen and read where it is.
export function messages() {
  const el = h('div', { class: 'messages' });
  const say = (kind, text, ...more) => {
    const notice = h('div', { class: `notice ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, h('span', {}, text), more);
    replace(el, notice);
    return notice;
  };
  return {
    el,
    say,
    tell(kind, text, ...more) {
      const notice = say(kind, text, ...more);
      notice.tabIndex = -1;
      notice.focus();
      return notice;
    },
    clear() {
      el.replaceChildren();
    },
  };
}

let flashed = null;
// A message for the next page drawn (after a navigation).
export function flash(text) {
  flashed = text;
}
export function takeFlash(msg) {
  if (flashed) msg.say('ok', flashed);
  flashed = null;
}

// An id in a table or a list: cut with an ellipsis when it is long, the whole of it in its title, so
// one long key does not push the other columns off the screen. With href, a link.
export function ident(text, href) {
  return h(href ? 'a' : 'span', { class: 'ident', href, title: text }, text);
}

// A table in a scrolling wrapper: columns = [label or {label, num: true}].
export function table(columns, attrs = {}) {
  const body = h('tbody');
  const el = h('div', { class: 'table-wrap' }, h('table', { class: 'rows', ...attrs },
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col', class: c.num ? 'num' : null }, c.label ?? c)))),
    body));
  return { el, body };
}

// Brings tbody's rows in line with items, keyed by key(item): a row is made once by create(item)
// (a <tr>) and given each new item by update(row, item); rows of items gone are removed.
export function syncRows(body, items, key, create, update) {
  const existing = new Map([...body.children].map((row) => [row.dataset.key, row]));
  let at = body.firstElementChild;
  for (const item of items) {
    const k = key(item);
    let row = existing.get(k);
    existing.delete(k);
    if (!row) {
      row = create(item);
      row.dataset.key = k;
    }
    update(row, item);
    if (row !== at) body.insertBefore(row, at);
    else at = at.nextElementSibling;
  }
  for (const row of existing.values()) row.remove();
}

// Calls fn now and then every ms after each call ends, until the returned stop(); an error of fn
// goes to onError and the polling goes on (the next answer may be fine).
export function poll(fn, ms, onError = () => {}) {
  let timer = null;
  let stopped = false;
  const tick = async () => {
    try {
      await fn();
    } catch (error) {
      if (!stopped) onError(error);
    } finally {
      if (!stopped) timer = setTimeout(tick, ms);
    }
  };
  tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

export function loading() {
  return h('p', { class: 'muted' }, t('app.loading'));
}
