// The web console end to end: Debian's headless Chromium, driven by playwright-core, against a real
// `sluice serve` on free ports with a database in a temporary directory and an upstream of our own.
// One browser, pages as a person uses them; a screenshot of each page goes to SLUICE_E2E_ARTIFACTS.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const SLUICE = process.env.SLUICE_BINARY ?? path.join(here, '../../build/sluice');
const ARTIFACTS = process.env.SLUICE_E2E_ARTIFACTS ?? path.join(here, '../../build/e2e-artifacts');
const CHROMIUM = process.env.SLUICE_CHROMIUM ?? '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

let chromium;
try {
  ({ chromium } = await import('playwright-core'));
} catch {
  throw new Error(`playwright-core is not installed in ${here}: run scripts/bootstrap (npm ci there)`);
}

if (!fs.existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: run scripts/bootstrap (Debian's chromium)`);

const env = {}; // what before() starts: dir, upstream, server, ports, tokens, browser

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function sluice(...args) {
  return execFileSync(SLUICE, args, { cwd: env.dir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
}

// Polls an async condition until it holds (true or a value), failing after timeout ms.
async function eventually(what, condition, timeout = 10000) {
  const deadline = Date.now() + timeout;
  let last;
  while (Date.now() < deadline) {
    last = await condition();
    if (last) return last;
    await new Promise((r) => { setTimeout(r, 50); });
  }
  throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(last)})`);
}

async function gateway(pathname, system, headers = {}) {
  const res = await fetch(`http://127.0.0.1:${env.port}${pathname}`, { headers: { ...(system ? { 'X-System-Key': system } : {}), ...headers } });
  const body = await res.text();
  return { status: res.status, reason: res.status >= 400 ? JSON.parse(body).reason : '' };
}

async function admin(method, route, body, headers = {}) {
  const res = await fetch(`${env.base}admin/v1/${route}`, {
    method,
    headers: { Authorization: `Bearer ${env.adminToken}`, ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, etag: res.headers.get('ETag'), data: res.status === 204 ? null : await res.json() };
}

// A page that fails the test on any error in the browser: a script error, a refused request, a
// Content-Security-Policy violation.
async function newPage(options = {}) {
  const context = await env.browser.newContext({ locale: 'en-US', ...options });
  context.setDefaultTimeout(10000); // a failure says so in seconds, not half a minute
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e.message));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/status of 4\d\d/.test(m.text())) page.errors.push(m.text());
  });
  page.on('dialog', (d) => d.accept());
  return page;
}

async function closePage(page) {
  assert.deepEqual(page.errors, [], 'errors in the browser');
  await page.context().close();
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
}

async function signIn(page, token) {
  await page.goto(env.base);
  await page.getByLabel('Token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Overview', level: 1 }).waitFor();
}

// Waits until the element's text matches.
async function textMatches(locator, pattern) {
  await locator.waitFor();
  await eventually(`${pattern} in ${locator}`, async () => pattern.test(await locator.innerText()));
}

before(async () => {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  env.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-e2e-'));
  env.upstream = http.createServer((req, res) => {
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify({ path: req.url }));
  });
  await new Promise((r) => { env.upstream.listen(0, '127.0.0.1', r); });
  const db = path.join(env.dir, 'sluice.db');
  fs.writeFileSync(path.join(env.dir, 'seed.yaml'), [
    'upstreams:',
    `  - {name: app, targets: [127.0.0.1:${env.upstream.address().port}], breaker: {window: 10, minimum_calls: 5}}`,
    'systems:',
    '  - {key: crm, description: Customer relations, interfaces: [orders, users]}',
    'interfaces:',
    '  - {id: orders, methods: [GET, POST], path: /api/orders/*, upstream: app}',
    '  - {id: users, methods: [GET], path: "/api/users/{id}", upstream: app,',
    '     limits: [{algorithm: token_bucket, capacity: 20, rate: 10, per: 1s}]}',
    'grants:',
    '  - {system: crm, interface: orders, limits: [{algorithm: gcra, limit: 100, period: 1m, burst: 10}]}',
    '',
  ].join('\n'));
  sluice('config', 'import', 'seed.yaml', '--db', db);
  env.adminToken = sluice('token', 'create', '--role', 'admin', '--name', 'e2e-admin', '--db', db);
  env.readToken = sluice('token', 'create', '--role', 'read', '--name', 'e2e-read', '--db', db);
  env.port = await freePort();
  env.adminPort = await freePort();
  env.base = `http://127.0.0.1:${env.adminPort}/`;
  env.server = spawn(SLUICE, ['serve', '--db', db, '--listen', `127.0.0.1:${env.port}`,
    '--admin-listen', `127.0.0.1:${env.adminPort}`, '--access-log', 'off'], { cwd: env.dir, stdio: ['ignore', 'ignore', 'pipe'] });
  env.serverLog = '';
  env.server.stderr.on('data', (d) => { env.serverLog += d; });
  await eventually('sluice serve to answer', async () => {
    try {
      return (await fetch(`${env.base}healthz`)).status === 200;
    } catch {
      return false;
    }
  });
  env.browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
});

after(async () => {
  await env.browser?.close();
  if (env.server && env.server.exitCode === null) {
    // Its log is whole once it has exited (a sanitizer's report comes last).
    const exited = new Promise((resolve) => { env.server.once('exit', resolve); });
    env.server.kill('SIGTERM');
    await Promise.race([exited, new Promise((resolve) => { setTimeout(resolve, 10000).unref(); })]);
    env.server.kill('SIGKILL');
  }
  env.upstream?.close();
  fs.writeFileSync(path.join(ARTIFACTS, 'sluice-serve.log'), env.serverLog ?? '');
  if (env.dir) fs.rmSync(env.dir, { recursive: true, force: true });
});

