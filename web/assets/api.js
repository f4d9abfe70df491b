// The one way the console talks to the admin API: the bearer token, JSON bodies, ETags (If-Match on
// writes) and the error shape {code, reason, msg, problems}. docs/admin-api.md describes the routes.
import { t } from './i18n.js';

const TOKEN_KEY = 'sluice.token';

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.msg || `HTTP ${status}`);
    this.status = status;
    this.reason = body?.reason || 'http_error';
    this.problems = Array.isArray(body?.problems) ? body.problems : [];
  }

  // No answer came: the gateway is down or cannot be reached (status 0).
  get unreachable() {
    return this.status === 0;
  }
}

let unauthorized = () => {};
// Called when a request answers 401: the token was revoked or is wrong.
export function onUnauthorized(handler) {
  unauthorized = handler;
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// A route from its parts, each percent-encoded: path('grants', 'crm', 'orders').
export function path(...parts) {
  return parts.map(encodeURIComponent).join('/');
}

// api('GET', 'systems') → {data, etag, status}. Options: body (sent as JSON), ifMatch (an ETag),
// query (an object of parameters; one undefined or null is left out, an empty string is sent
// empty), as (a token to try instead of the session's). Throws ApiError for any status but 2xx.
export async function api(method, route, { body, ifMatch, query, as } = {}) {
  const headers = { Accept: 'application/json' };
  const bearer = as ?? token();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (ifMatch) headers['If-Match'] = ifMatch;
  let url = `/admin/v1/${route}`;
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined && v !== null) params.set(k, v);
  if ([...params].length) url += `?${params}`;
  let res;
  try {
    res = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
    });
  } catch {
    // The browser's own words for it ("Failed to fetch") say nothing of what to do, in English only.
    throw new ApiError(0, { reason: 'unreachable', msg: t('app.unreachable') });
  }
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { msg: text };
  }
  if (!res.ok) {
    const error = new ApiError(res.status, data);
    if (res.status === 401 && bearer && as === undefined) unauthorized(error);
    throw error;
  }
  return { data, etag: res.headers.get('ETag'), status: res.status };
}
