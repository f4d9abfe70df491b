// The console's shell: sign-in state, the navigation, the language, and a hash router that gives each
// page its own module. A page is render(main, ctx) → optional cleanup (stops its timers).
import {
  api, ApiError, onUnauthorized, setToken, token,
} from './api.js';
import { h, replace } from './dom.js';
import { language, setLanguage, t } from './i18n.js';
import { messages, pageHead } from './page.js';
import * as audit from './pages/audit.js';
import * as breakers from './pages/breakers.js';
import * as entities from './pages/entities.js';
import * as inspector from './pages/inspector.js';
import * as overview from './pages/overview.js';
import * as signin from './pages/signin.js';

const pages = [
  { id: 'overview', render: overview.render },
  { id: 'systems', render: entities.render },
  { id: 'interfaces', render: entities.render },
  { id: 'upstreams', render: entities.render },
  { id: 'grants', render: entities.render },
  { id: 'limits', render: inspector.render },
  { id: 'breakers', render: breakers.render },
  { id: 'audit', render: audit.render },
];

const main = document.getElementById('main');
let principal = null; // {id, name, role} from /whoami, and follows: the primary when this instance follows one
let cleanup = null;
let signInMessage = '';

// #/systems/crm?x=1 → {page: 'systems', params: ['crm'], query: URLSearchParams}; params is null when
// a part is no percent-encoding (#/systems/%).
function route() {
  const [path, query = ''] = location.hash.replace(/^#\/?/, '').split('?');
  const [page = 'overview', ...parts] = path.split('/').filter(Boolean);
  let params;
  try {
    params = parts.map(decodeURIComponent);
  } catch {
    params = null;
  }
  return { page, params, query: new URLSearchParams(query) };
}

export function navigate(hash) {
  if (location.hash === hash) show({ focus: true });
  else location.hash = hash;
}

function renderShell() {
  document.documentElement.lang = language();
  document.title = t('app.title');
  document.getElementById('skip-link').textContent = t('app.skip');
  document.getElementById('lang-label').textContent = t('app.language');
  document.getElementById('lang').value = language();
  document.getElementById('nav').setAttribute('aria-label', t('app.nav'));
  const signOut = document.getElementById('sign-out');
  signOut.textContent = t('app.signOut');
  signOut.hidden = !principal;
  const who = document.getElementById('who');
  replace(who, principal ? [h('span', {}, principal.name), ' ', h('span', { class: `role role-${principal.role}` }, t(`role.${principal.role}`))] : []);
  const current = route().page;
  replace(document.getElementById('nav'), principal
    ? h('ul', {}, pages.map((p) => h('li', {}, h('a', {
      href: `#/${p.id}`,
      'aria-current': p.id === current ? 'page' : false,
    }, t(`nav.${p.id}`)))))
    : []);
}

let generation = 0; // which call of show() is the latest: an older one's page is dropped

// Draws the page the address names. focus: move the keyboard's focus to its heading (after a
// navigation, not after a change of language); keep: a form keeps the values being edited (after a
// change of language).
async function show({ focus = false, keep = false } = {}) {
  const mine = ++generation;
  if (cleanup) cleanup();
  cleanup = null;
  renderShell();
  const view = h('div', { class: 'page' });
  replace(main, view);
  if (!principal) {
    signin.render(view, { message: signInMessage, signedIn });
    return;
  }
  const r = route();
  const page = pages.find((p) => p.id === r.page);
  if (!page) {
    navigate('#/overview');
    return;
  }
  if (!r.params) {
    const msg = messages();
    view.append(pageHead(t('app.notFound')), msg.el);
    msg.say('error', t('app.noSuchPage'));
    return;
  }
  const done = (await page.render(view, {
    ...r, admin: principal.role === 'admin', follows: principal.follows, navigate, keep,
  })) ?? null;
  if (mine !== generation) {
    done?.();
    return;
  }
  cleanup = done;
  const heading = view.querySelector('h1');
  if (focus && heading && !view.contains(document.activeElement)) {
    heading.setAttribute('tabindex', '-1');
    heading.focus({ preventScroll: true });
  }
}

// Whether this instance follows a primary (its /stats say so): it refuses changes to the
// configuration, so the pages offer none. '' when it does not, or when that cannot be told.
async function followed() {
  try {
    const config = (await api('GET', 'stats')).data.config ?? {};
    return config.source === 'primary' ? config.primary || '?' : '';
  } catch {
    return '';
  }
}

async function signedIn(who) {
  principal = { ...who, follows: await followed() };
  signInMessage = '';
  if (!location.hash || location.hash === '#/') location.hash = '#/overview';
  else show({ focus: true });
}

function signOut(message = '') {
  setToken('');
  principal = null;
  signInMessage = message;
  show();
}

onUnauthorized(() => signOut(t('signin.expired')));
document.getElementById('sign-out').addEventListener('click', () => signOut());
// The skip link moves the focus without touching the address, which the router owns.
document.getElementById('skip-link').addEventListener('click', (e) => {
  e.preventDefault();
  main.focus();
});
document.getElementById('lang').addEventListener('change', (e) => {
  setLanguage(e.target.value);
  show({ keep: true });
});
window.addEventListener('hashchange', () => show({ focus: true }));

// A token kept from earlier in this tab signs in again on reload.
(async () => {
  if (token()) {
    try {
      principal = (await api('GET', 'whoami')).data;
      principal.follows = await followed();
    } catch (error) {
      // A token refused is forgotten; one that could not be checked (no answer) is kept for the
      // next sign-in, and the page says why it is asked for.
      if (!(error instanceof ApiError) || !error.unreachable) setToken('');
      signInMessage = error instanceof ApiError && error.unreachable ? error.message : '';
    }
  }
  show();
})();