test('sign-in refuses a wrong token and lets an admin in, from the keyboard', async () => {
  const page = await newPage();
  await page.goto(env.base);
  await shot(page, '01-sign-in');
  // The token field has the focus: type, then Enter.
  await page.keyboard.type('not-a-token');
  await page.keyboard.press('Enter');
  await textMatches(page.getByRole('alert'), /not valid/);
  await page.getByLabel('Token').fill(env.adminToken);
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'Overview', level: 1 }).waitFor();
  await textMatches(page.locator('.who'), /e2e-admin\s+admin/);
  await page.locator('tr[data-name="crm"]').first().waitFor();
  await shot(page, '02-overview');
  await closePage(page);
});

test('an admin creates a system with a limit; the gateway serves it and rejects past the limit; the overview shows it', async () => {
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.getByRole('link', { name: 'Systems' }).click();
  await page.getByRole('link', { name: 'New system' }).click();
  await page.getByLabel('Key', { exact: true }).fill('shop');
  await page.getByLabel('Description').fill('The web shop');
  await page.getByLabel(/^orders/).check();
  await page.getByRole('button', { name: 'Add a limit' }).click();
  await page.getByLabel('Name', { exact: true }).fill('shop-hour');
  await page.getByLabel('Algorithm').selectOption('fixed_window');
  await page.getByLabel('Limit', { exact: true }).fill('3');
  await page.getByLabel('Period').fill('1h');
  await shot(page, '03-system-new');
  await page.getByRole('button', { name: 'Create' }).click();
  await page.getByText('shop was created.').waitFor();
  await shot(page, '04-system-created');

  const stored = await admin('GET', 'systems/shop');
  assert.equal(stored.status, 200);
  assert.deepEqual(stored.data.interfaces, ['orders']);
  assert.equal(stored.data.limits[0].limit, 3);
  assert.equal(stored.data.limits[0].period, '1h');

  // Served within a second; then 3 pass and the 4th is refused by the system's limit.
  await eventually('the gateway to know shop', async () => (await gateway('/api/orders/1', 'shop')).status === 200);
  const statuses = [];
  for (let i = 0; i < 10 && !statuses.includes(429); i += 1) statuses.push((await gateway('/api/orders/1', 'shop')).status);
  assert.deepEqual(statuses, [200, 200, 429]);
  assert.equal((await gateway('/api/orders/2', 'shop')).reason, 'system_rate_limited');

  await page.getByRole('link', { name: 'Overview' }).click();
  const row = page.locator('tr[data-name="shop"]').first();
  await textMatches(row.locator('.rejected-total'), /^[1-9]/);
  await textMatches(row.locator('.reasons'), /system limit/);
  await textMatches(page.locator('#reasons'), /system limit/);
  // A request refused before its system or interface was known counts in the overview too.
  assert.equal((await gateway('/api/orders/1', 'shop', { 'X-Big': 'x'.repeat(9000) })).reason, 'header_too_large');
  await textMatches(page.locator('#reasons'), /header too large/);
  await shot(page, '05-overview-rejections');
  await closePage(page);
});

test('the limit inspector shows what is left and resets it', async () => {
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.goto(`${env.base}#/limits?key=system:shop`);
  const row = page.locator('tr[data-name="shop-hour"]');
  await textMatches(row.locator('.remaining'), /0 of 3/);
  await shot(page, '06-inspector');
  await row.getByRole('button', { name: 'Reset shop-hour' }).click();
  await textMatches(row.locator('.remaining'), /3 of 3/);
  assert.equal((await gateway('/api/orders/3', 'shop')).status, 200);
  await closePage(page);
});

test('a disabled system is refused by the gateway', async () => {
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.getByRole('link', { name: 'Systems' }).click();
  await page.getByRole('button', { name: 'Disable shop' }).click();
  await page.getByText('shop is disabled.').waitFor();
  await page.locator('tr[data-id="shop"] .badge.off').waitFor();
  await shot(page, '07-systems-disabled');
  await eventually('shop to be refused', async () => (await gateway('/api/orders/1', 'shop')).reason === 'system_disabled');
  await closePage(page);
});

test('a problem the API finds is shown at its field', async () => {
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.goto(`${env.base}#/systems?new=1`);
  await page.getByLabel('Key', { exact: true }).fill('broken');
  await page.getByRole('button', { name: 'Add a limit' }).click();
  await page.getByLabel('Period').fill('1x');
  await page.getByRole('button', { name: 'Create' }).click();
  const error = page.locator('[data-error-for="limits[0].period"]');
  await textMatches(error, /duration/);
  assert.equal(await page.getByLabel('Period').getAttribute('aria-invalid'), 'true');
  assert.ok(await page.getByLabel('Period').evaluate((el) => el === document.activeElement), 'the field has the focus');
  await shot(page, '08-field-error');
  assert.equal((await admin('GET', 'systems/broken')).status, 404);
  await closePage(page);
});

test('a stale edit is reported, not saved over the other change', async () => {
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.goto(`${env.base}#/systems/crm`);
  await page.getByLabel('Description').fill('Changed in the console');
  // Meanwhile someone else changes crm.
  const current = await admin('GET', 'systems/crm');
  assert.equal((await admin('PUT', 'systems/crm', { ...current.data, description: 'Changed elsewhere' }, { 'If-Match': current.etag })).status, 200);
  await page.getByRole('button', { name: 'Save' }).click();
  await textMatches(page.getByRole('alert'), /Someone else changed this/);
  await shot(page, '09-stale-edit');
  assert.equal((await admin('GET', 'systems/crm')).data.description, 'Changed elsewhere');
  // Reloading shows their change; saving again then works.
  await page.getByRole('button', { name: 'Reload' }).click();
  await eventually('the reloaded description', async () => (await page.getByLabel('Description').inputValue()) === 'Changed elsewhere');
  await page.getByLabel('Description').fill('Changed in the console');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByText('crm was saved.').waitFor();
  assert.equal((await admin('GET', 'systems/crm')).data.description, 'Changed in the console');
  await closePage(page);
});

