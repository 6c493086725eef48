// The child side of soak's wire protocol, version 1 (docs/wire.md), for a run store written to
// the seed RFC's JavaScript SPI. Transport-free: `Server.handle(line)` answers one request line
// with one response line; serve.mjs wires it to stdin and stdout.

import { existsSync } from 'node:fs';
import { basename, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

import { Steps } from './steps.mjs';

export const PROTOCOL = 1;

const JOURNAL_METHODS = ['acquire', 'renew', 'release', 'append', 'load', 'putMeta', 'getMeta', 'listRuns', 'delete'];
const BLOB_METHODS = ['put', 'get', 'list', 'delete'];

/** A failure of the shim or of the store's answers, not a store error: always untyped. */
export class ShimError extends Error {
  get name() {
    return 'ShimError';
  }
}

/** A hello the shim cannot boot from: the message names the problem and the fix. */
export class BootError extends Error {
  get name() {
    return 'StoreBootError';
  }
}

// -- error classification --------------------------------------------------------------------

// `code` values (compared after lower-casing and turning '-' into '_') for each typed error.
const CODES = new Map([
  ['lease_held', 'LeaseHeldError'],
  ['journal_order', 'JournalOrderError'],
  ['seq_order', 'JournalOrderError'],
  ['journal_order_violation', 'JournalOrderError'],
  ['busy', 'StoreBusyError'],
  ['store_busy', 'StoreBusyError'],
]);
const TYPED = new Set(CODES.values());

/** The error's own name (when it sets one) and the class names along its prototype chain. */
function classNames(err) {
  const names = [];
  if (err !== null && typeof err === 'object') {
    if (typeof err.name === 'string' && err.name !== 'Error') names.push(err.name);
    for (let p = Object.getPrototypeOf(err); p && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
      const ctor = Object.getOwnPropertyDescriptor(p, 'constructor')?.value;
      if (typeof ctor === 'function' && ctor.name && !names.includes(ctor.name)) names.push(ctor.name);
    }
  }
  return names;
}

/** The contract's typed error `err` stands for (by class name, then by `code`), or null. */
export function typedName(err) {
  for (const name of classNames(err)) if (TYPED.has(name)) return name;
  const code = err !== null && typeof err === 'object' ? err.code : undefined;
  if (typeof code === 'string') return CODES.get(code.toLowerCase().replaceAll('-', '_')) ?? null;
  return null;
}

function oneLine(text) {
  return String(text).split(/\s+/).filter(Boolean).join(' ');
}

/** The wire `error` object for something a store call threw. `runId` is the call's run. */
export function classify(err, runId = null) {
  const typed = typedName(err);
  const message = oneLine(err instanceof Error ? err.message : err);
  if (typed === 'LeaseHeldError') {
    const holder = err.holder ?? null;
    let wireHolder = null;
    try {
      wireHolder = holder === null ? null : encodeLease(holder);
    } catch {
      wireHolder = null; // a holder the shim cannot read is unknown, which the contract allows
    }
    return { type: typed, message, run_id: String(err.runId ?? err.run_id ?? runId ?? ''), holder: wireHolder };
  }
  if (typed !== null) return { type: typed, message };
  const type = err !== null && typeof err === 'object' ? classNames(err)[0] ?? 'Error' : typeof err;
  const code = err !== null && typeof err === 'object' && err.code !== undefined ? `[${err.code}] ` : '';
  return { type, message: code + message };
}

// -- values ----------------------------------------------------------------------------------

function need(cond, what) {
  if (!cond) throw new ShimError(what);
}

export function decodeBytes(b64) {
  need(typeof b64 === 'string', `expected a base64 string, got ${typeof b64}`);
  return new Uint8Array(Buffer.from(b64, 'base64'));
}

export function encodeBytes(bytes, what = 'bytes') {
  if (typeof bytes === 'string') throw new ShimError(`store returned a string for ${what}: return a Uint8Array (or Buffer)`);
  if (bytes instanceof ArrayBuffer) bytes = new Uint8Array(bytes);
  need(ArrayBuffer.isView(bytes), `store returned ${describe(bytes)} for ${what}: return a Uint8Array (or Buffer)`);
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
}

function describe(v) {
  if (v === null || v === undefined) return String(v);
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? `an object (${v.constructor?.name ?? 'Object'})` : `a ${typeof v}`;
}

export function decodeLease(w) {
  if (w === null || w === undefined) return undefined; // an absent lease: the SPI's omitted trailing argument
  need(typeof w === 'object' && typeof w.run_id === 'string' && Number.isInteger(w.epoch), 'malformed lease');
  return Object.freeze({ runId: w.run_id, owner: w.owner, epoch: w.epoch });
}

export function encodeLease(l) {
  need(l !== null && typeof l === 'object', `store returned ${describe(l)} for a Lease: return {runId, owner, epoch}`);
  const runId = l.runId ?? l.run_id;
  need(typeof runId === 'string' && typeof l.owner === 'string' && Number.isSafeInteger(Number(l.epoch)),
    'store returned a Lease without a string runId, a string owner and an integer epoch');
  return { run_id: runId, owner: l.owner, epoch: Number(l.epoch) };
}

export function decodeEntry(w) {
  need(w && Number.isInteger(w.seq), 'malformed journal entry');
  return { seq: w.seq, payload: decodeBytes(w.payload) };
}

function encodeEntry(e) {
  need(e !== null && typeof e === 'object' && Number.isSafeInteger(Number(e.seq)),
    `store returned ${describe(e)} for a JournalEntry: return {seq, payload}`);
  return { seq: Number(e.seq), payload: encodeBytes(e.payload, 'a JournalEntry payload') };
}

export function decodeMeta(w) {
  need(w && typeof w.run_id === 'string', 'malformed run meta');
  return { runId: w.run_id, status: w.status, segments: w.segments, payload: decodeBytes(w.payload) };
}

function encodeMeta(m) {
  need(m !== null && typeof m === 'object', `store returned ${describe(m)} for a RunMeta`);
  const runId = m.runId ?? m.run_id;
  need(typeof runId === 'string' && typeof m.status === 'string' && Number.isSafeInteger(Number(m.segments)),
    'store returned a RunMeta without a string runId, a string status and an integer segments');
  return { run_id: runId, status: m.status, segments: Number(m.segments), payload: encodeBytes(m.payload ?? new Uint8Array(), 'a RunMeta payload') };
}

function list(v, what, each) {
  need(Array.isArray(v), `store returned ${describe(v)} from ${what}: return an array`);
  return v.map(each);
}

function nullable(v, each) {
  return v === null || v === undefined ? null : each(v);
}

function runOfRef(ref) {
  const i = typeof ref === 'string' ? ref.indexOf('/') : -1;
  return i > 0 ? ref.slice(0, i) : null;
}

// Each op: the run its refusals are about, the store call, and the encoding of its result.
const OPS = {
  acquire: { run: (a) => a.run_id, call: (s, a) => s.journal.acquire(a.run_id, a.owner), out: encodeLease },
  // A renew that resolves to nothing renewed the lease it was given (same epoch, by the contract).
  renew: { run: (a) => a.lease?.run_id, call: (s, a) => s.journal.renew(decodeLease(a.lease)),
    out: (r, a) => encodeLease(r ?? decodeLease(a.lease)) },
  release: { run: (a) => a.lease?.run_id, call: (s, a) => s.journal.release(decodeLease(a.lease)) },
  append: { run: (a) => a.run_id, call: (s, a) => s.journal.append(a.run_id, decodeEntry(a.entry), decodeLease(a.lease)) },
  load: { run: (a) => a.run_id, call: (s, a) => s.journal.load(a.run_id), out: (r) => list(r, 'load', encodeEntry) },
  put_meta: { run: (a) => a.meta?.run_id, call: (s, a) => s.journal.putMeta(decodeMeta(a.meta), decodeLease(a.lease)) },
  get_meta: { run: (a) => a.run_id, call: (s, a) => s.journal.getMeta(a.run_id), out: (r) => nullable(r, encodeMeta) },
  list_runs: { run: () => null, call: (s) => s.journal.listRuns(), out: (r) => list(r, 'listRuns', encodeMeta) },
  delete: { run: (a) => a.run_id, call: (s, a) => s.journal.delete(a.run_id, decodeLease(a.lease)) },
  blob_put: { run: (a) => runOfRef(a.ref), call: (s, a) => s.transcripts.put(a.ref, decodeBytes(a.blob), decodeLease(a.lease)) },
  blob_get: { run: (a) => runOfRef(a.ref), call: (s, a) => s.transcripts.get(a.ref),
    out: (r) => nullable(r, (b) => encodeBytes(b, 'a blob')) },
  blob_list: { run: (a) => a.run_id, call: (s, a) => s.transcripts.list(a.run_id),
    out: (r) => list(r, 'transcripts.list', (x) => { need(typeof x === 'string', 'transcripts.list returned a non-string ref'); return x; }) },
  blob_delete: { run: (a) => runOfRef(a.ref), call: (s, a) => s.transcripts.delete(a.ref, decodeLease(a.lease)) },
};

// -- booting ---------------------------------------------------------------------------------

/** Load the store module at `modulePath` (resolved against `cwd`) and return its factory. */
export async function loadFactory(modulePath, cwd = process.cwd()) {
  if (!modulePath) {
    throw new BootError('no store module given: run `node adapters/js/serve.mjs ./my-store.mjs` (the module path after serve.mjs)');
  }
  const file = resolve(cwd, modulePath);
  if (!existsSync(file)) {
    throw new BootError(`store module ${file} not found: give its path relative to the directory soak runs in, or an absolute one`);
  }
  let mod;
  try {
    mod = await import(pathToFileURL(file).href);
  } catch (err) {
    throw new BootError(`store module ${file} failed to load: ${classNames(err)[0] ?? 'Error'}: ${oneLine(err?.message ?? err)} (fix the module, or install its dependencies)`);
  }
  const factory = typeof mod.createStore === 'function' ? mod.createStore : mod.default;
  if (typeof factory !== 'function') {
    throw new BootError(`store module ${file} exports no factory: export \`createStore({location, leaseTtlMs, options})\` (named or default) returning the store`);
  }
  return { factory, name: typeof mod.storeName === 'string' ? mod.storeName : basename(file) };
}

function missing(obj, methods) {
  return methods.filter((m) => typeof obj?.[m] !== 'function');
}

/**
 * Normalize what a factory returned: one object with the journal methods and `transcripts` (an
 * object, or a method returning one, as the seed's SqliteStore has), or a `{journal, transcripts}`
 * pair of one fencing domain.
 */
export async function normalizeStore(made, file) {
  if (made === null || typeof made !== 'object') {
    throw new BootError(`${file}: createStore returned ${describe(made)}: return (or resolve to) a store object or {journal, transcripts}`);
  }
  const pair = typeof made.journal === 'object' && made.journal !== null && typeof made.acquire !== 'function';
  const journal = pair ? made.journal : made;
  let transcripts = pair ? made.transcripts : journal.transcripts;
  if (typeof transcripts === 'function') transcripts = await transcripts.call(journal);
  const gaps = missing(journal, JOURNAL_METHODS).map((m) => `journal.${m}`);
  if (transcripts === null || typeof transcripts !== 'object') gaps.push('transcripts');
  else gaps.push(...missing(transcripts, BLOB_METHODS).map((m) => `transcripts.${m}`));
  if (gaps.length) {
    throw new BootError(`${file}: the store lacks ${gaps.join(', ')}: implement the SPI (adapters/js/README.md, "The module")`);
  }
  const ttl = Number(journal.leaseTtlMs);
  if (!Number.isSafeInteger(ttl) || ttl <= 0) {
    throw new BootError(`${file}: the store's leaseTtlMs is ${describe(journal.leaseTtlMs)}: set it to the ttl acquire grants, in ms (the factory receives leaseTtlMs)`);
  }
  const closers = [journal, pair ? made : null, transcripts].filter((o) => typeof o?.close === 'function');
  return { journal, transcripts, leaseTtlMs: ttl, closers: [...new Set(closers)] };
}

// -- the server ------------------------------------------------------------------------------

/** Serves one store object: one request at a time, in order (the caller awaits each answer). */
export class Server {
  constructor(modulePath, { cwd = process.cwd(), steps = new Steps() } = {}) {
    this.modulePath = modulePath;
    this.cwd = cwd;
    this.steps = steps;
    this.store = null;
    this.closed = false;
  }

  /** Answer one request line with one response line (no newline). */
  async handle(line) {
    let req;
    try {
      req = JSON.parse(line);
    } catch (err) {
      return JSON.stringify({ id: null, error: { type: 'ProtocolError', message: `request is not JSON: ${oneLine(err.message)}` } });
    }
    const id = req?.id ?? null;
    try {
      const strike = req?.strike;
      // k 0 counts the call's boundaries without stopping (the worker learns n before its first strike)
      const k = strike?.mode === 'step' && Number.isSafeInteger(strike.k) && strike.k >= 0 && this.store !== null
        && Object.hasOwn(OPS, req.op) ? strike.k : -1;
      if (k < 0) return JSON.stringify({ id, ...(await this.answer(req)) });
      this.steps.arm(k, [this.store.journal, this.store.transcripts]);
      let answer;
      let counted;
      try {
        answer = await this.answer(req);
      } finally {
        counted = this.steps.disarm();
      }
      return JSON.stringify({ id, ...answer, strike: counted });
    } catch (err) {
      return JSON.stringify({ id, error: { type: 'ShimError', message: `could not answer: ${oneLine(err?.message ?? err)}` } });
    }
  }

  async answer(req) {
    const op = req?.op;
    const args = req?.args ?? {};
    if (op === 'hello') {
      try {
        return { ok: await this.hello(args) };
      } catch (err) {
        return { error: err instanceof BootError || err?.name === 'ProtocolVersionError'
          ? { type: err.name, message: err.message } : { type: 'StoreBootError', message: bootMessage(err, this.modulePath) } };
      }
    }
    if (this.store === null) {
      return { error: { type: 'ProtocolError', message: `${op} before a successful hello: send hello (id 0) first` } };
    }
    if (op === 'close') {
      await this.close();
      return { ok: null };
    }
    const spec = Object.hasOwn(OPS, op) ? OPS[op] : null;
    if (spec === null) return { error: { type: 'ProtocolError', message: `unknown op ${JSON.stringify(op)} (wire protocol ${PROTOCOL})` } };
    let result;
    try {
      const pending = spec.call(this.store, args);
      this.steps.settling(pending);
      result = await pending;
    } catch (err) {
      return { error: err instanceof ShimError ? { type: err.name, message: err.message } : classify(err, spec.run(args) ?? null) };
    }
    try {
      return { ok: spec.out ? spec.out(result, args) : null };
    } catch (err) {
      return { error: { type: 'ShimError', message: oneLine(err.message) } };
    }
  }

  async hello(args) {
    if (args.version !== PROTOCOL) {
      const err = new Error(`this shim speaks wire protocol ${PROTOCOL}, not ${args.version}: use the soak and shim of one release`);
      err.name = 'ProtocolVersionError';
      throw err;
    }
    if (args.kind !== 'runs') {
      throw new BootError(`the JavaScript shim serves run stores (kind "runs"), not ${JSON.stringify(args.kind)}: serve a claims store with a server of its own`);
    }
    if (this.store !== null) throw new BootError('hello sent twice: start a new child for another store');
    const { factory, name } = await loadFactory(this.modulePath, this.cwd);
    const made = await factory({ location: args.location, leaseTtlMs: args.lease_ttl_ms, options: { ...(args.options ?? {}) } });
    this.store = await normalizeStore(made, this.modulePath);
    const { journal, transcripts, leaseTtlMs } = this.store;
    return {
      protocol: PROTOCOL,
      store: typeof journal.name === 'string' ? journal.name : name,
      lease_ttl_ms: leaseTtlMs,
      fenced_writes: journal.fencedWrites === true,
      blob_fenced_writes: transcripts.fencedWrites === true,
      injectable_clock: false,
    };
  }

  /** Close the store (idempotent); errors go to stderr, since the child is ending anyway. */
  async close() {
    if (this.closed || this.store === null) return;
    this.closed = true;
    for (const o of this.store.closers) {
      try {
        await o.close();
      } catch (err) {
        console.error(`soak js shim: store close failed: ${oneLine(err?.message ?? err)}`);
      }
    }
  }
}

function bootMessage(err, modulePath) {
  const what = classNames(err)[0] ?? typeof err;
  return `store ${modulePath} threw while booting: ${what}: ${oneLine(err?.message ?? err)} (fix the store's createStore, or its options)`;
}
