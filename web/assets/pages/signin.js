// The sign-in page: a token of either role, checked with /whoami before it is kept.
import { api, ApiError, setToken } from '../api.js';
import { h } from '../dom.js';
import { t } from '../i18n.js';

export function render(view, { message, signedIn }) {
  const tokenInput = h('input', {
    id: 'token', type: 'password', autocomplete: 'off', spellcheck: 'false', required: true,
    'aria-describedby': 'token-hint',
  });
  const alert = h('p', { class: 'alert', role: 'alert', hidden: !message }, message);
  const submit = h('button', { type: 'submit' }, t('signin.submit'));
  function fail(text) {
    alert.textContent = text;
    alert.hidden = false;
    tokenInput.setAttribute('aria-invalid', 'true');
    tokenInput.focus();
    tokenInput.select();
  }
  const form = h('form', { class: 'card signin', novalidate: true },
    h('h1', {}, t('signin.title')),
    h('p', { id: 'token-hint', class: 'hint' }, t('signin.hint'), ' ', h('code', {}, 'sluice token create --role admin')),
    alert,
    h('div', { class: 'field' }, h('label', { for: 'token' }, t('signin.token')), tokenInput),
    h('div', { class: 'actions' }, submit));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const value = tokenInput.value.trim();
    if (!value) {
      fail(t('signin.empty'));
      return;
    }
    // A header carries no such character: the browser would refuse the request in its own words.
    if (/[^\x21-\x7e]/.test(value)) {
      fail(t('signin.badCharacters'));
      return;
    }
    submit.disabled = true;
    try {
      const who = (await api('GET', 'whoami', { as: value })).data;
      setToken(value);
      await signedIn(who);
    } catch (error) {
      fail(error instanceof ApiError && error.status === 401 ? t('signin.invalid') : error.message);
    } finally {
      submit.disabled = false;
    }
  });
  view.append(form);
  tokenInput.focus();
}