test('an admin makes an API key (shown once) and switches the system to it; the gateway then wants it', async () => {
  assert.equal((await admin('POST', 'systems', { key: 'billing', interfaces: ['users'] })).status, 201);
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.goto(`${env.base}#/systems/billing`);
  await page.getByRole('button', { name: 'New API key' }).click();
  const secret = await page.locator('code.secret').innerText();
  assert.match(secret, /^sluice_ak_/);
  await page.locator('section[aria-labelledby="cred-title"] tbody tr').waitFor();
  await page.getByLabel('Caller authentication').selectOption('api_key');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByText('billing was saved.').waitFor();
  await shot(page, '10-credentials');
  await eventually('billing to want its key', async () => (await gateway('/api/users/1', 'billing')).reason === 'api_key_invalid');
  assert.equal((await gateway('/api/users/1', null, { 'X-Api-Key': secret })).status, 200);
  await closePage(page);
});

test('breakers can be forced open and back to automatic', async () => {
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.getByRole('link', { name: 'Breakers' }).click();
  const row = page.locator('tr[data-upstream="app"]');
  await textMatches(row.locator('.state'), /^closed$/);
  // When the action is said to be done, its row already shows the state it made.
  await row.getByRole('button', { name: 'Force open app' }).click();
  await page.getByText('The breaker of app is forced open').waitFor();
  assert.equal(await row.locator('.state').innerText(), 'forced open');
  await shot(page, '11-breakers');
  await eventually('requests to get 503', async () => (await gateway('/api/users/1', 'crm')).reason === 'upstream_unavailable');
  await row.getByRole('button', { name: 'Automatic app' }).click();
  await page.getByText('The breaker of app decides by itself again').waitFor();
  assert.equal(await row.locator('.state').innerText(), 'closed');
  await eventually('requests to pass again', async () => (await gateway('/api/users/1', 'crm')).status === 200);
  await closePage(page);
});

test('the audit log lists the changes with who made them', async () => {
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.getByRole('link', { name: 'Audit log' }).click();
  const created = page.locator('tr', { hasText: 'system.create' }).filter({ hasText: 'systems/shop' });
  await textMatches(created, /e2e-admin/);
  await created.getByRole('button', { name: /Before and after/ }).click();
  await textMatches(page.locator('tr.detail:not([hidden])').first(), /shop-hour/);
  await shot(page, '12-audit');
  await closePage(page);
});

test('a read-only token sees everything and can change nothing', async () => {
  const page = await newPage();
  await signIn(page, env.readToken);
  await textMatches(page.locator('.who'), /read-only/);
  await page.getByRole('link', { name: 'Systems' }).click();
  await page.locator('tr[data-id="crm"]').waitFor();
  assert.equal(await page.getByRole('link', { name: 'New system' }).count(), 0);
  assert.equal(await page.getByRole('button', { name: /^(Enable|Disable)/ }).count(), 0);
  await page.getByRole('link', { name: 'crm' }).click();
  await page.getByText('read-only token').waitFor();
  assert.ok(await page.getByLabel('Description').isDisabled());
  assert.equal(await page.getByRole('button', { name: /Save|Delete|Add a limit/ }).count(), 0);
  await shot(page, '13-read-only');
  await page.getByRole('link', { name: 'Breakers' }).click();
  await page.locator('tr[data-upstream="app"]').waitFor();
  assert.equal(await page.getByRole('button', { name: /Force/ }).count(), 0);
  await closePage(page);
});

test('the console speaks Chinese, every string of it', async () => {
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.getByLabel('Language').selectOption('zh-CN');
  await page.getByRole('heading', { name: '概览', level: 1 }).waitFor();
  assert.equal(await page.evaluate(() => document.documentElement.lang), 'zh-CN');
  await textMatches(page.locator('#nav'), /系统.*接口.*熔断器.*审计日志/s);
  await page.locator('tr[data-name="shop"]').first().waitFor();
  await shot(page, '14-overview-zh');
  const missing = await page.evaluate(async () => {
    const { dictionaries } = await import('/assets/i18n.js');
    const en = Object.keys(dictionaries.en);
    const zh = Object.keys(dictionaries['zh-CN']);
    return { zh: en.filter((k) => !zh.includes(k)), en: zh.filter((k) => !en.includes(k)) };
  });
  assert.deepEqual(missing, { zh: [], en: [] });
  assert.equal(await page.locator('#nav').getAttribute('aria-label'), '页面');
  // Every reason the gateway gives (its table in policy.cpp) has words in both languages.
  const policy = fs.readFileSync(path.join(here, '../../src/gateway/policy.cpp'), 'utf8');
  const codes = [...policy.matchAll(/\{"([a-z_]+)", \d{3},/g)].map((m) => m[1]);
  assert.ok(codes.includes('bad_request') && codes.includes('system_rate_limited'), `reasons read from policy.cpp: ${codes}`);
  const raw = await page.evaluate(async (list) => {
    const { dictionaries } = await import('/assets/i18n.js');
    return list.filter((code) => !(`reason.${code}` in dictionaries.en && `reason.${code}` in dictionaries['zh-CN']));
  }, codes);
  assert.deepEqual(raw, [], 'reasons shown as their code');
  await page.goto(`${env.base}#/systems/shop`);
  await page.getByRole('button', { name: '保存' }).waitFor();
  await shot(page, '15-system-zh');
  await closePage(page);
});

test('the keyboard reaches everything: the skip link first, then every field of a form up to Save', async () => {
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.goto(`${env.base}#/interfaces/orders`);
  await page.reload(); // the focus at the top of the page, as a person arriving there has it
  await page.getByLabel('Path pattern').waitFor();
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.textContent), 'Skip to content');
  await page.keyboard.press('Enter');
  assert.equal(await page.evaluate(() => document.activeElement.id), 'main');
  const visited = [];
  for (let i = 0; i < 80; i += 1) {
    await page.keyboard.press('Tab');
    const at = await page.evaluate(() => {
      const el = document.activeElement;
      const r = el.getBoundingClientRect();
      return { text: el.labels?.[0]?.textContent ?? el.textContent, visible: r.width > 0 && r.height > 0 };
    });
    assert.ok(at.visible, `the focus is on something visible (${at.text})`);
    visited.push(at.text);
    if (at.text === 'Save') break;
  }
  assert.equal(visited.at(-1), 'Save', `Tab reaches Save (went through: ${visited.join(', ')})`);
  for (const label of ['Path pattern', 'Upstream', 'GET', 'Public', 'Timeout', 'Add a limit']) assert.ok(visited.includes(label), `Tab reaches ${label}`);
  await closePage(page);
});

