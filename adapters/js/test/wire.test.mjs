// The shim's own tests: error classification, value mapping, booting, and the stdio framing of
// serve.mjs (a real child process). Run with `node --test adapters/js/test/`.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

import { Server, classify, normalizeStore } from '../lib/wire.mjs';
import { WAIT_FLOOR_NS, waits } from '../lib/steps.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const serve = join(here, '..', 'serve.mjs');
const shaped = join(here, '..', 'fixtures', 'shaped-store.mjs');
const memory = join(here, '..', 'examples', 'memory-store.mjs');
const twoStatement = join(here, '..', 'examples', 'sqlite-two-statement.mjs');
const location = mkdtempSync(join(tmpdir(), 'soak-js-shim-'));
after(() => rmSync(location, { recursive: true, force: true }));

const lease = (owner, epoch, runId = 'r') => ({ run_id: runId, owner, epoch });
const hello = (options = {}, extra = {}) => ({ id: 0, op: 'hello', args: { version: 1, kind: 'runs', location, lease_ttl_ms: 5000, options, ...extra } });
const b64 = (text) => Buffer.from(text).toString('base64');

/** A booted in-process server and a call helper returning the parsed response. */
async function booted(module, options = {}) {
  const server = new Server(module);
  let id = 0;
  const call = async (op, args = {}, strike = undefined) => JSON.parse(await server.handle(JSON.stringify({ id: ++id, op, args, strike })));
  const h = JSON.parse(await server.handle(JSON.stringify(hello(options))));
  return { server, call, hello: h };
}

describe('classify', () => {
  class LeaseHeldError extends Error {}
  class VendorLeaseError extends LeaseHeldError {}
  class JournalOrderError extends Error {}
  class StoreBusyError extends Error {}

  it('types by class name, along the prototype chain', () => {
    const held = Object.assign(new VendorLeaseError('held'), { runId: 'r', holder: { runId: 'r', owner: 'b', epoch: 3 } });
    assert.deepEqual(classify(held), { type: 'LeaseHeldError', message: 'held', run_id: 'r', holder: lease('b', 3) });
    assert.equal(classify(new JournalOrderError('seq')).type, 'JournalOrderError');
    assert.equal(classify(new StoreBusyError('busy')).type, 'StoreBusyError');
  });

  it('types by code, case and dashes aside', () => {
    for (const [code, type] of [['lease_held', 'LeaseHeldError'], ['LEASE-HELD', 'LeaseHeldError'], ['journal_order', 'JournalOrderError'],
      ['seq_order', 'JournalOrderError'], ['busy', 'StoreBusyError'], ['STORE_BUSY', 'StoreBusyError']]) {
      assert.equal(classify(Object.assign(new Error('x'), { code })).type, type, code);
    }
  });

  it('fills run_id from the call and holder null when the error has none', () => {
    assert.deepEqual(classify(Object.assign(new Error('no'), { code: 'lease_held' }), 'run-7'),
      { type: 'LeaseHeldError', message: 'no', run_id: 'run-7', holder: null });
    const odd = Object.assign(new Error('no'), { code: 'lease_held', holder: 'someone' });
    assert.equal(classify(odd, 'r').holder, null);
  });

  it('leaves anything else untyped, named by its class, on one line', () => {
    assert.deepEqual(classify(new TypeError('bad\n  input')), { type: 'TypeError', message: 'bad input' });
    assert.deepEqual(classify(Object.assign(new Error('gone'), { code: 'ENOENT' })), { type: 'Error', message: '[ENOENT] gone' });
    assert.deepEqual(classify(Object.assign(new Error('x'), { code: 'SQLITE_BUSY' })), { type: 'Error', message: '[SQLITE_BUSY] x' });
    assert.deepEqual(classify('a string'), { type: 'string', message: 'a string' });
    class StoreError extends Error {}
    assert.equal(classify(new StoreError('root')).type, 'StoreError');
  });
});