test('a limit that counts locally when the store fails stays so when its owner is saved', async () => {
  const limit = { name: 'lf', algorithm: 'fixed_window', limit: 5, period: '1m', on_store_failure: 'local' };
  assert.equal((await admin('POST', 'systems', { key: 'localfail', limits: [limit] })).status, 201);
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.goto(`${env.base}#/systems/localfail`);
  assert.equal(await page.getByLabel('When the store fails').inputValue(), 'local');
  await page.getByLabel('Description').fill('Counts locally');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByText('localfail was saved.').waitFor();
  const stored = (await admin('GET', 'systems/localfail')).data;
  assert.equal(stored.description, 'Counts locally');
  assert.equal(stored.limits[0].on_store_failure, 'local');
  await closePage(page);
});

test('a number field holding text that is no number is refused at the field, and nothing is sent', async () => {
  const current = await admin('GET', 'interfaces/orders');
  assert.equal((await admin('PUT', 'interfaces/orders', { ...current.data, concurrency: 5 }, { 'If-Match': current.etag })).status, 200);
  const page = await newPage();
  let writes = 0;
  page.on('request', (r) => { if (r.method() !== 'GET') writes += 1; });
  await signIn(page, env.adminToken);
  await page.goto(`${env.base}#/interfaces/orders`);
  const concurrency = page.getByLabel('Concurrency', { exact: true });
  await eventually('the concurrency read', async () => (await concurrency.inputValue()) === '5');
  for (const text of ['5e', '20-']) {
    await concurrency.fill('');
    await concurrency.pressSequentially(text);
    await page.getByRole('button', { name: 'Save' }).click();
    await textMatches(page.locator('[data-error-for="concurrency"]'), /^must be a number$/);
    assert.equal(await concurrency.getAttribute('aria-invalid'), 'true');
    assert.ok(await concurrency.evaluate((el) => el === document.activeElement), 'the field has the focus');
    await textMatches(page.getByRole('alert'), /Nothing was changed/);
  }
  // A limit's number too: a grant's GCRA burst.
  await page.goto(`${env.base}#/grants/crm/orders`);
  const burst = page.getByLabel('Burst');
  await eventually('the burst read', async () => (await burst.inputValue()) === '10');
  await burst.fill('');
  await burst.pressSequentially('1e');
  await page.getByRole('button', { name: 'Save' }).click();
  await textMatches(page.locator('[data-error-for="limits[0].burst"]'), /^must be a number$/);
  // Still refused after the limits are drawn again (a limit added, and removed), which shows the
  // field empty: the browser keeps no text it cannot read as a number.
  await page.getByRole('button', { name: 'Add a limit' }).click();
  await page.getByRole('button', { name: 'Remove limit 2' }).click();
  assert.equal(await burst.inputValue(), '');
  await page.getByRole('button', { name: 'Save' }).click();
  await textMatches(page.locator('[data-error-for="limits[0].burst"]'), /^must be a number$/);
  assert.equal(writes, 0, 'nothing was sent');
  assert.equal((await admin('GET', 'interfaces/orders')).data.concurrency, 5);
  assert.equal((await admin('GET', 'grants/crm/orders')).data.limits[0].burst, 10);
  const now = await admin('GET', 'interfaces/orders');
  assert.equal((await admin('PUT', 'interfaces/orders', { ...now.data, concurrency: null }, { 'If-Match': now.etag })).status, 200);
  await closePage(page);
});

test('after Save the answer is in view and has the focus', async () => {
  const page = await newPage({ viewport: { width: 1280, height: 720 } });
  await signIn(page, env.adminToken);
  await page.goto(`${env.base}#/systems/crm`);
  const focused = () => page.evaluate(() => {
    const el = document.activeElement;
    const r = el.getBoundingClientRect();
    return { text: el.innerText, inView: r.top >= 0 && r.bottom <= window.innerHeight };
  });
  await page.getByLabel('Description').fill('Customer relations');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByText('crm was saved.').waitFor();
  assert.deepEqual(await focused(), { text: 'crm was saved.', inView: true });
  // The stale edit's alert alike.
  const current = await admin('GET', 'systems/crm');
  assert.equal((await admin('PUT', 'systems/crm', { ...current.data, description: 'Changed elsewhere' }, { 'If-Match': current.etag })).status, 200);
  await page.getByRole('button', { name: 'Save' }).click();
  await textMatches(page.getByRole('alert'), /Someone else changed this/);
  const after = await focused();
  assert.match(after.text, /Someone else changed this/);
  assert.ok(after.inView, 'the alert is in view');
  await closePage(page);
});

test('when the gateway does not answer, the console says so in its language and marks the figures stale', async () => {
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.getByLabel('Language').selectOption('zh-CN');
  await page.locator('tr[data-name="crm"]').first().waitFor();
  await eventually('the figures drawn', async () => /更新于/.test(await page.locator('.live').innerText()));
  const down = (route) => route.abort('connectionrefused');
  await page.route('**/admin/v1/**', down);
  const alert = page.getByRole('alert');
  await textMatches(alert, /网关没有响应/);
  await page.locator('.overview.stale').waitFor();
  await textMatches(page.locator('.live'), /不是实时数据/);
  await page.getByRole('link', { name: '系统' }).click();
  await textMatches(alert, /网关没有响应/);
  // It answers again: the overview is live again.
  await page.unroute('**/admin/v1/**', down);
  await page.getByRole('link', { name: '概览' }).click();
  await page.locator('tr[data-name="crm"]').first().waitFor();
  await eventually('the figures live again', async () => /更新于/.test(await page.locator('.live').innerText()));
  assert.equal(await page.locator('.overview.stale').count(), 0);
  // The breakers page says so too, dims its table, and takes both back at the next answer.
  await page.getByRole('link', { name: '熔断器' }).click();
  await page.locator('tr[data-key="app"]').waitFor();
  await page.route('**/admin/v1/**', down);
  await textMatches(alert, /网关没有响应/);
  await page.locator('.stale').waitFor();
  await page.unroute('**/admin/v1/**', down);
  await eventually('the breakers live again', async () => (await page.locator('.stale').count()) === 0);
  assert.equal(await page.getByRole('alert').count(), 0);
  // A save without an answer says the same.
  await page.goto(`${env.base}#/systems/crm`);
  await page.getByRole('button', { name: '保存' }).waitFor();
  await page.route('**/admin/v1/**', down);
  await page.getByRole('button', { name: '保存' }).click();
  await textMatches(alert, /网关没有响应/);
  await shot(page, '16-unreachable-zh');
  assert.ok(!/Failed to fetch/.test(await page.locator('main').innerText()), 'no browser error text');
  await page.unroute('**/admin/v1/**', down);
  page.errors = page.errors.filter((e) => !/ERR_CONNECTION_REFUSED/.test(e)); // the requests refused on purpose
  await closePage(page);
});

test('the most limited callers are those limits refused, not those refused for other reasons', async () => {
  assert.equal((await admin('POST', 'systems', { key: 'turnedoff', enabled: false, interfaces: ['users'] })).status, 201);
  const capped = { algorithm: 'fixed_window', limit: 1, period: '1h' };
  assert.equal((await admin('POST', 'systems', { key: 'capped', interfaces: ['users'], limits: [capped] })).status, 201);
  await eventually('turnedoff to be refused', async () => (await gateway('/api/users/1', 'turnedoff')).reason === 'system_disabled');
  await eventually('capped to be limited', async () => (await gateway('/api/users/1', 'capped')).reason === 'system_rate_limited');
  const page = await newPage();
  await signIn(page, env.adminToken);
  await textMatches(page.locator('tr[data-name="turnedoff"] .reasons').first(), /system disabled/);
  await textMatches(page.locator('tr[data-name="capped"] .reasons').first(), /system limit/);
  // Drawn from the same answer as the rows.
  const top = await page.locator('#top-limited').innerText();
  assert.match(top, /capped/);
  assert.doesNotMatch(top, /turnedoff/);
  await closePage(page);
});

test('long ids are cut in tables and lists, whole in their title, and the other columns stay in view', async () => {
  const key = `long-${'k'.repeat(251)}`;  // the longest a key may be (256 bytes), wider than the window
  assert.equal((await admin('POST', 'systems', { key, description: 'A long key', interfaces: ['users'] })).status, 201);
  const page = await newPage({ viewport: { width: 1280, height: 800 } });
  await signIn(page, env.adminToken);
  const lastColumnInView = (table) => page.locator(table).locator('thead th').last()
    .evaluate((el) => el.getBoundingClientRect().right <= window.innerWidth);
  await page.locator(`tr[data-name="${key}"]`).first().waitFor();
  assert.ok(await lastColumnInView('table[aria-label="Systems"]'), 'the overview\'s Refused for column is in view');
  assert.equal(await page.locator(`tr[data-name="${key}"] .ident`).first().getAttribute('title'), key);
  await page.goto(`${env.base}#/systems`);
  await page.locator(`tr[data-id="${key}"]`).waitFor();
  assert.ok(await lastColumnInView('table[aria-label="Systems"]'), 'the list\'s last column is in view');
  assert.equal(await page.locator(`tr[data-id="${key}"] a`).getAttribute('title'), key);
  await shot(page, '17-long-id');
  // Its page's heading wraps rather than widen the page.
  await page.goto(`${env.base}#/systems/${key}`);
  await page.getByRole('button', { name: 'Save' }).waitFor();
  assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'the edit page fits');
  await closePage(page);
  assert.equal((await admin('DELETE', `systems/${key}`)).status, 204);
});