describe('hello', () => {
  it('boots each accepted module shape and answers the markers', async () => {
    for (const shape of ['', 'pair', 'method', 'slow']) {
      const { hello: h } = await booted(shaped, { shape });
      assert.deepEqual(h, { id: 0, ok: { protocol: 1, store: 'shaped-store.mjs', lease_ttl_ms: 5000, fenced_writes: true,
        blob_fenced_writes: true, injectable_clock: false } }, shape);
    }
    assert.equal((await booted(memory)).hello.ok.store, 'js-memory-example');
  });

  const bootError = async (module, options, extra) => {
    const r = JSON.parse(await new Server(module).handle(JSON.stringify(hello(options, extra))));
    assert.equal(r.id, 0);
    assert.ok(r.error, JSON.stringify(r));
    assert.ok(!r.error.message.includes('\n'), r.error.message);
    return r.error;
  };

  it('names the problem and the fix on a bad module', async () => {
    let e = await bootError(join(here, '..', 'fixtures', 'absent.mjs'));
    assert.match(e.message, /absent\.mjs not found: give its path/);
    e = await bootError(join(here, '..', 'fixtures', 'no-factory.mjs'));
    assert.match(e.message, /exports no factory: export `createStore/);
    e = await bootError(join(here, '..', 'fixtures', 'broken-import.mjs'));
    assert.match(e.message, /failed to load: Error: Cannot find package 'no-such-package-soak-test'/);
    e = await bootError(undefined);
    assert.match(e.message, /no store module given/);
  });

  it('names what a store lacks, and a store that threw', async () => {
    let e = await bootError(shaped, { shape: 'missing' });
    assert.match(e.message, /lacks journal\.putMeta, transcripts: implement the SPI/);
    e = await bootError(shaped, { shape: 'no-ttl' });
    assert.match(e.message, /leaseTtlMs is undefined: set it/);
    e = await bootError(shaped, { shape: 'boot-throws' });
    assert.equal(e.type, 'StoreBootError');
    assert.match(e.message, /threw while booting: Error: cannot reach the database/);
  });

  it('refuses another protocol version and another kind', async () => {
    assert.equal((await bootError(shaped, {}, { version: 2 })).type, 'ProtocolVersionError');
    assert.match((await bootError(shaped, {}, { kind: 'claims' })).message, /serves run stores/);
  });
});

describe('calls', () => {
  it('maps the SPI both ways (camelCase store, snake_case wire)', async () => {
    const { call } = await booted(shaped, { shape: 'pair' });
    assert.deepEqual(await call('acquire', { run_id: 'r', owner: 'a' }), { id: 1, ok: lease('a', 1) });
    assert.deepEqual(await call('append', { run_id: 'r', entry: { seq: 1, payload: b64('p1') }, lease: lease('a', 1) }), { id: 2, ok: null });
    assert.deepEqual((await call('load', { run_id: 'r' })).ok, [{ seq: 1, payload: b64('p1') }]);
    const meta = { run_id: 'r', status: 'running', segments: 2, payload: b64('m') };
    assert.equal((await call('put_meta', { meta, lease: lease('a', 1) })).ok, null);
    assert.deepEqual((await call('get_meta', { run_id: 'r' })).ok, meta);
    assert.deepEqual((await call('get_meta', { run_id: 'other' })).ok, null);
    assert.deepEqual((await call('list_runs')).ok, [meta]);
    assert.equal((await call('blob_put', { ref: 'r/b', blob: b64('blob'), lease: null })).ok, null);
    assert.equal((await call('blob_get', { ref: 'r/b' })).ok, b64('blob'));
    assert.deepEqual((await call('blob_list', { run_id: 'r' })).ok, ['r/b']);
    assert.equal((await call('blob_delete', { ref: 'r/b', lease: lease('a', 1) })).ok, null);
    assert.equal((await call('blob_get', { ref: 'r/b' })).ok, null);
    assert.deepEqual((await call('renew', { lease: lease('a', 1) })).ok, lease('a', 1));
    assert.equal((await call('release', { lease: lease('a', 1) })).ok, null);
    assert.equal((await call('delete', { run_id: 'r', lease: null })).ok, null);
  });

  it('sends refusals typed, with the holder', async () => {
    const { call } = await booted(memory);
    await call('acquire', { run_id: 'r', owner: 'a' });
    assert.deepEqual((await call('acquire', { run_id: 'r', owner: 'b' })).error,
      { type: 'LeaseHeldError', message: 'run r is held by a', run_id: 'r', holder: lease('a', 1) });
    const stale = await call('blob_put', { ref: 'r/x', blob: b64('x'), lease: lease('a', 9) });
    assert.equal(stale.error.type, 'LeaseHeldError');
    assert.equal(stale.error.run_id, 'r');
    await call('append', { run_id: 'r', entry: { seq: 3, payload: '' }, lease: null });
    assert.equal((await call('append', { run_id: 'r', entry: { seq: 2, payload: '' }, lease: null })).error.type, 'JournalOrderError');
  });

  it('takes a renew that resolves to nothing as the lease it renewed', async () => {
    const { call } = await booted(shaped, { shape: 'renew-void' });
    await call('acquire', { run_id: 'r', owner: 'a' });
    assert.deepEqual((await call('renew', { lease: lease('a', 1) })).ok, lease('a', 1));
  });

  it('reports a store answer it cannot send, and a store error, untyped', async () => {
    let { call } = await booted(shaped, { shape: 'string-payload' });
    assert.deepEqual((await call('load', { run_id: 'r' })).error, { type: 'ShimError',
      message: 'store returned a string for a JournalEntry payload: return a Uint8Array (or Buffer)' });
    ({ call } = await booted(shaped, { shape: 'untyped' }));
    assert.deepEqual((await call('append', { run_id: 'r', entry: { seq: 1, payload: '' }, lease: null })).error,
      { type: 'RangeError', message: '[EFIRE] disk on fire' });
  });

  it('refuses calls before hello and unknown ops', async () => {
    const server = new Server(memory);
    assert.match(JSON.parse(await server.handle('{"id":3,"op":"load","args":{"run_id":"r"}}')).error.message, /before a successful hello/);
    await server.handle(JSON.stringify(hello()));
    assert.deepEqual(JSON.parse(await server.handle('{"id":4,"op":"frobnicate","args":{}}')),
      { id: 4, error: { type: 'ProtocolError', message: 'unknown op "frobnicate" (wire protocol 1)' } });
    assert.equal(JSON.parse(await server.handle('not json')).error.type, 'ProtocolError');
  });
});

/** Run serve.mjs over `module`, feed it `chunks` (written in turn), and collect what it does. */
function child(module, chunks, { endInput = true } = {}) {
  return new Promise((done, fail) => {
    const p = spawn(process.execPath, [serve, module], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => { stdout += d; });
    p.stderr.on('data', (d) => { stderr += d; });
    p.on('error', fail);
    p.on('exit', (code, signal) => done({ code, signal, stderr, responses: stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l)) }));
    (async () => {
      for (const c of chunks) {
        p.stdin.write(c);
        await new Promise((r) => setTimeout(r, 10));
      }
      if (endInput) p.stdin.end();
    })();
  });
}

describe('serve.mjs', () => {
  const line = (o) => JSON.stringify(o) + '\n';

  it('answers requests split and joined across writes, in order, then exits at end of input', async () => {
    const reqs = [hello({ shape: 'slow' }), { id: 1, op: 'acquire', args: { run_id: 'r', owner: 'a' } }];
    for (let seq = 1; seq <= 5; seq++) reqs.push({ id: 1 + seq, op: 'append', args: { run_id: 'r', entry: { seq, payload: '' }, lease: null } });
    reqs.push({ id: 7, op: 'load', args: { run_id: 'r' } });
    const text = reqs.map(line).join('');
    const cut = text.indexOf('acquire') + 3;
    const r = await child(shaped, [text.slice(0, cut), text.slice(cut, cut + 1), text.slice(cut + 1)]);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.responses.map((x) => x.id), [0, 1, 2, 3, 4, 5, 6, 7]);
    assert.deepEqual(r.responses[7].ok.map((e) => e.seq), [1, 2, 3, 4, 5]);
  });

  it('keeps stdout for responses: what the store prints goes to stderr', async () => {
    const r = await child(shaped, [line(hello({ shape: 'noisy' })), line({ id: 1, op: 'acquire', args: { run_id: 'r', owner: 'a' } })]);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.responses.map((x) => x.id), [0, 1]);
    assert.match(r.stderr, /noisy store: acquire/);
    assert.match(r.stderr, /noisy store writes to stdout/);
  });

  it('exits 0 after close without waiting for the end of input', async () => {
    const r = await child(memory, [line(hello()), line({ id: 1, op: 'close', args: {} })], { endInput: false });
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.responses, [{ id: 0, ok: r.responses[0].ok }, { id: 1, ok: null }]);
  });
});

describe('step-mode strikes', () => {
  class Private {
    #tenure = 0;
    leaseTtlMs = 1000;
    fencedWrites = true;
    transcripts = { put() {}, get() { return null; }, list() { return []; }, delete() {} };
    check() { return this.#tenure; }
    async acquire(runId, owner) {
      this.check();
      await null;
      this.#tenure += 1;
      return { runId, owner, epoch: this.#tenure };
    }
    renew(l) { return l; }
    release() {}
    append() {}
    load() { return []; }
    putMeta() {}
    getMeta() { return null; }
    listRuns() { return []; }
    delete() {}
  }

  async function struck(k) {
    const stops = [];
    const server = new Server(memory, { steps: undefined });
    server.store = await normalizeStore(new Private(), 'private');
    server.steps.stop = () => stops.push(server.steps.seen);
    const before = Object.getOwnPropertyNames(server.store.journal);
    const r = JSON.parse(await server.handle(JSON.stringify({ id: 1, op: 'acquire', args: { run_id: 'r', owner: 'a' }, strike: { mode: 'step', k } })));
    assert.deepEqual(Object.getOwnPropertyNames(server.store.journal), before); // the wrappers are gone
    return { r, stops };
  }

  it('counts method calls, returns and awaits, and stops once at boundary k', async () => {
    const { r, stops } = await struck(3);
    assert.deepEqual(r.ok, lease('a', 1, 'r'));
    assert.ok(r.strike.seen >= 5, JSON.stringify(r)); // acquire in, check in, check out, the await, acquire out
    assert.deepEqual(stops, [3]);
  });

  it('k 0 counts the call without stopping', async () => {
    const { r, stops } = await struck(0);
    assert.deepEqual(r.ok, lease('a', 1, 'r'));
    assert.deepEqual(stops, []);
    assert.ok(r.strike.seen >= 5 && Array.isArray(r.strike.waits), JSON.stringify(r));
  });

  it('reports the boundaries that end a wait, never the hold or the shim\'s own continuations', () => {
    const at = (gaps) => gaps.reduce((acc, g) => [...acc, acc[acc.length - 1] + BigInt(g)], [0n]);
    const quick = 500;
    const slow = 20 * WAIT_FLOOR_NS;
    // boundaries 1..8: an exchange between 3 and 4, another between 6 and 7
    const instants = at([quick, quick, slow, quick, quick, slow, quick]);
    assert.deepEqual(waits(instants), [4, 7]);
    assert.deepEqual(waits(instants, 3), [7]); // stopped at 3: the gap after it is the hold
    assert.deepEqual(waits(instants, 0, 7), [4]); // from 7 on the call had settled
    assert.deepEqual(waits(at([quick, quick, quick])), []); // no gap stands out
    assert.deepEqual(waits(at([1, 1, 1, WAIT_FLOOR_NS - 1])), []); // under the floor however uneven
  });

  it('finds the window of a store whose fence check and write are two statements', async () => {
    const { call } = await booted(twoStatement, { file: 'two-statement.db' });
    const held = await call('acquire', { run_id: 'r', owner: 'a' });
    let r;
    for (let i = 0; i < 5; i++) {
      r = await call('put_meta', { meta: { run_id: 'r', status: 'running', segments: i, payload: '' }, lease: held.ok }, { mode: 'step', k: 0 });
      if (r.strike.waits.length >= 2) break;
    }
    assert.equal(r.ok, null);
    assert.ok(r.strike.waits.length >= 2, JSON.stringify(r.strike)); // the SELECT of the check, then the write's
  });

  it('never stops past the last boundary, and leaves an unstruck call uncounted', async () => {
    const { r, stops } = await struck(1000);
    assert.deepEqual(stops, []);
    assert.ok(r.strike.seen < 1000);
    const { call } = await booted(memory);
    assert.equal((await call('acquire', { run_id: 'r', owner: 'a' })).strike, undefined);
  });
});