test('on a narrow phone the navigation wraps, reasons are read whole and tables scroll in their box', async () => {
  await gateway('/no/such/interface', 'crm'); // a rejection with a long reason: unknown interface
  const page = await newPage({ viewport: { width: 375, height: 740 }, isMobile: true, hasTouch: true });
  await signIn(page, env.adminToken);
  const links = await page.locator('#nav a').evaluateAll((els) => els.map((el) => {
    const r = el.getBoundingClientRect();
    return { text: el.textContent, in: r.left >= 0 && r.right <= window.innerWidth };
  }));
  assert.deepEqual(links.filter((l) => !l.in), [], 'every page\'s link is on the screen');
  await textMatches(page.locator('#reasons'), /unknown interface/);
  const cut = await page.locator('#reasons .bar-label').evaluateAll((els) => els.filter((el) => el.scrollWidth > el.clientWidth
    || el.scrollHeight > el.clientHeight).map((el) => el.textContent));
  assert.deepEqual(cut, [], 'reasons cut');
  // The overview's tables: their last column is reached by scrolling the table's own box.
  const wrap = page.locator('section:has(table[aria-label="Systems"]) .table-wrap');
  const box = await wrap.evaluate((el) => ({
    overflow: getComputedStyle(el).overflowX, hint: getComputedStyle(el).backgroundImage, right: el.getBoundingClientRect().right,
  }));
  assert.equal(box.overflow, 'auto');
  assert.match(box.hint, /gradient/, 'a shadow says the table goes on');
  assert.ok(box.right <= 375, 'the table\'s box is on the screen');
  await wrap.evaluate((el) => { el.scrollLeft = el.scrollWidth; });
  assert.ok(await wrap.locator('thead th').last().evaluate((el) => el.getBoundingClientRect().right <= window.innerWidth + 1),
    'the last column scrolls into view');
  await shot(page, '18-phone-375');
  await closePage(page);
});

test('switching the language keeps the edits in a form', async () => {
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.goto(`${env.base}#/systems/crm`);
  await page.getByLabel('Description').fill('Typed before switching');
  await page.getByRole('button', { name: 'Add a limit' }).click();
  await page.getByLabel('Limit', { exact: true }).fill('7');
  await page.getByLabel('Language').selectOption('zh-CN');
  await page.getByRole('button', { name: '保存' }).waitFor();
  assert.equal(await page.getByLabel('描述').inputValue(), 'Typed before switching');
  assert.equal(await page.getByLabel('上限', { exact: true }).inputValue(), '7');
  await page.getByRole('button', { name: '保存' }).click();
  await page.getByText('crm 已保存。').waitFor();
  const stored = (await admin('GET', 'systems/crm')).data;
  assert.equal(stored.description, 'Typed before switching');
  assert.equal(stored.limits[0].limit, 7);
  await closePage(page);
});

test('small things: statuses as classes, the breaker\'s setting, one line per problem, addresses that name nothing, odd tokens', async () => {
  const page = await newPage();
  await page.goto(env.base);
  await page.getByLabel('Token').fill('令牌');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await textMatches(page.getByRole('alert'), /characters a token never has/);
  await page.getByLabel('Token').fill(env.adminToken);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Overview', level: 1 }).waitFor();
  await page.goto(`${env.base}#/upstreams`);
  assert.equal(await page.locator('tr[data-id="app"] td').last().innerText(), 'automatic');
  await page.goto(`${env.base}#/upstreams/app`);
  const statuses = page.getByLabel('Failure statuses');
  await eventually('statuses as a class', async () => (await statuses.inputValue()) === '5xx');
  await page.getByLabel('Targets').fill('nowhere\nnor-here');
  await page.getByRole('button', { name: 'Save' }).click();
  const error = page.locator('[data-error-for="targets"]');
  await error.locator('span').nth(1).waitFor();
  assert.equal(await error.locator('span').count(), 2, 'one line per problem');
  assert.match(await error.locator('span').nth(1).innerText(), /^#2: /, 'each saying which entry');
  await page.goto(`${env.base}#/systems/%`);
  await page.getByRole('heading', { name: 'Not found', level: 1 }).waitFor();
  await page.goto(`${env.base}#/systems/crm/credentials`);
  await textMatches(page.getByRole('alert'), /does not exist/);
  assert.ok(!(await page.locator('main').innerText()).includes('Loading…'));
  await closePage(page);
});

test('Disable sets the state it names; a save keeps a method and a failure-status list the form has no usual place for', async () => {
  assert.equal((await admin('POST', 'upstreams', { name: 'quiet', targets: ['127.0.0.1:9'], failure_statuses: [] })).status, 201);
  assert.equal((await admin('POST', 'interfaces', { id: 'dav', methods: ['GET', 'PROPFIND'], path: '/dav/*', upstream: 'quiet' })).status, 201);
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.goto(`${env.base}#/interfaces`);
  await page.getByRole('button', { name: 'Disable dav' }).waitFor();
  // Someone else disables it meanwhile: the button, still Disable, leaves it disabled.
  const current = await admin('GET', 'interfaces/dav');
  assert.equal((await admin('PUT', 'interfaces/dav', { ...current.data, enabled: false }, { 'If-Match': current.etag })).status, 200);
  await page.getByRole('button', { name: 'Disable dav' }).click();
  await page.getByText('dav is disabled.').waitFor();
  assert.equal((await admin('GET', 'interfaces/dav')).data.enabled, false);
  await page.goto(`${env.base}#/interfaces/dav`);
  assert.ok(await page.getByLabel('PROPFIND').isChecked());
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByText('dav was saved.').waitFor();
  assert.deepEqual((await admin('GET', 'interfaces/dav')).data.methods, ['GET', 'PROPFIND']);
  await page.goto(`${env.base}#/upstreams/quiet`);
  await eventually('no statuses, shown as none', async () => (await page.getByLabel('Failure statuses').inputValue()) === 'none');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByText('quiet was saved.').waitFor();
  assert.deepEqual((await admin('GET', 'upstreams/quiet')).data.failure_statuses, []);
  // Its longest open period shown at its default (10m) stays the default: a longer open_for takes it.
  await page.goto(`${env.base}#/upstreams/quiet`);
  await page.getByLabel('Open for').fill('20m');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByText('quiet was saved.').waitFor();
  assert.equal((await admin('GET', 'upstreams/quiet')).data.breaker.max_open_for, '20m');
  // One set equal to a shorter open_for (no growth) is kept so.
  const quiet = await admin('GET', 'upstreams/quiet');
  const fixed = { ...quiet.data, breaker: { ...quiet.data.breaker, open_for: '10s', max_open_for: '10s' } };
  assert.equal((await admin('PUT', 'upstreams/quiet', fixed, { 'If-Match': quiet.etag })).status, 200);
  await page.goto(`${env.base}#/upstreams`);
  await page.goto(`${env.base}#/upstreams/quiet`);
  await eventually('the form read again', async () => (await page.getByLabel('Open for').inputValue()) === '10s');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByText('quiet was saved.').waitFor();
  assert.equal((await admin('GET', 'upstreams/quiet')).data.breaker.max_open_for, '10s');
  // A system's permissions listed in an order of their own are saved as they were: nothing to commit.
  assert.equal((await admin('POST', 'systems', { key: 'ordered', interfaces: ['users', 'dav', 'orders'] })).status, 201);
  const before = (await admin('GET', 'config')).etag;
  await page.goto(`${env.base}#/systems/ordered`);
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByText('ordered was saved.').waitFor();
  assert.deepEqual((await admin('GET', 'systems/ordered')).data.interfaces, ['users', 'dav', 'orders']);
  assert.equal((await admin('GET', 'config')).etag, before, 'no new revision');
  await closePage(page);
});

test('on an instance that follows a primary, the pages offer no change it would refuse', async () => {
  const [port, adminPort] = [await freePort(), await freePort()];
  const follower = spawn(SLUICE, ['serve', '--config-from', `http://127.0.0.1:${env.adminPort}`, '--token', env.adminToken,
    '--listen', `127.0.0.1:${port}`, '--admin-listen', `127.0.0.1:${adminPort}`, '--access-log', 'off'],
  { cwd: env.dir, stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  follower.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((resolve) => { follower.once('exit', resolve); });
  try {
    const base = `http://127.0.0.1:${adminPort}/`;
    await eventually(`the follower to answer (${log})`, async () => {
      try {
        return (await fetch(`${base}healthz`)).status === 200;
      } catch {
        return false;
      }
    });
    const page = await newPage();
    await page.goto(base);
    await page.getByLabel('Token').fill(env.adminToken);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Overview', level: 1 }).waitFor();
    await page.goto(`${base}#/systems`);
    await page.locator('tr[data-id="crm"]').waitFor();
    assert.equal(await page.getByRole('link', { name: 'New system' }).count(), 0);
    assert.equal(await page.getByRole('button', { name: /^(Enable|Disable)/ }).count(), 0);
    await page.goto(`${base}#/systems/crm`);
    await textMatches(page.getByRole('status'), /This instance follows http:\/\/127\.0\.0\.1/);
    assert.ok(await page.getByLabel('Description').isDisabled());
    assert.equal(await page.getByRole('button', { name: /Save|Delete|Add a limit|New API key/ }).count(), 0);
    // Its breakers' own state it may reset; a force is configuration.
    await page.goto(`${base}#/breakers`);
    const row = page.locator('tr[data-upstream="app"]');
    await row.getByRole('button', { name: 'Reset app' }).waitFor();
    assert.equal(await row.getByRole('button', { name: /Force|Automatic/ }).count(), 0);
    await shot(page, '19-follower');
    await closePage(page);
  } finally {
    follower.kill('SIGTERM');
    await Promise.race([exited, new Promise((resolve) => { setTimeout(resolve, 5000).unref(); })]);
    follower.kill('SIGKILL');
  }
});

// "Older entries" clicked twice while its page loads loads that page once.
test('the audit log loads each older page once', async () => {
  for (let i = 0; i < 60; i++) {
    assert.equal((await admin('POST', 'systems', { key: `audit-${i}`, interfaces: [] })).status, 201);
  }
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.goto(`${env.base}#/audit`);
  const older = page.getByRole('button', { name: 'Older entries' });
  await older.waitFor();
  await older.dblclick();
  await eventually('the older page', async () => (await page.locator('tbody tr[data-id]').count()) > 50);
  await page.waitForLoadState('networkidle');
  const ids = await page.locator('tbody tr[data-id]').evaluateAll((rows) => rows.map((r) => r.dataset.id));
  assert.equal(new Set(ids).size, ids.length, 'no entry twice');
  for (let i = 0; i < 60; i++) assert.equal((await admin('DELETE', `systems/audit-${i}`)).status, 204);
  await closePage(page);
});

// A long list is searched by its rows' text (not their buttons); the search stays in the address,
// through a reload and the list shown again after a change.
test('a list is filtered by what its rows say, and stays filtered', async () => {
  for (const id of ['filter-a', 'filter-b']) {
    assert.equal((await admin('POST', 'interfaces', { id, methods: ['GET'], path: `/${id}/*`, upstream: 'app' })).status, 201);
  }
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.goto(`${env.base}#/interfaces`);
  const filter = page.getByLabel('Filter Interfaces');
  const visible = () => page.locator('tbody tr[data-id]:visible').evaluateAll((rows) => rows.map((r) => r.dataset.id));
  await page.locator('tr[data-id="filter-b"]').waitFor();
  const total = await page.locator('tbody tr[data-id]').count();
  await filter.fill('FILTER-B');
  assert.deepEqual(await visible(), ['filter-b']);
  assert.equal(await page.locator('.filter-count').innerText(), `1 of ${total} shown`);
  assert.equal(new URL(page.url()).hash, '#/interfaces?q=FILTER-B');
  await page.reload();
  await page.locator('tr[data-id="filter-b"]').waitFor();
  assert.equal(await filter.inputValue(), 'FILTER-B');
  assert.deepEqual(await visible(), ['filter-b']);
  await page.getByRole('button', { name: 'Disable filter-b' }).click();
  await page.getByText('filter-b is disabled.').waitFor();
  await page.locator('tr[data-id="filter-b"] .badge.off').waitFor();
  assert.equal(await filter.inputValue(), 'FILTER-B');
  assert.deepEqual(await visible(), ['filter-b']);
  await filter.fill('disable');  // the state a row shows, not its button's word
  const disabled = (await admin('GET', 'interfaces')).data.items.filter((i) => !i.enabled).map((i) => i.id);
  assert.ok(disabled.includes('filter-b') && disabled.length < total);
  assert.deepEqual(await visible(), disabled);
  await filter.fill('zzz');
  assert.deepEqual(await visible(), []);
  assert.equal(await page.locator('.filter-count').innerText(), 'Nothing matches “zzz”.');
  await filter.fill('');
  assert.equal((await visible()).length, total);
  assert.equal(new URL(page.url()).hash, '#/interfaces');
  for (const id of ['filter-a', 'filter-b']) assert.equal((await admin('DELETE', `interfaces/${id}`)).status, 204);
  await closePage(page);
});

// Ids may hold '/': a grant's system and interface are told apart by an arrow ("a/b" → "c" is not
// "a" → "b/c").
test('a grant is listed as its system → its interface', async () => {
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.goto(`${env.base}#/grants`);
  const row = page.locator('tr[data-id="crm → orders"]');
  await row.waitFor();
  assert.equal(await row.locator('th').innerText(), 'crm → orders');
  assert.equal(await row.locator('th a').getAttribute('href'), '#/grants/crm/orders');
});

// Every page once: the lists, a form of each kind, the inspector, breakers and the audit log.
const EVERY_PAGE = ['overview', 'systems', 'systems/shop', 'interfaces', 'interfaces/orders', 'upstreams', 'upstreams/app',
  'grants', 'grants/crm/orders', 'limits?key=grant:crm/orders', 'breakers', 'audit'];

// The controls on the page with no accessible name (no label, aria-label or text).
function unlabelled(page) {
  return page.evaluate(() => [...document.querySelectorAll('input, select, textarea, button, a[href]')]
    .filter((el) => !el.closest('[hidden]'))
    .filter((el) => !(el.labels?.length || el.getAttribute('aria-label') || el.getAttribute('aria-labelledby') || el.textContent.trim()))
    .map((el) => el.outerHTML.slice(0, 80)));
}

for (const [device, options] of [
  ['laptop', { viewport: { width: 1280, height: 800 } }],
  ['phone', { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 }],
]) {
  test(`on a ${device}, every page fits the screen and labels every control`, async () => {
    const page = await newPage(options);
    await signIn(page, env.adminToken);
    for (const [i, at] of EVERY_PAGE.entries()) {
      await page.goto(`${env.base}#/${at}`);
      // Drawn: its heading, nothing still loading, and its first table row or form field.
      await page.waitForFunction(() => {
        const main = document.getElementById('main');
        return main.querySelector('h1') && !main.innerText.includes('Loading…') && main.querySelector('tbody tr, form input');
      });
      assert.deepEqual(await unlabelled(page), [], `unlabelled controls on #/${at}`);
      const fits = await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
      assert.ok(fits, `#/${at} is no wider than the screen`);
      await shot(page, `${device}-${String(i + 1).padStart(2, '0')}-${at.replace(/[/?:=]+/g, '-')}`);
    }
    await closePage(page);
  });
}

// A limit counted per header value keeps one count of the requests without the header: the
// inspector shows and resets it with "Requests without a value"; without a value it shows no count,
// and offers no reset (there is no one count to reset).
test('the limit inspector shows and resets the count of requests without a value', async () => {
  assert.equal((await admin('PUT', 'interfaces/keyed', { path: '/api/keyed', upstream: 'app',
    limits: [{ name: 'per-user', algorithm: 'fixed_window', limit: 1, period: '1h', key_by: 'header:X-User' }] })).status, 201);
  assert.equal((await admin('PUT', 'systems/keyer', { interfaces: ['*'] })).status, 201);
  await eventually('the keyed interface to be served', async () => (await gateway('/api/keyed', 'keyer')).status === 200);
  assert.equal((await gateway('/api/keyed', 'keyer')).reason, 'interface_rate_limited');
  const page = await newPage();
  await signIn(page, env.adminToken);
  await page.goto(`${env.base}#/limits?key=interface:keyed`);
  const row = page.locator('tr[data-name="per-user"]');
  await textMatches(row.locator('.remaining'), /give a value/);
  assert.equal(await row.getByRole('button', { name: 'Reset per-user' }).count(), 0);
  await page.getByLabel('Requests without a value').check();
  await page.getByRole('button', { name: 'Look up' }).click();
  await textMatches(row.locator('.remaining'), /0 of 1/);
  await row.getByRole('button', { name: 'Reset per-user' }).click();
  await textMatches(row.locator('.remaining'), /1 of 1/);
  assert.equal((await gateway('/api/keyed', 'keyer')).status, 200);
  await closePage(page);
});
